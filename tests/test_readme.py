"""The README cites only what is in the repository: every relative path it names exists, and
every `make` target it names is in the Makefile."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXTENSIONS = ("py", "yaml", "yml", "md", "txt", "json", "jsonl", "toml", "sh", "jinja", "csv", "png", "npz")
OUTPUTS = ("runs/",)  # written by the jobs, named as their outputs


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


def test_every_path_the_readme_cites_exists():
    paths = cited_paths((ROOT / "README.md").read_text())
    assert {"configs/soar-demo.yaml", "deploy/rayjob.yaml", "ray_jobs/cluster.py"} <= paths  # the scan sees them
    missing = sorted(p for p in paths if not p.startswith(OUTPUTS) and not list(ROOT.glob(p)))
    assert not missing, f"README.md cites paths that are not in the repository: {missing}"


def test_a_missing_path_is_caught():
    assert "data/math500.jsonl" in cited_paths("python -m ray_jobs.scaling dataset=data/math500.jsonl")
    assert "evolution/nope.py" in cited_paths("see `evolution/nope.py`")
    assert not cited_paths("redis://user:pass@host:port/db, SFT/DPO, /etc/ratchet/redis-url, ~/.cache/ratchet")


def test_every_make_target_the_readme_names_exists():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    named = set(re.findall(r"`make ([\w-]+)", (ROOT / "README.md").read_text()))
    named |= set(re.findall(r"^make ([\w-]+)", (ROOT / "README.md").read_text(), re.M))
    assert named and named <= targets, sorted(named - targets)
