"""`ratchet runs`: the experiments in the store, with their status and headline numbers.

    ratchet runs                       # every experiment: status, workload, last update, headline (or why it failed)
    ratchet runs show soar-demo        # one, by section: status (and the failure's cause), config, figures
    ratchet runs compare tpo-a tpo-b   # two runs' figures side by side, and the config fields that differ (old -> new)
    ratchet runs show soar-demo --json # the record as JSON (secrets were redacted when it was written)

Reads the store named by $RATCHET_REDIS_URL (else the machine's local server). Figures come
from each run's summary as the job runner recorded it when the run finished: its numeric
leaves, grouped by the object that holds them. A list of entries is read at its last entry
(`iterations[-1]`, named by its text fields), or, when its entries are series named by text
fields (scaling's `differences`: a strategy against a baseline at each k), at the last entry of
each series (`differences[strategy=verification, baseline=consistency]`). Numbers are rounded
as the logs and reports round them (common/fmt.py); --json keeps full precision. Exit status
2: an experiment the store does not have; 1: the store cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import numbers
import os
import re
import sys
import textwrap
import time
from dataclasses import asdict
from typing import Any

from common.fmt import delta, num
from store import Store
from store.connection import StoreUnavailable
from store.experiments import Experiment, changed_fields, shown, value_at

TOP = "(summary)"  # the group of the summary's own numbers (wall_s, ...)
NOISE = 1e-12  # a magnitude below this is float noise (a mean of zeros read -1.11e-16): shown as 0
CAUSE_CHARS = 200  # a failed run's headline: its one-line cause, cut here
WIDTH = 100  # show's figure lines wrap here
LABEL_CHARS = 30  # show's and compare's label column; a longer group name takes a line of its own
# `Name: message`, a traceback's or a Ray task's last line (`ValueError: ...`, `ray.exceptions.X: ...`,
# `RayTaskError(ValueError): ...`); a capital first letter, so `class_name: ...` detail lines are not one
_EXCEPTION_LINE = re.compile(r"^[A-Z]\w*(?:\.\w+)*(?:\([\w.]+\))?: ")
# a repr'd exception inside a message: `ActorDiedError('The actor died...\n\tclass_name: ...')`
_REPR_TAIL = re.compile(r"\\n.*?(?=['\"]\))")


# --- a failed run's cause ---------------------------------------------------------------------
def cause(error: str) -> str:
    """A failed run's error as one line: its last `Name: message` line (the exception a
    traceback or a Ray task ends with), a repr'd exception inside it cut at its first line
    break, at most CAUSE_CHARS characters (`ratchet runs show NAME --json` has the whole)."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if not lines:
        return ""
    line = next((line for line in reversed(lines) if _EXCEPTION_LINE.match(line)), lines[0])
    line = _REPR_TAIL.sub(" ...", line)
    return line if len(line) <= CAUSE_CHARS else line[:CAUSE_CHARS - 3] + "..."


def headline_of(e: Experiment) -> str:
    """What `ratchet runs` says of a run: why a failed or killed one stopped, else its headline."""
    if e.status in ("failed", "killed") and e.error:
        return cause(e.error)
    return e.headline or cause(e.error) or "-"


# --- figures: a summary's numbers, grouped --------------------------------------------------
def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _text_fields(entry: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in entry.items() if isinstance(v, str))


def _entries(items: list[Any]) -> list[tuple[str, dict[str, Any], str]]:
    """(suffix, entry, label) of the entries a list of dicts is read at: the last entry of each
    series when the entries repeat the same text fields (a strategy at each k), else the last
    entry, labelled by its text fields."""
    dicts = [x for x in items if isinstance(x, dict)]
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for entry in dicts:
        series[_text_fields(entry)] = entry  # the last of each, in the order they first came
    if 1 < len(series) < len(dicts) and all(series):
        # the fields that tell the series apart first (strategy=..., then baseline=consistency)
        varying = {k for key in series for k, v in key if any(dict(other).get(k) != v for other in series)}
        return [("[" + ", ".join(f"{k}={v}" for k, v in sorted(key, key=lambda kv: kv[0] not in varying)) + "]",
                 entry, "") for key, entry in series.items()]
    return [("[-1]", items[-1], ", ".join(f"{k} {v}" for k, v in _text_fields(items[-1])))]


def figures(summary: Any) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """({group: {field: value}}, {group: label}) of a summary's numeric leaves. A group is the
    dotted path of the object holding them (TOP for the summary's own); a label names the
    entry a `[-1]` group was read at by its text fields (`strategy verification, baseline ...`)."""
    groups: dict[str, dict[str, float]] = {}
    labels: dict[str, str] = {}

    def walk(node: dict[str, Any], path: str) -> None:
        for k, v in node.items():
            if _is_number(v):
                groups.setdefault(path or TOP, {})[str(k)] = float(v)
            elif isinstance(v, dict):
                walk(v, f"{path}.{k}" if path else str(k))
            elif isinstance(v, list) and v and isinstance(v[-1], dict):
                for suffix, entry, label in _entries(v):
                    group = f"{path}.{k}{suffix}" if path else f"{k}{suffix}"
                    if label:
                        labels[group] = label
                    walk(entry, group)

    if isinstance(summary, dict):
        walk(summary, "")
    return groups, labels


def headline_numbers(summary: Any) -> dict[str, float]:
    """The figures as dotted keys (`iterations[-1].solved`, `wall_s`): what --json prints."""
    groups, _ = figures(summary)
    return {(field if group == TOP else f"{group}.{field}"): x for group, fields in groups.items()
            for field, x in fields.items()}


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return num(0.0 if abs(x) < NOISE else x)


def _change(x: float | None, y: float | None) -> str:
    """y - x as the logs write a change (+0.012, -3), or 0 when it is below the numbers' own precision."""
    if x is None or y is None:
        return ""
    d = y - x
    return "0" if abs(d) <= max(NOISE, 1e-9 * max(abs(x), abs(y))) else delta(d)


# --- list, show, compare ----------------------------------------------------------------------
def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


def list_table(experiments: list[Experiment]) -> str:
    rows = [("experiment", "workload", "status", "updated", "headline")]
    rows += [(e.name, e.workload, e.status, _when(e.updated), headline_of(e)) for e in experiments]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows)


def _section(title: str, rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in rows)
    return ["", title] + [f"  {k.ljust(width)}  {v}".rstrip() for k, v in rows]


def _change_text(old: dict[str, Any], new: dict[str, Any], fields: list[str]) -> list[str]:
    """`field  old -> new` per field, values as the record keeps them (secrets as ***)."""
    width = max(map(len, fields), default=0)
    return [f"  {f.ljust(width)}  {shown(value_at(old, f))} -> {shown(value_at(new, f))}" for f in fields]


def _figure_lines(group: str, label: str, fields: dict[str, float]) -> list[str]:
    """One group as `  name  field value, field value` wrapped at WIDTH (a long name on its own line)."""
    name = group + (f" ({label})" if label else "")
    values = ", ".join(f"{k} {_num(x)}" for k, x in fields.items())
    indent = " " * (LABEL_CHARS + 4)
    if len(name) > LABEL_CHARS:
        return [f"  {name}"] + textwrap.wrap(values, WIDTH, initial_indent=indent, subsequent_indent=indent)
    return textwrap.wrap(values, WIDTH, initial_indent=f"  {name.ljust(LABEL_CHARS)}  ", subsequent_indent=indent)


def show_text(e: Experiment) -> str:
    """The record by section: status (a failure's cause in one line), config (its changes with
    their values where the record kept them), and the last finished run's figures by group."""
    status = [("status", e.status)]
    if e.error:
        status.append(("cause", cause(e.error)))
        if cause(e.error) != e.error.strip():
            status.append(("", f"(the whole error: ratchet runs show {e.name} --json)"))
    status += [("created", _when(e.created)),
               ("started", _when(e.started) + (f" on {e.host} (pid {e.pid})" if e.host else "")),
               ("finished", _when(e.finished))]
    lines = [f"{e.name} ({e.workload})"] + _section("status", status)
    config = [("hash", e.config_hash or "-")]
    runs_dir = e.config.get("runs_dir") if isinstance(e.config, dict) else None
    if runs_dir:
        config.append(("file", f"{runs_dir}/{e.name}/config.yaml"))
    for change in e.config_changes:  # reruns allowed to change it; values where the record kept them
        values = change.get("values")
        what = (", ".join(f"{f} {shown(old)} -> {shown(new)}" for f, (old, new) in values.items()) if values
                else ", ".join(change.get("fields", [])) or "?")
        config.append(("changed", f"{_when(change['at'])}: {what}"))
    lines += _section("config", config)
    groups, labels = figures(e.summary)
    lines += ["", "figures" + (f" (last finished run, {_when(e.finished)})" if groups else "")]
    if e.headline:
        lines.append(f"  headline  {e.headline}")
    for group, fields in groups.items():
        lines += _figure_lines(group, labels.get(group, ""), fields)
    if not groups:
        lines.append("  none yet (recorded when a run finishes)")
    return "\n".join(lines)


def compare_rows(a: Experiment, b: Experiment) -> list[tuple[str, float | None, float | None]]:
    na, nb = headline_numbers(a.summary), headline_numbers(b.summary)
    return [(k, na.get(k), nb.get(k)) for k in [*na, *(k for k in nb if k not in na)]]


def compare_text(a: Experiment, b: Experiment) -> str:
    """Both runs' figures side by side with b - a, grouped as `show` groups them; then the config
    fields that differ with their values in a and in b."""
    (ga, la), (gb, lb) = figures(a.summary), figures(b.summary)
    table: list[tuple[str, ...]] = [("", a.name, b.name, "b - a"), ("workload", a.workload, b.workload, ""),
                                    ("status", a.status, b.status, "")]
    for group in [*ga, *(g for g in gb if g not in ga)]:
        x, y = ga.get(group, {}), gb.get(group, {})
        label_a, label_b = la.get(group, ""), lb.get(group, "")
        label = (label_a or label_b if label_a == label_b or not (label_a and label_b)
                 else f"{a.name}: {label_a}; {b.name}: {label_b}")
        table.append((group + (f" ({label})" if label else ""),))  # a heading: one cell
        for field in [*x, *(f for f in y if f not in x)]:
            table.append((f"  {field}", _num(x.get(field)) if field in x else "-",
                          _num(y.get(field)) if field in y else "-", _change(x.get(field), y.get(field))))
    cells = [r for r in table if len(r) == 4]
    widths = [min(max(len(r[0]) for r in cells), LABEL_CHARS)] + [max(len(r[i]) for r in cells) for i in (1, 2, 3)]
    lines = []
    for r in table:
        if len(r) == 1:
            lines.append(r[0])
            continue
        label = r[0].ljust(widths[0]) if len(r[0]) <= widths[0] else r[0] + "\n" + " " * widths[0]
        lines.append("  ".join([label, *(c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True))]).rstrip())
    diff = changed_fields(a.config, b.config)
    lines += ["", f"config fields that differ ({a.name} -> {b.name}):" if diff else "config fields that differ: none"]
    lines += _change_text(a.config, b.config, diff)
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ratchet runs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("list", help="every experiment (the default)")
    show = sub.add_parser("show", help="one experiment's record and numbers")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="print the record as JSON")
    compare = sub.add_parser("compare", help="two experiments' numbers side by side")
    compare.add_argument("a")
    compare.add_argument("b")
    compare.add_argument("--json", action="store_true", help="print the rows as JSON")
    return parser


def _get(store: Store, name: str) -> Experiment:
    try:
        return store.experiments.get(name)
    except KeyError as e:
        print(f"ratchet runs: {e.args[0]}", file=sys.stderr)
        raise SystemExit(2) from None
    except ValueError as e:  # not a valid experiment name
        print(f"ratchet runs: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def output(args: argparse.Namespace, store: Store) -> str:
    """What the command prints."""
    if args.command == "show":
        e = _get(store, args.name)
        return json.dumps(asdict(e), indent=1) if args.json else show_text(e)
    if args.command == "compare":
        a, b = _get(store, args.a), _get(store, args.b)
        if args.json:
            return json.dumps([{"field": k, args.a: x, args.b: y} for k, x, y in compare_rows(a, b)], indent=1)
        return compare_text(a, b)
    experiments = store.experiments.list()
    if args.json:
        return json.dumps([{"name": e.name, "workload": e.workload, "status": e.status, "updated": e.updated,
                            "headline": e.headline, "error": e.error} for e in experiments], indent=1)
    return list_table(experiments) if experiments else "no experiments in the store yet (a job records one when it starts)"


def main(argv: list[str] | None = None, store: Store | None = None) -> None:
    """The output is the product (tables or JSON on stdout), so this prints rather than logs."""
    args = _parser().parse_args(argv)
    try:
        store = store or Store.connect()
    except StoreUnavailable as e:
        print(f"ratchet runs: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    text = output(args, store)
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader stopped early (`ratchet runs show X | head`): as Python's docs advise, point
        # stdout at devnull so the interpreter's own flush at exit raises nothing, and exit 1
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
