"""Mutation testing of the pure-logic modules with cosmic-ray: a kill rate per module.

    make mutate                                # every module below (hours on 2 cores)
    make mutate MODULES="pairs fence curves"   # some of them
    python scripts/mutate.py --list            # the modules, their tests and what is left out
    make mutate-changed BUDGET_S=900           # only the modules a branch changed (or their tests)

Each module's mutants run only against that module's own fast test files (`tests` below), one
mutant at a time, the file mutated in place and restored (do not edit the tree meanwhile). The
operators are the one-line slips a refactor makes: a number off by one, a comparison turned or
its boundary moved, + for -, and/or swapped, a condition negated, True for False, a loop
skipped (OPERATORS). Functions that only draw or format (`skip`) are not mutated. Survivors
are written with their diffs to runs/mutate/<module>.txt; docs/testing.md lists the ones left
on purpose (equivalent mutants) with a reason each. Mutants inside annotations Python never
evaluates are not run (`unevaluated_annotations`; `--with-annotations` runs them) and are counted
apart: `|` -> `&` in `int | None` is no bug under `from __future__ import annotations`.

Before the mutants, each module's tests run once unmutated: a failing test would count every
mutant as killed, so the run stops instead; the mutants' time limit is ten times that run
(at least 30 s, at most the target's `timeout_s`), so a mutant that loops costs little.
`--changed [BASE]` picks the modules whose file or own test files differ from BASE (default:
the merge-base with origin/main where that exists, else HEAD: the uncommitted changes), new
untracked files included; `--budget-s` starts no module after that many seconds.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shlex
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from drills.mutation_targets import TARGETS, Target

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "runs" / "mutate"
OPERATORS = [
    "core/NumberReplacer",
    *(f"core/ReplaceComparisonOperator_{a}_{b}" for a, b in (
        ("Eq", "NotEq"), ("NotEq", "Eq"), ("Is", "IsNot"), ("IsNot", "Is"),  # negated
        ("Lt", "LtE"), ("LtE", "Lt"), ("Gt", "GtE"), ("GtE", "Gt"),  # boundary moved
        ("Lt", "Gt"), ("Gt", "Lt"), ("LtE", "GtE"), ("GtE", "LtE"))),  # direction turned
    *(f"core/ReplaceBinaryOperator_{a}_{b}" for a, b in (
        ("Add", "Sub"), ("Sub", "Add"), ("Mul", "Div"), ("Div", "Mul"), ("FloorDiv", "Div"),
        ("Pow", "Mul"), ("Mod", "FloorDiv"), ("BitOr", "BitAnd"), ("BitAnd", "BitOr"),
        ("LShift", "RShift"), ("RShift", "LShift"))),
    "core/ReplaceUnaryOperator_USub_UAdd", "core/ReplaceUnaryOperator_Delete_Not",
    "core/ReplaceUnaryOperator_Delete_Invert",
    "core/ReplaceAndWithOr", "core/ReplaceOrWithAnd", "core/AddNot",
    "core/ReplaceTrueWithFalse", "core/ReplaceFalseWithTrue",
    "core/ReplaceBreakWithContinue", "core/ReplaceContinueWithBreak", "core/ZeroIterationForLoop",
]




def _name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return getattr(node, "name", None)


def skipped_lines(path: Path, t: Target) -> set[int]:
    """Lines of the top-level statements `t.skip` names, or of those `t.only` does not."""
    tree = ast.parse(path.read_text())
    names = {_name(n) for n in tree.body}
    missing = (set(t.skip) | set(t.only)) - names
    if missing:
        raise SystemExit(f"scripts/mutate.py: {path} has no {sorted(missing)}; update TARGETS")
    out: set[int] = set()
    for node in tree.body:
        if _name(node) in t.skip or (t.only and _name(node) not in t.only):
            out.update(range(node.lineno, node.end_lineno + 1))
    return out


def line_ranges(path: Path, skip: set[int]) -> list[str]:
    """The module's lines minus `skip`, as cosmic-ray's line filter wants them ("a-b")."""
    n = len(path.read_text().splitlines())
    keep = [i for i in range(1, n + 1) if i not in skip]
    ranges, start = [], None
    for i, line in enumerate(keep):
        if start is None:
            start = line
        if i + 1 == len(keep) or keep[i + 1] != line + 1:
            ranges.append(f"{start}-{line}")
            start = None
    return ranges


def _char_col(lines: list[str], line: int, byte_col: int) -> int:
    """ast's column (UTF-8 bytes) as the characters cosmic-ray (parso) counts."""
    return len(lines[line - 1].encode()[:byte_col].decode(errors="ignore"))


def unevaluated_annotations(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Spans ((line, col), (line, col)) of the annotations nothing evaluates, in a module with
    `from __future__ import annotations` (else none: annotations run at definition time).

    Those are the parameters' and return values' of functions, and local variables'. Left out on
    purpose: class-level annotations (common/config.py resolves a config's with get_type_hints)
    and constructors' parameters (the judge registry checks judge.kwargs against them)."""
    tree = ast.parse(source)
    if not any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
               any(a.name == "annotations" for a in n.names) for n in tree.body):
        return []
    lines, found = source.splitlines(), []

    def visit(node: ast.AST, in_function: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name != "__init__":
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
            found.extend(p.annotation for p in params if p.annotation is not None)
            if node.returns is not None:
                found.append(node.returns)
        if isinstance(node, ast.AnnAssign) and in_function:
            found.append(node.annotation)
        inside = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        if isinstance(node, ast.ClassDef):
            inside = False  # a class body inside a function: its annotations are class-level
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    return [((n.lineno, _char_col(lines, n.lineno, n.col_offset)),
             (n.end_lineno, _char_col(lines, n.end_lineno, n.end_col_offset))) for n in found]


ANNOTATION_FILTER = "Filtered annotation (never evaluated)"  # the skipped mutants' output in the session


def skip_annotations(db: Path, source: str) -> int:
    """Mark the session's pending mutants inside `unevaluated_annotations` skipped; how many."""
    spans = unevaluated_annotations(source)
    with sqlite3.connect(db) as con:
        pending = con.execute("SELECT job_id, start_pos_row, start_pos_col, end_pos_row, end_pos_col FROM mutation_specs "
                              "WHERE job_id NOT IN (SELECT job_id FROM work_results)").fetchall()
        inside = [job for job, *pos in pending
                  if any(a <= (pos[0], pos[1]) and (pos[2], pos[3]) <= b for a, b in spans)]
        con.executemany("INSERT INTO work_results (worker_outcome, output, job_id) VALUES (?, ?, ?)",
                        [("SKIPPED", ANNOTATION_FILTER, job) for job in inside])
    return len(inside)


def config(t: Target, python: str) -> str:
    every = json.dumps  # TOML strings and lists of strings are JSON's
    command = f"{python} -m pytest -x -q -p no:cacheprovider {t.tests}"
    lines = line_ranges(ROOT / t.path, skipped_lines(ROOT / t.path, t))
    return "\n".join([
        "[cosmic-ray]",
        f"module-path = {every(t.path)}",
        f"timeout = {t.timeout_s}",
        "excluded-modules = []",
        f"test-command = {every(command)}",
        "[cosmic-ray.distributor]",
        'name = "local"',
        "[cosmic-ray.filters.operators-filter]",
        # one regex that matches every operator outside OPERATORS
        f"exclude-operators = [{every('^(?!(' + '|'.join(OPERATORS) + ')$)')}]",
        "[cosmic-ray.filters.line-filter]",
        f"lines = {{ {every(t.path)} = {every(lines)} }}",
        "",
    ])


def tally(db: Path, cosmic_ray: str) -> tuple[int, int, list[dict]]:
    """(killed, survived, survivors) from a finished session."""
    dump = subprocess.run([cosmic_ray, "dump", str(db)], capture_output=True, text=True, check=True).stdout
    killed, survivors = 0, []
    for line in dump.splitlines():
        item, result = json.loads(line)
        if not result or result.get("worker_outcome") != "normal":
            continue  # skipped by a filter, or cosmic-ray itself failed
        if result.get("test_outcome") == "killed":
            killed += 1
        elif result.get("test_outcome") == "survived":
            survivors.append({"mutation": item["mutations"][0], "diff": result.get("diff", "")})
    return killed, len(survivors), survivors


def baseline(t: Target, python: str, env: dict[str, str]) -> float:
    """Seconds the module's tests take unmutated; raises when they fail (every mutant would look killed)."""
    started = time.monotonic()
    proc = subprocess.run(f"{python} -m pytest -x -q -p no:cacheprovider {t.tests}", shell=True, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=t.timeout_s)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"{t.path}: its tests fail without any mutant ({t.tests}); fix them first:\n{tail}")
    return time.monotonic() - started


def mutant_timeout(t: Target, baseline_s: float) -> float:
    """Ten times the unmutated run, at least 30 s, at most the target's own limit."""
    return min(t.timeout_s, max(30.0, 10 * baseline_s))


def run(name: str, t: Target, tools: Path, python: str, out: Path, recheck: bool,
        with_annotations: bool = False) -> tuple[int, int, float, int]:
    """(killed, survived, seconds, mutants in unevaluated annotations not run) of one module."""
    out.mkdir(parents=True, exist_ok=True)
    cfg, db, stamp = out / f"{name}.toml", out / f"{name}.sqlite", out / f"{name}.sha256"
    source = hashlib.sha256((ROOT / t.path).read_bytes()).hexdigest()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cr = str(tools / "cosmic-ray")
    started = time.monotonic()
    t = replace(t, timeout_s=mutant_timeout(t, baseline(t, python, env)))
    cfg.write_text(config(t, python))
    if recheck:  # the same mutants (same source), survivors run again against today's tests
        if not db.exists() or not stamp.exists() or stamp.read_text() != source:
            raise SystemExit(f"--recheck {name}: no session for this version of {t.path} in {out}; run without it")
        with sqlite3.connect(db) as con:
            con.execute("DELETE FROM work_results WHERE test_outcome = 'SURVIVED'")
            if with_annotations:
                con.execute("DELETE FROM work_results WHERE output = ?", (ANNOTATION_FILTER,))
    else:
        db.unlink(missing_ok=True)
        subprocess.run([cr, "init", str(cfg), str(db)], cwd=ROOT, env=env, check=True)
        subprocess.run([str(tools / "cr-filter-operators"), str(db), str(cfg)], cwd=ROOT, env=env, check=True)
        subprocess.run([str(tools / "cr-filter-lines"), "--config", str(cfg), str(db)], cwd=ROOT, env=env,
                       check=True)
        stamp.write_text(source)
    if not with_annotations:  # a recheck's survivors too, were they from a run with annotations
        skip_annotations(db, (ROOT / t.path).read_text())
    subprocess.run([cr, "exec", str(cfg), str(db)], cwd=ROOT, env=env, check=True)
    killed, survived, survivors = tally(db, cr)
    with sqlite3.connect(db) as con:
        annotations = con.execute("SELECT count(*) FROM work_results WHERE output = ?", (ANNOTATION_FILTER,)).fetchone()[0]
    with open(out / f"{name}.txt", "w") as f:
        f.write(f"{t.path}: {killed} killed, {survived} survived, {annotations} in unevaluated annotations not run\n\n")
        for s in survivors:
            m = s["mutation"]
            f.write(f"--- {m['operator_name']} #{m['occurrence']} line {m['start_pos'][0]}\n")
            f.write("".join(s["diff"]) if isinstance(s["diff"], list) else s["diff"])
            f.write("\n")
    return killed, survived, time.monotonic() - started, annotations


def test_files(t: Target) -> set[str]:
    """The test files among a target's pytest arguments (node ids cut to their file; -k's expression is not one)."""
    args = shlex.split(t.tests)
    return {a.split("::")[0] for i, a in enumerate(args)
            if a.split("::")[0].endswith(".py") and not (i and args[i - 1] in ("-k", "-m", "-p"))}


def changed_modules(files: list[str], targets: dict[str, Target]) -> list[str]:
    """The targets, in TARGETS' order, whose module or one of whose own test files is in `files`."""
    changed = set(files)
    return [n for n, t in targets.items() if t.path in changed or test_files(t) & changed]


def default_base() -> str:
    """The merge-base with origin/main where that exists (a branch's own changes), else HEAD."""
    merge = subprocess.run(["git", "merge-base", "HEAD", "origin/main"], cwd=ROOT, capture_output=True, text=True)
    return merge.stdout.strip() if merge.returncode == 0 and merge.stdout.strip() else "HEAD"


def changed_files(base: str) -> list[str]:
    """Files that differ between `base` and the working tree, and new files git does not ignore."""
    def git(*a: str) -> list[str]:
        proc = subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"--changed {base}: git {' '.join(a)} failed: {proc.stderr.strip()}")
        return proc.stdout.splitlines()
    return sorted(set(git("diff", "--name-only", base, "--")) | set(git("ls-files", "--others", "--exclude-standard")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", help=f"names among {', '.join(TARGETS)} (default: all)")
    ap.add_argument("--tools", default=str(ROOT / ".venv-mutate" / "bin"), help="where cosmic-ray is installed")
    ap.add_argument("--out", default=str(OUT), help="where sessions and survivor lists go")
    ap.add_argument("--recheck", action="store_true",
                    help="run only the last session's survivors again (after writing tests that should kill them)")
    ap.add_argument("--with-annotations", action="store_true",
                    help="also run the mutants inside annotations nothing evaluates (unevaluated_annotations)")
    ap.add_argument("--list", action="store_true", help="print the modules and their tests, then stop")
    ap.add_argument("--tests", help="pytest arguments instead of the module's own (one module only): "
                    "e.g. an older set of test files, for a before/after comparison")
    ap.add_argument("--changed", nargs="?", const="", metavar="BASE",
                    help="only the modules whose file or own tests differ from BASE (a commit; default: the "
                         "merge-base with origin/main, else HEAD, i.e. the uncommitted changes)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="start no module after this many seconds (the ones left are named)")
    args = ap.parse_args()
    unknown = [m for m in args.modules if m not in TARGETS]
    if unknown:
        raise SystemExit(f"unknown modules {unknown}; known: {', '.join(TARGETS)}")
    names = args.modules or list(TARGETS)
    if args.changed is not None:
        base = args.changed or default_base()
        names = [n for n in changed_modules(changed_files(base), TARGETS) if n in names]
        print(f"[mutate] changed since {base}: {', '.join(names) or 'no mutated module or its tests'}", flush=True)
        if not names:
            return
    targets = dict(TARGETS)
    if args.tests:
        if len(names) != 1:
            raise SystemExit("--tests needs exactly one module")
        targets[names[0]] = replace(targets[names[0]], tests=args.tests)
    if args.list:
        for n in names:
            t = targets[n]
            print(f"{n:16s} {t.path:40s} {t.tests}" + (f"  (not mutated: {', '.join(t.skip)})" if t.skip else ""))
        return
    python = shlex.quote(sys.executable)
    rows, started = [], time.monotonic()
    for i, n in enumerate(names):
        if args.budget_s is not None and time.monotonic() - started > args.budget_s:
            print(f"[mutate] budget of {args.budget_s:.0f} s spent; not run: {', '.join(names[i:])}", flush=True)
            break
        killed, survived, secs, annotations = run(n, targets[n], Path(args.tools), python, Path(args.out),
                                                  args.recheck, args.with_annotations)
        rows.append((n, killed, survived, secs, annotations))
        print(f"[mutate] {n}: {killed}/{killed + survived} killed in {secs:.0f} s", flush=True)
    print(f"\n{'module':16s} {'killed':>7s} {'survived':>9s} {'kill rate':>10s} {'seconds':>8s} {'annotations':>12s}"
          f"   survivors: {args.out}/<module>.txt; annotations: mutants in unevaluated annotations, not run")
    for n, k, s, secs, a in rows:
        rate = f"{100 * k / (k + s):.0f}%" if k + s else "-"
        print(f"{n:16s} {k:7d} {s:9d} {rate:>10s} {secs:8.0f} {a:12d}")


if __name__ == "__main__":
    main()
