"""`ratchet runs`: the experiments in the store, with their status and headline numbers.

    ratchet runs                       # every experiment: status, workload, last update, headline
    ratchet runs show soar-demo        # one: status, driver, error, config changes, its numbers
    ratchet runs compare tpo-a tpo-b   # two summaries side by side, and the config fields that differ
    ratchet runs show soar-demo --json # the record as JSON (secrets were redacted when it was written)

Reads the store named by $RATCHET_REDIS_URL (else the machine's local server). Numbers come
from each run's summary as the job runner recorded it when the run finished: numeric leaves,
with lists of per-iteration entries read at their last entry (`iterations[-1].solved`).
Exit status 2: an experiment the store does not have; 1: the store cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import numbers
import sys
import time
from dataclasses import asdict
from typing import Any

from store import Store
from store.connection import StoreUnavailable
from store.experiments import Experiment, changed_fields


def headline_numbers(summary: Any, prefix: str = "") -> dict[str, float]:
    """Numeric leaves as dotted keys; a list of dicts counts by its last entry (`key[-1].field`)."""
    out: dict[str, float] = {}
    if isinstance(summary, dict):
        for k, v in summary.items():
            out |= headline_numbers(v, f"{prefix}{k}.")
    elif isinstance(summary, list) and summary and isinstance(summary[-1], dict):
        out |= headline_numbers(summary[-1], f"{prefix.rstrip('.')}[-1].")
    elif isinstance(summary, numbers.Real) and not isinstance(summary, bool):
        out[prefix.rstrip(".")] = float(summary)
    return out


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t)) if t else "-"


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if float(x).is_integer() and abs(x) < 1e12 else f"{x:.4g}"


def list_table(experiments: list[Experiment]) -> str:
    rows = [("experiment", "workload", "status", "updated", "headline")]
    rows += [(e.name, e.workload, e.status, _when(e.updated), e.headline or e.error or "-") for e in experiments]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows)


def show_text(e: Experiment) -> str:
    lines = [f"experiment  {e.name} ({e.workload})", f"status      {e.status}" + (f": {e.error}" if e.error else ""),
             f"created     {_when(e.created)}", f"started     {_when(e.started)}"
             + (f" on {e.host} (pid {e.pid})" if e.host else ""), f"finished    {_when(e.finished)}",
             f"config      hash {e.config_hash or '-'}"]
    for change in e.config_changes:
        lines.append(f"            changed {_when(change['at'])}: {', '.join(change['fields']) or '?'}")
    if e.headline:
        lines.append(f"headline    {e.headline}")
    numbers_ = headline_numbers(e.summary)
    if numbers_:
        width = max(map(len, numbers_))
        lines += ["", "numbers (last finished run):"] + [f"  {k.ljust(width)}  {_num(v)}" for k, v in numbers_.items()]
    elif e.status != "done":
        lines.append("numbers     none yet (recorded when a run finishes)")
    return "\n".join(lines)


def compare_rows(a: Experiment, b: Experiment) -> list[tuple[str, float | None, float | None]]:
    na, nb = headline_numbers(a.summary), headline_numbers(b.summary)
    return [(k, na.get(k), nb.get(k)) for k in [*na, *(k for k in nb if k not in na)]]


def compare_text(a: Experiment, b: Experiment) -> str:
    rows = compare_rows(a, b)
    header = ("", a.name, b.name, "b - a")
    table = [header, ("workload", a.workload, b.workload, ""), ("status", a.status, b.status, "")]
    table += [(k, _num(x), _num(y), _num(y - x) if x is not None and y is not None else "") for k, x, y in rows]
    widths = [max(len(r[i]) for r in table) for i in range(4)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in table]
    diff = changed_fields(a.config, b.config)
    lines += ["", "config fields that differ: " + (", ".join(diff) if diff else "none")]
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


def main(argv: list[str] | None = None, store: Store | None = None) -> None:
    """The output is the product (tables or JSON on stdout), so this prints rather than logs."""
    args = _parser().parse_args(argv)
    try:
        store = store or Store.connect()
    except StoreUnavailable as e:
        print(f"ratchet runs: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    if args.command == "show":
        e = _get(store, args.name)
        print(json.dumps(asdict(e), indent=1) if args.json else show_text(e))
    elif args.command == "compare":
        a, b = _get(store, args.a), _get(store, args.b)
        if args.json:
            print(json.dumps([{"field": k, args.a: x, args.b: y} for k, x, y in compare_rows(a, b)], indent=1))
        else:
            print(compare_text(a, b))
    else:
        experiments = store.experiments.list()
        if args.json:
            print(json.dumps([{"name": e.name, "workload": e.workload, "status": e.status, "updated": e.updated,
                               "headline": e.headline, "error": e.error} for e in experiments], indent=1))
        elif experiments:
            print(list_table(experiments))
        else:
            print("no experiments in the store yet (a job records one when it starts)")


if __name__ == "__main__":
    main()
