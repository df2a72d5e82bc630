"""Code extraction: a model's completion -> the program the sandbox runs, or None.

Models wrap `transform` in prose, several fences, worked examples and test prints; the
sandbox must get only the program (imports, constants, helpers, `transform`). Test code is
dropped because it runs on import: a top-level `print(transform(...))` costs time and can
crash a program that is otherwise right, and an `expected = [[...]]` literal would trip the
hard-coded-output filter. Parsed code is cleaned with `ast` (keep what `transform` reaches);
code that does not parse (a small model's completion is often cut off) by a line fallback.
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
import warnings
from collections.abc import Collection

ENTRY = "transform"
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_DEF = re.compile(rf"^[ \t]*def[ \t]+{ENTRY}[ \t]*\(", re.MULTILINE)
_TOP_DEF = re.compile(rf"^(async[ \t]+)?def[ \t]+{ENTRY}[ \t]*\(", re.MULTILINE)
# Top-level lines that belong to a program (the line fallback keeps these and their bodies).
_PROGRAM_LINE = re.compile(r"(import |from \S+ import |def |async def |class |@|[A-Za-z_]\w*(\s*:[^=]+)?\s*=[^=])")
_CALL_LINE = re.compile(r"[A-Za-z_][\w.]*\(.*\)\s*$")  # `sys.setrecursionlimit(9999)`, not prose
_BUILTINS = frozenset(dir(builtins))


def extract_code(completion: str, *, prelude: str | None = None,
                 prelude_names: Collection[str] | None = None) -> str | None:
    """The program in ``completion``, or None when it defines no ``transform``.

    Prefers the last fenced block that defines ``transform`` (models revise as they go)
    and parses (a cut-off last block loses to a complete earlier one), else bare text from
    the first program-looking line. ``prelude`` (e.g. ``from
    evolution.dsl import *``) is prepended when the code uses a name it never binds that is
    in ``prelude_names`` (any unbound non-builtin name when ``prelude_names`` is None), so
    programs that need no DSL keep their code hash.
    """
    fallback = None
    for source in _locate(completion.replace("\r\n", "\n")):
        code = _clean(source)
        if code is None or not _TOP_DEF.search(code):
            continue
        if _parse(code) is None:  # cut off: an earlier complete version is better, if any
            fallback = fallback or code
            continue
        return _with_prelude(code, prelude, prelude_names)
    return _with_prelude(fallback, prelude, prelude_names) if fallback else None


def _with_prelude(code: str, prelude: str | None, names: Collection[str] | None) -> str:
    if prelude and prelude.strip() not in code and _needs_prelude(code, names):
        return prelude.rstrip("\n") + "\n" + code
    return code


def _locate(completion: str) -> list[str]:
    """Sources that may hold the program, best first: fences that define transform, last
    first; else the bare text."""
    blocks = [textwrap.dedent(b) for b in _FENCE.findall(completion) if _DEF.search(b)]
    if blocks:
        return blocks[::-1]
    match = _DEF.search(completion)
    if match is None:
        return []
    # Bare text: start at the first program-looking line above the def (imports, constants).
    lines = completion[:match.start()].splitlines()
    start = len(lines)
    for i in range(len(lines) - 1, -1, -1):
        line = lines[i]
        if not line.strip() or line[0].isspace() or line.startswith((")", "]", "}")):
            continue  # part of the block above it; kept only if that block starts code
        if not (_PROGRAM_LINE.match(line) or _CALL_LINE.match(line)):
            break
        start = i
    head = "\n".join(lines[start:])
    return [textwrap.dedent((head + "\n" if head else "") + completion[match.start():])]


def _parse(code: str) -> ast.Module | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _clean(source: str) -> str | None:
    tree = _parse(source)
    if tree is None:
        blocks = _top_level_blocks(_clean_lines(source))
        # Cut off mid-way through trailing code: drop whole blocks after `transform` until
        # the rest parses. Code cut inside `transform` is returned as is (it will not run).
        while len(blocks) > 1 and not _TOP_DEF.search(blocks[-1]):
            if _parse("\n".join(blocks)) is not None:
                break
            blocks.pop()
        source = "\n".join(blocks)
        tree = _parse(source)
        if tree is None:
            return source.strip("\n") + "\n" if source.strip() else None
    return _clean_ast(source, tree)


def _bound_names(node: ast.stmt) -> set[str]:
    """Names a top-level statement binds (only the kinds a program keeps)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {node.name}
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _is_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import | ast.ImportFrom):
        return True
    # `try: import scipy / except ImportError: ...` guards are part of the program.
    return isinstance(node, ast.Try) and all(isinstance(s, ast.Import | ast.ImportFrom) for s in node.body)


def _is_setup_call(node: ast.stmt) -> bool:
    """A call above ``transform`` that configures the program, e.g. sys.setrecursionlimit
    for a recursive flood fill; prints and calls of ``transform`` are tests."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return not names & {"print", ENTRY}


def _scope_names(node: ast.AST) -> tuple[set[str], set[str]]:
    """(names loaded, names bound) anywhere inside ``node``; scope-blind, which errs on
    the side of treating a name as local."""
    loaded: set[str] = set()
    bound: set[str] = set()
    declared_global: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (loaded if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(n.name)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.alias):
            bound.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            bound.add(n.name)
        elif isinstance(n, ast.Global | ast.Nonlocal):
            declared_global.update(n.names)
    return loaded | declared_global, bound - declared_global


def _uses(node: ast.stmt) -> set[str]:
    """Module-level names a kept statement needs: a function's free names (its own locals,
    e.g. a parameter called `grid`, must not keep a test's top-level `grid = [[...]]`)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        loaded, bound = _scope_names(node)
        outer = {n.id for d in node.decorator_list for n in ast.walk(d) if isinstance(n, ast.Name)}
        return (loaded - (bound - {node.name})) | outer
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _clean_ast(source: str, tree: ast.Module) -> str:
    """Keep imports and every top-level binding that ``transform`` reaches, in order."""
    body = tree.body
    binders = [_bound_names(n) for n in body]
    first_def = next((i for i, b in enumerate(binders) if ENTRY in b), len(body))
    needed, keep = {ENTRY}, {i for i in range(first_def) if _is_setup_call(body[i])}
    for i in keep:
        needed |= _uses(body[i])
    changed = True
    while changed:  # fixpoint: helpers call helpers, constants use constants
        changed = False
        for i, node in enumerate(body):
            if i not in keep and (_is_import(node) or binders[i] & needed):
                keep.add(i)
                needed |= _uses(node)
                changed = True
    kept = [body[i] for i in sorted(keep)]
    if any(n.lineno == m.end_lineno for n, m in zip(body[1:], body, strict=False)):
        return ast.unparse(ast.Module(kept, type_ignores=[])) + "\n"  # `a; b` on one line
    lines = source.splitlines()
    parts: list[str] = []
    last = 0
    for n in kept:
        start = min([n.lineno] + [d.lineno for d in getattr(n, "decorator_list", [])])
        while start - 1 > last and lines[start - 2].startswith("#"):  # its leading comment
            start -= 1
        if parts and start > last + 1:
            parts.append("")  # one blank line where the source had a gap
        parts.extend(lines[start - 1:n.end_lineno or n.lineno])
        last = n.end_lineno or n.lineno
    return "\n".join(parts) + "\n"


def _clean_lines(source: str) -> list[str]:
    """Fallback for code that does not parse: keep program blocks, drop other top-level ones."""
    out: list[str] = []
    keeping = True
    for line in source.splitlines():
        if line.strip() and not line[0].isspace() and not line.startswith((")", "]", "}")):
            rhs = line.split("=", 1)[-1]
            keeping = line.startswith(("def ", "async def ")) or (
                bool(_PROGRAM_LINE.match(line)) and f"{ENTRY}(" not in rhs)
        if keeping:
            out.append(line)
    return out


def _top_level_blocks(lines: list[str]) -> list[str]:
    """Group lines into top-level statements (a line at column 0 starts a new one)."""
    blocks: list[list[str]] = []
    for line in lines:
        starts = line.strip() and not line[0].isspace() and not line.startswith((")", "]", "}"))
        if starts or not blocks:
            blocks.append([line])
        else:
            blocks[-1].append(line)
    return ["\n".join(b) for b in blocks]


def _needs_prelude(code: str, names: Collection[str] | None) -> bool:
    tree = _parse(code)
    if tree is None:  # cannot tell what is bound; look for calls of the prelude's names
        return bool(names) and any(re.search(rf"\b{re.escape(n)}\s*\(", code) for n in names)
    loaded, bound = _scope_names(tree)
    free = loaded - bound - _BUILTINS
    return bool(free & set(names)) if names is not None else bool(free)
