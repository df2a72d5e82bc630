"""README.md and docs/ cite only what is in the repository, and their commands run.

Every relative link resolves (its #anchor to a heading of the page), every path named exists,
every `make` target is in the Makefile, every `python -m` module is importable, and every
command in a shell code block (`ratchet ...`, `python -m ...`, `python scripts/...`) uses only
the flags its `--help` lists and, for the config-driven commands, only config fields that
exist. That last check is what catches drift such as `ratchet serve --model PATH` after serve
moved to `model=PATH`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ray_jobs import cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXTENSIONS = ("py", "yaml", "yml", "md", "txt", "json", "jsonl", "toml", "sh", "jinja", "csv", "png", "npz")
OUTPUTS = ("runs/",)  # written by the jobs, named as their outputs
SHELL_BLOCKS = ("bash", "sh", "shell", "console")
CONFIG_COMMANDS = ("soar", "scaling", "tpo", "serve")  # take field=value overrides
README_MAX_LINES = 250


def cited_paths(text: str) -> set[str]:
    """Relative paths: tokens with a slash that end in a file extension or a slash, or that
    start with one of the repository's top-level directories."""
    top = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}
    found = set()
    for token in re.findall(r"[\w./<>*-]+", text):
        token = token.strip(".,:;()")
        if "/" not in token or token.startswith(("/", "~", "$", "http", ".")) or "<" in token:
            continue
        first = token.split("/")[0]
        looks_like_file = re.search(rf"\.({'|'.join(EXTENSIONS)})$", token) is not None
        if first in top or looks_like_file:
            found.add(token)
    return found


def visible(text: str) -> str:
    """A page without its HTML comments (notes to maintainers, such as a link still to add)."""
    return re.sub(r"<!--.*?-->", "", text, flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def broken_links(page: Path) -> list[str]:
    """`[text](target)` links of a page whose file or #anchor does not exist."""
    text = visible(page.read_text())
    bad = []
    for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{page.name}: {target} (no such file)")
        elif anchor and dest.suffix == ".md":
            anchors = {slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)}
            if anchor not in anchors:
                bad.append(f"{page.name}: {target} (no heading with that anchor in {dest.name})")
    return bad


def shell_lines(text: str) -> list[str]:
    """The logical lines of a page's shell code blocks (backslash continuations joined)."""
    lines = []
    for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
        if lang in SHELL_BLOCKS:
            lines += [line for line in body.replace("\\\n", " ").split("\n") if line.strip()]
    return lines


def commands(line: str) -> list[list[str]]:
    """The commands of one shell line that ratchet owns: `ratchet ...`, `python -m MOD ...`,
    `python scripts/X.py ...`, `make ...`; pipes, `&&`, `;` and `ray job submit ... --` split it."""
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError:  # an unbalanced quote: the shell would not run it either
        return [["<unparsable>", line]]
    found, current = [], None
    for token in tokens:
        if token in ("|", "&&", "||", ";", "--") or token.endswith(";"):
            current = None
            continue
        if current is None and (token in ("ratchet", "make") or re.fullmatch(r"python3?", token)):
            current = [token]
            found.append(current)
        elif current is not None:
            current.append(token)
    return found


def _in_process_help(argv: list[str]) -> str:
    """`ratchet ARGV` in this process: the command modules are imported by the tests anyway."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        cli.main(argv)
    return out.getvalue()


@functools.cache
def help_text(program: tuple[str, ...]) -> str:
    """The `--help` of a program (`("ratchet", "serve")`, `("-m", "training.seed")`,
    `("scripts/chaos.py",)`), with a subcommand's own help appended when it has one."""
    if program[0] == "ratchet":
        return _in_process_help([*program[1:], "--help"])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *program, "--help"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    return done.stdout if done.returncode == 0 else ""


def problems(cmd: list[str], targets: set[str]) -> list[str]:
    """What in one command does not exist: a make target, a module, a script, a subcommand,
    a flag its --help does not list, a config field."""
    name, args = cmd[0], cmd[1:]
    if name == "make":
        return [f"make {t}: no such target" for t in args if not t.startswith("-") and "=" not in t
                and t not in targets]
    if name == "ratchet":
        if not args or args[0].startswith("-"):
            program, rest = ("ratchet",), args
        elif args[0] not in cli.COMMANDS:
            return [f"ratchet {args[0]}: no such command (choose one of {sorted(cli.COMMANDS)})"]
        else:
            program, rest = ("ratchet", args[0]), args[1:]
    elif args[:1] == ["-m"] and len(args) > 1:
        if importlib.util.find_spec(args[1]) is None:
            return [f"python -m {args[1]}: no such module"]
        program, rest = ("-m", args[1]), args[2:]
        if args[1].startswith("ray_jobs.") and args[1].split(".")[1] in cli.COMMANDS:
            program = ("ratchet", args[1].split(".")[1])
    elif args and args[0].endswith(".py"):
        if not (ROOT / args[0]).exists():
            return [f"{args[0]}: no such script"]
        program, rest = (args[0],), args[1:]
    else:
        return []
    flags = [a.split("=", 1)[0] for a in rest if a.startswith("--")]
    fields = [a.split("=", 1)[0] for a in rest if re.match(r"[A-Za-z_][\w.]*=", a)]
    if not flags and not fields:
        return []
    sub = [a for a in rest if re.fullmatch(r"[a-z][\w-]*", a)][:1]  # `verify check`, `embedded build`
    text = help_text(program)
    if sub and help_text((*program, *sub)):
        text += help_text((*program, *sub))
    shown = " ".join(program).replace("-m ", "python -m ")
    if not text:
        return [f"{shown}: --help failed, so its flags cannot be checked"]
    out = [f"{shown}: {flag} is not in its --help" for flag in flags
           if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text)]
    if program[0] == "ratchet" and program[1:] and program[1] in CONFIG_COMMANDS:
        known = set(re.findall(r"^  ([\w.]+): ", text, re.M))
        maps = set(re.findall(r"^  ([\w.]+): dict", text, re.M))  # judge.kwargs.regex: a key of a mapping
        out += [f"{shown}: {f}= is not a config field" for f in fields
                if f not in known and not any(f.startswith(m + ".") for m in maps)]
    return out


def make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def test_the_readme_is_short():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/ (at most {README_MAX_LINES})"


def test_the_readme_has_the_front_door_sections():
    text = (ROOT / "README.md").read_text()
    for heading in ("## Set-up", "## One command: `ratchet`", "## SOAR on ARC", "## Serving",
                    "## Running on a cluster", "## Stopping", "## Development", "## Status"):
        assert heading in text, heading


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves(page):
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_path_a_page_cites_exists(page):
    paths = cited_paths(visible(page.read_text()))
    missing = sorted(p for p in paths if not p.startswith(OUTPUTS) and not list(ROOT.glob(p)))
    assert not missing, f"{page.name} cites paths that are not in the repository: {missing}"


def test_the_scan_sees_what_the_pages_cite():
    text = "".join(visible(p.read_text()) for p in PAGES)
    assert {"configs/soar-demo.yaml", "deploy/rayjob.yaml", "jobs/cluster.py"} <= cited_paths(text)


def test_a_missing_path_is_caught():
    assert "data/math500.jsonl" in cited_paths("ratchet scaling dataset=data/math500.jsonl")
    assert "evolution/nope.py" in cited_paths("see `evolution/nope.py`")
    assert not cited_paths("redis://user:pass@host:port/db, SFT/DPO, /etc/ratchet/redis-url, ~/.cache/ratchet")


def test_every_make_target_and_module_a_page_names_exists():
    targets, named, modules = make_targets(), set(), set()
    for page in PAGES:
        text = visible(page.read_text())
        named |= set(re.findall(r"`make ([\w-]+)", text)) | set(re.findall(r"^make ([\w-]+)", text, re.M))
        modules |= set(re.findall(r"python -m (\w[\w.]*\w)", text))
    assert named and named <= targets, sorted(named - targets)
    assert {m for m in modules if importlib.util.find_spec(m) is None} == set()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_command_in_a_code_block_is_real(page):
    targets = make_targets()
    found = [(line, p) for line in shell_lines(page.read_text()) for cmd in commands(line)
             for p in problems(cmd, targets)]
    assert found == [], "\n".join(f"{p}\n    in: {line}" for line, p in found)


def test_drift_in_a_command_is_caught():
    bad = """```bash
ratchet serve --model PATH --host 0.0.0.0
ratchet serve modle=PATH
ratchet evolve --config configs/soar-demo.yaml
python -m ray_jobs.soar --config configs/soar-demo.yaml --iteration 3
make demo-everything
python -m ray_jobs.nope
```
"""
    targets = make_targets()
    found = [p for line in shell_lines(bad) for cmd in commands(line) for p in problems(cmd, targets)]
    assert found == [
        "ratchet serve: --model is not in its --help",
        "ratchet serve: --host is not in its --help",
        "ratchet serve: modle= is not a config field",
        f"ratchet evolve: no such command (choose one of {sorted(cli.COMMANDS)})",
        "ratchet soar: --iteration is not in its --help",
        "make demo-everything: no such target",
        "python -m ray_jobs.nope: no such module",
    ]


def test_a_broken_link_is_caught(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## Some `code` here\n\n[ok](#some-code-here) [x](b.md) "
                                   "[y](a.md#nope) [z](https://example.org/x)\n")
    assert broken_links(tmp_path / "a.md") == ["a.md: b.md (no such file)",
                                               "a.md: a.md#nope (no heading with that anchor in a.md)"]


def test_ray_job_submit_lines_are_checked_after_the_double_dash():
    line = "ray job submit --working-dir . -- python -m ray_jobs.tpo --config configs/tpo-demo.yaml x=1"
    assert commands(line) == [["python", "-m", "ray_jobs.tpo", "--config", "configs/tpo-demo.yaml", "x=1"]]
