"""The GPU package set: lock it, and prove it resolves, from the registry's metadata alone.

    python scripts/gpu_deps.py lock    # rewrite constraints/gpu.txt (after changing pyproject or vllm's pin)
    python scripts/gpu_deps.py check   # what `make check-gpu-deps` runs (CI can call it)
    python scripts/gpu_deps.py cpu-constraints   # the GPU set less torch, for `make test-gpu-set`

vLLM pins older releases of packages ratchet also uses (transformers, fastapi, numpy, torch),
so pyproject gives ranges whose top is the tested CPU set, and constraints/gpu.txt pins the
set that vLLM accepts; `make setup-gpu` installs with it. The check needs no GPU and no
download of wheels: uv resolves from package metadata (pip's `--dry-run` downloads every
wheel when the index serves no separate metadata, gigabytes for vLLM's CUDA stack). It
proves three things: `.[gpu,dev]` resolves under the constraints for Linux x86_64; every
package of that resolution is pinned in them (nothing drifts); and the CPU set is still the
top of each pyproject range (so `make setup` installs what it did before).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints" / "gpu.txt"
CPU_TORCH = "torch==2.13.0"  # the CPU wheel `make setup` installs first
PYTHON = "3.11"  # the oldest Python the pinned set supports (matplotlib 3.11 needs >= 3.11)
HEADER = """\
# The GPU package set: `make setup-gpu` installs `.[gpu,dev]` with these constraints.
# vLLM 0.33.0 pins transformers<5.21, fastapi<0.137, numpy<2.4 (through mistral-common) and
# torch==2.14.0, below the CPU set's versions (pyproject's ranges admit both).
# Regenerate with `python scripts/gpu_deps.py lock`; `make check-gpu-deps` checks it.
"""


def _uv() -> str:
    uv = os.environ.get("UV") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).exists():
        raise SystemExit(f"uv not found at {uv}: set UV=/path/to/uv or run `make check-gpu-deps`, which installs it")
    return uv


def _compile(*args: str) -> str:
    """uv pip compile of pyproject.toml; the pinned requirements as text."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.txt"
        cmd = [_uv(), "pip", "compile", str(ROOT / "pyproject.toml"), "--quiet", "--no-header", "-o", str(out), *args]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"resolution failed: {' '.join(cmd)}\n{done.stderr}")
        return out.read_text()


def _pins(text: str) -> dict[str, set[str]]:
    """name -> versions pinned (a universal lock may pin two, under different markers)."""
    pins: dict[str, set[str]] = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;]+)", line)
        if m:
            pins.setdefault(re.sub(r"\[.*\]", "", m.group(1)).lower().replace("_", "-"), set()).add(m.group(2))
    return pins


def lock() -> None:
    text = _compile("--extra", "gpu", "--extra", "dev", "--universal", "--python-version", PYTHON)
    CONSTRAINTS.write_text(HEADER + text)
    print(f"wrote {CONSTRAINTS.relative_to(ROOT)}: {len(_pins(text))} packages")


def check() -> None:
    locked = _pins(CONSTRAINTS.read_text())
    for python in (PYTHON, "3.12"):
        gpu = _pins(_compile("--extra", "gpu", "--extra", "dev", "-c", str(CONSTRAINTS), "--python-version", python,
                             "--python-platform", "x86_64-manylinux_2_28"))
        unpinned = sorted(name for name in gpu if name not in locked)
        if unpinned:
            raise SystemExit(f"{unpinned} are in the GPU set but not pinned in {CONSTRAINTS.name}: run `python scripts/gpu_deps.py lock`")
        print(f"GPU set resolves for Python {python}: {len(gpu)} packages, vllm {gpu['vllm']}, torch {gpu['torch']}, "
              f"transformers {gpu['transformers']}")
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as torch_pin:
        torch_pin.write(CPU_TORCH + "\n")
        torch_pin.flush()
        cpu = _pins(_compile("--extra", "dev", "-c", torch_pin.name, "--python-version", PYTHON,
                             "--python-platform", "x86_64-manylinux_2_28"))
    import tomllib

    tops = {}
    for dep in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]:
        m = re.match(r"^([A-Za-z0-9_.\-]+)(\[.*\])?.*<=([^\s,;]+)", dep)
        if m:
            tops[m.group(1).lower()] = m.group(3)
    wrong = {name: (top, cpu.get(name)) for name, top in tops.items() if cpu.get(name) != {top}}
    if wrong:
        raise SystemExit(f"the CPU set no longer takes the top of pyproject's ranges: {wrong} (range top, resolved)")
    print(f"CPU set unchanged: {len(cpu)} packages, " + ", ".join(f"{k} {v}" for k, v in sorted(tops.items())))


def cpu_constraints() -> None:
    """Print the GPU set without its torch pin: ratchet's own dependencies at the versions GPU
    machines get (transformers, fastapi, numpy...), installable beside the CPU torch."""
    for line in CONSTRAINTS.read_text().splitlines():
        if not re.match(r"^torch==", line):
            print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["lock", "check", "cpu-constraints"])
    {"lock": lock, "check": check, "cpu-constraints": cpu_constraints}[parser.parse_args().command]()
