"""Widen each argument rule of the sandbox's seccomp filter in turn; every widening must fail a test.

    python scripts/fence_widenings.py     # `make mutate` runs it first (about a minute)

cosmic-ray's operators change numbers and comparisons; they never drop a rule's condition,
the widening that matters most (issue 36: clocks allowed on any id let a program read its
parent's CPU clock). Each edit here is applied to verifiers/arc/fence.py on disk, the fence
probes (tests/test_arc_fence_rules.py) run against it in a real sandbox, and the file is put
back. Exits 1 if any widening passes the probes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FENCE = ROOT / "verifiers" / "arc" / "fence.py"
TESTS = ["tests/test_arc_fence_rules.py"]
CLOCK_RULE = "self._allow(name, _ArgCmp(0, _CMP_LT, MAX_CLOCK_ID, 0))"
PRLIMIT_RULE = "_ArgCmp(0, _CMP_EQ, 0, 0), _ArgCmp(2, _CMP_EQ, 0, 0)"
SETFL_RULE = """self._allow("fcntl", _ArgCmp(1, _CMP_EQ, F_SETFL, 0),
                    _ArgCmp(2, _CMP_MASKED_EQ, _O_ASYNC, 0))"""
STAT_RULE = 'self._allow("newfstatat", _ArgCmp(3, _CMP_MASKED_EQ, _AT_EMPTY_PATH, _AT_EMPTY_PATH))'

# name -> (text in fence.py, the widened text)
WIDENINGS = {
    "clocks on any id": (CLOCK_RULE, "self._allow(name)"),
    "clock ids up to 16": ("MAX_CLOCK_ID = 16", "MAX_CLOCK_ID = 17"),
    "clock ids compared <=": (CLOCK_RULE, "self._allow(name, _ArgCmp(0, _CMP_LT + 1, MAX_CLOCK_ID, 0))"),
    "prlimit64 on any pid": (PRLIMIT_RULE, "_ArgCmp(2, _CMP_EQ, 0, 0)"),
    "prlimit64 setting limits": (PRLIMIT_RULE, "_ArgCmp(0, _CMP_EQ, 0, 0)"),
    "fcntl F_GETOWN": ('"F_DUPFD_CLOEXEC": 1030}', '"F_DUPFD_CLOEXEC": 1030, "F_GETOWN": 9}'),
    "fcntl F_GETPIPE_SZ": ('"F_DUPFD_CLOEXEC": 1030}', '"F_DUPFD_CLOEXEC": 1030, "F_GETPIPE_SZ": 1032}'),
    "fcntl any command": ('self._allow("fcntl", _ArgCmp(1, _CMP_EQ, cmd, 0))', 'self._allow("fcntl")'),
    "F_SETFL with O_ASYNC": (SETFL_RULE, 'self._allow("fcntl", _ArgCmp(1, _CMP_EQ, F_SETFL, 0))'),
    "O_ASYNC mask empty": ("_O_ASYNC = 0o20000", "_O_ASYNC = 0"),
    "newfstatat any flags": (STAT_RULE, 'self._allow("newfstatat")'),
    "newfstatat any flag bit": (STAT_RULE, 'self._allow("newfstatat", _ArgCmp(3, _CMP_MASKED_EQ, 0, 0))'),
}


def main() -> int:
    original = FENCE.read_text()
    passed = []
    try:
        for name, (old, new) in WIDENINGS.items():
            if original.count(old) != 1:
                raise SystemExit(f"fence_widenings: {name!r}: {old!r} is not in fence.py once; update WIDENINGS")
            FENCE.write_text(original.replace(old, new))
            r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS],
                               cwd=ROOT, capture_output=True, text=True)
            verdict = "caught" if r.returncode == 1 else ("PASSED THE PROBES" if r.returncode == 0 else
                                                          f"pytest exit {r.returncode}")
            print(f"{name:28s} {verdict}: {r.stdout.strip().splitlines()[-1]}", flush=True)
            if r.returncode != 1:
                passed.append(name)
    finally:
        FENCE.write_text(original)
    print(f"{len(WIDENINGS) - len(passed)}/{len(WIDENINGS)} widenings of the fence's rules caught")
    return 1 if passed else 0


if __name__ == "__main__":
    sys.exit(main())
