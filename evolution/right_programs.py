"""Which tasks each search of a SOAR experiment found a right program for, read from the store.

    python -m evolution.right_programs arc-2it               # one line per search archive
    python -m evolution.right_programs arc-2it --primitives  # which DSL primitives each model wrote

A report counts solved tasks; this names them, so one can ask which tasks a model's learning
moved (or which held-out tasks its right programs could have taught: `evolution.dsl_coverage
--config`). A program is right when it is right on every train and test pair of its task: what
hindsight learns as a solution. The report's oracle counts less strictly (a program right on the
test outputs, whatever it did on the train pairs), so the table gives both. The experiment's own archive holds every iteration's search
(sampling seed search.seed); each measured search has its own, named
`<experiment>.<sampler>.<split>.s<seed>` (evolution/controls.py).

`--primitives` counts, per archive and model version, the DSL primitives its programs call: a model
that learns its own samples can narrow onto a few primitives and stop writing the rest.
"""

from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from common.logs import setup_logging
from evolution.programs import PRIMITIVES, called_primitives
from store import Store, keys


def is_right(record: dict[str, Any]) -> bool:
    """Right on every train and test pair; a program that ran on no pair is not right."""
    train, test = record.get("train_correct") or [], record.get("test_correct") or []
    return bool(train) and bool(test) and all(train) and all(test)


def archives(store: Store, experiment: str) -> list[str]:
    """The experiment's own archive and its measured searches' archives, by name."""
    own = keys.exp(experiment, "tasks")
    found = {k.decode() for k in store.client.scan_iter(match=keys.exp(experiment) + ".*:tasks", count=1000)}
    names = [k.split(":")[2] for k in sorted(found)]
    return ([experiment] if store.client.exists(own) else []) + names


def right_on_test(record: dict[str, Any]) -> bool:
    """Right on every test pair: what the report's oracle counts."""
    test = record.get("test_correct") or []
    return bool(test) and all(test)


def right_tasks(store: Store, archive: str) -> tuple[list[str], list[str], list[str]]:
    """(tasks searched, tasks with a right program, tasks with a program right on the test), sorted."""
    a = store.archive(archive)
    searched = sorted(a.counts())
    records = {t: a.get_task(t, with_code=False) for t in searched}
    right = [t for t in searched if any(is_right(r) for r in records[t])]
    on_test = [t for t in searched if any(right_on_test(r) for r in records[t])]
    return searched, right, on_test


def table(store: Store, experiment: str) -> str:
    rows = ["| archive | tasks | with a right program | which | right on the test only (oracle) |",
            "|---|---|---|---|---|"]
    for name in archives(store, experiment):
        searched, right, on_test = right_tasks(store, name)
        lucky = [t for t in on_test if t not in right]
        rows.append(f"| {name} | {len(searched)} | {len(right)} | {' '.join(right)} | {' '.join(lucky)} |")
    if len(rows) == 2:
        raise SystemExit(f"no archive of experiment {experiment!r} in the store: is it the right Redis and name?")
    return "\n".join(rows)


def primitive_counts(codes: list[str]) -> Counter[str]:
    """In how many of the programs each DSL primitive is called (once a program)."""
    return Counter(p for code in codes for p in called_primitives(code))


def primitives_table(store: Store, experiment: str) -> str:
    rows = [f"| archive | model | programs | primitives used (of {len(PRIMITIVES)}) | share of the two most used "
            "| most used |", "|---|---|---|---|---|---|"]
    for name in archives(store, experiment):
        a = store.archive(name)
        by_model: dict[str, list[str]] = {}
        for t in sorted(a.counts()):
            for r in a.get_task(t):
                by_model.setdefault(str(r.get("model_version", "?")), []).append(r["code"])
        for model, codes in sorted(by_model.items()):
            counts = primitive_counts(codes)
            top = counts.most_common(2)
            share = sum(c for _, c in top) / max(1, sum(counts.values()))
            rows.append(f"| {name} | {model} | {len(codes)} | {len(counts)} | {share:.2f} | "
                        f"{' '.join(p for p, _ in top)} |")
    if len(rows) == 2:
        raise SystemExit(f"no archive of experiment {experiment!r} in the store: is it the right Redis and name?")
    return "\n".join(rows)


def main(argv: list[str] | None = None, store: Store | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment")
    parser.add_argument("--primitives", action="store_true", help="the DSL primitives each model wrote")
    args = parser.parse_args(argv)
    setup_logging()
    show = primitives_table if args.primitives else table
    print(show(store or Store.connect(), keys.check_name(args.experiment)))


if __name__ == "__main__":
    main()
