"""Command line for the ARC verifier.

    python -m verifiers.arc check --task TASK.json --program PROG.py [--task-id ID]
        prints one JSON object: per-input results (train, test) and a summary
    python -m verifiers.arc batch --tasks TASKS.json --programs PROGRAMS.jsonl [--out F]
        reads lines {"task_id": ..., "code": ...}; writes one JSON line per program (in
        input order) to stdout or --out, and a throughput summary to stderr

TASK.json / TASKS.json: Kaggle ARC format, one task ``{"train": [{"input", "output"}],
"test": [{"input"[, "output"]}]}`` or a mapping ``{task_id: task}``. Common options:
--workers N, --allow-module NAME (repeatable, e.g. evolution.dsl), --cache (use the
store's execution cache: $RATCHET_REDIS_URL or the local server).

Exit codes (every error is one line on stderr naming the file, the place and the fix):
    0  done (programs that fail are results, not errors)
    2  bad usage (argparse)
    3  an input file is missing or unreadable
    4  malformed input: invalid JSON / JSONL, a line without task_id/code, an unknown task id
    5  a task breaks ARC's rules (non-rectangular grid, cell outside 0..9, side > 30, ...)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from verifiers.arc.executor import ArcExecutor
from verifiers.arc.grids import ArcTask, GridError, load_tasks

EXIT_MISSING, EXIT_MALFORMED, EXIT_INVALID_TASK = 3, 4, 5
PROG = "python -m verifiers.arc"  # `ratchet verify` sets its own name


class CliError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(EXIT_MISSING, f"{what} {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(EXIT_MISSING, f"{what} {path}: cannot read it ({e})") from None


def _load_tasks(path: str) -> dict[str, ArcTask]:
    _read_text(path, "task file")  # the missing/unreadable check, with our exit code
    try:
        return load_tasks(path)
    except json.JSONDecodeError as e:
        raise CliError(EXIT_MALFORMED, f"task file {path}: invalid JSON at line {e.lineno} "
                       f"column {e.colno}: {e.msg}") from None
    except GridError as e:
        raise CliError(EXIT_INVALID_TASK, f"task file {path}: {e}") from None


def _executor(args: argparse.Namespace) -> ArcExecutor:
    cache = None
    if args.cache:
        from store import Store
        cache = Store.connect().exec_cache
    try:
        return ArcExecutor(workers=args.workers, allowed_modules=args.allow_module, cache=cache)
    except ValueError as e:
        raise CliError(2, str(e)) from None


def cmd_check(args: argparse.Namespace) -> int:
    tasks = _load_tasks(args.task)
    code = _read_text(args.program, "program")
    if args.task_id is not None:
        if args.task_id not in tasks:
            raise CliError(EXIT_MALFORMED, f"--task-id {args.task_id!r} is not in {args.task}; "
                           f"it has: {', '.join(sorted(tasks)[:10])}")
        task = tasks[args.task_id]
    elif len(tasks) == 1:
        task = next(iter(tasks.values()))
    else:
        raise CliError(EXIT_MALFORMED, f"{args.task} holds {len(tasks)} tasks; choose one "
                       "with --task-id")
    with _executor(args) as ex:
        result = ex.execute(task, code)
    print(json.dumps(result.to_dict()))
    return 0


def _read_programs(path: str, tasks: dict[str, ArcTask]) -> list[dict[str, Any]]:
    lines = []
    for n, line in enumerate(_read_text(path, "programs file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise CliError(EXIT_MALFORMED, f"programs file {path} line {n}: invalid JSON "
                           f"({e.msg})") from None
        if not (isinstance(item, dict) and isinstance(item.get("task_id"), str)
                and isinstance(item.get("code"), str)):
            raise CliError(EXIT_MALFORMED, f"programs file {path} line {n}: expected "
                           '{"task_id": "<id>", "code": "<python source>"}')
        if item["task_id"] not in tasks:
            raise CliError(EXIT_MALFORMED, f"programs file {path} line {n}: task_id "
                           f"{item['task_id']!r} is not in the tasks file")
        lines.append(item)
    return lines


def cmd_batch(args: argparse.Namespace) -> int:
    tasks = _load_tasks(args.tasks)
    items = _read_programs(args.programs, tasks)
    by_task: dict[str, list[int]] = {}
    for i, item in enumerate(items):
        by_task.setdefault(item["task_id"], []).append(i)
    out: list[str | None] = [None] * len(items)
    start = time.perf_counter()
    with _executor(args) as ex:
        for task_id, idx in by_task.items():
            results = ex.execute_many(tasks[task_id], [items[i]["code"] for i in idx])
            for i, r in zip(idx, results, strict=True):
                out[i] = json.dumps(r.to_dict())
        stats = ex.stats()
    elapsed = time.perf_counter() - start
    sink = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
    try:
        for line in out:
            sink.write(f"{line}\n")
    finally:
        if args.out:
            sink.close()
    rate = len(items) / elapsed if elapsed > 0 else 0.0
    print(json.dumps({"programs": len(items), "tasks": len(by_task),
                      "executed": stats["executed"], "reused": stats["reused"],
                      "workers": args.workers, "seconds": round(elapsed, 3),
                      "programs_per_s": round(rate, 1)}), file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--workers", type=int, default=1, help="sandbox worker processes")
    common.add_argument("--allow-module", action="append", default=[], metavar="NAME",
                        help="a module programs may import besides numpy and the stdlib set")
    common.add_argument("--cache", action="store_true", help="use the store's execution cache")
    c = sub.add_parser("check", parents=[common], help="run one program on one task")
    c.add_argument("--task", required=True, help="TASK.json (Kaggle ARC format)")
    c.add_argument("--program", required=True, help="PROG.py defining transform(grid)")
    c.add_argument("--task-id", help="which task, when TASK.json maps several")
    c.set_defaults(fn=cmd_check)
    b = sub.add_parser("batch", parents=[common], help="run many programs from a JSONL file")
    b.add_argument("--tasks", required=True, help="TASKS.json: task id -> task")
    b.add_argument("--programs", required=True, help='PROGRAMS.jsonl: {"task_id", "code"}')
    b.add_argument("--out", help="write results here instead of stdout")
    b.set_defaults(fn=cmd_batch)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers < 1:
        print("error: --workers must be >= 1", file=sys.stderr)
        return 2
    try:
        return args.fn(args)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.code


if __name__ == "__main__":
    sys.exit(main())
