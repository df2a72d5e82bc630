"""The result types of the ARC verifier, described once.

``InputResult`` is what running a program on one input grid gave; its first four fields
(status, output, error_type, message) depend only on the program and the input, so they
are what the execution cache stores. The scoring fields (correct, shape_match,
cell_accuracy) are filled in afterwards, outside the sandbox, against expected outputs the
program never saw; they are None where no expected output is known.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from verifiers.arc.grids import ArcTask, Grid, decode_rows, encode_rows

Status = Literal["ok", "error", "timeout", "memory", "invalid_output", "forbidden"]
# Also spelled out in zygote.py (which runs alone in the sandbox and imports nothing of ours);
# the parent rejects any status outside this set when decoding a sandbox's output.
STATUSES: frozenset[str] = frozenset(
    ("ok", "error", "timeout", "memory", "invalid_output", "forbidden"))
MAX_MESSAGE = 200  # characters of an error message kept; the program chooses its messages
# Outcomes the machine, not the program, may have caused; never cached, so a rerun decides:
# a lost worker, a wall-clock timeout with CPU budget left (a busy or stopped machine), a
# SIGKILL (the OOM killer under the machine's memory pressure, or another process), and
# any other signal the program cannot raise itself (it can only fault: SEGV, BUS, ...).
TRANSIENT_ERRORS: frozenset[str] = frozenset(("SandboxError", "WallTimeout", "Killed", "Signalled"))
# Of those, the ones that are never the program's: its sandbox worker (zygote) was lost or could
# not set up. The executor retries them and raises InfrastructureError rather than return them,
# so they never become a program's result (the archive keeps a program's first result for good).
INFRASTRUCTURE_ERRORS: frozenset[str] = frozenset(("SandboxError",))


@dataclass(frozen=True)
class InputResult:
    status: Status
    output: Grid | None = None      # set only when status == "ok"
    error_type: str | None = None   # exception type name, or the kind of failure
    message: str | None = None      # short, truncated
    correct: bool | None = None     # exact match with the expected output
    shape_match: bool | None = None
    cell_accuracy: float | None = None  # fraction of equal cells when shapes match, else 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def transient(self) -> bool:
        """The machine may have caused this outcome (see TRANSIENT_ERRORS): not cached."""
        return self.error_type in TRANSIENT_ERRORS

    @property
    def infrastructure(self) -> bool:
        """The machine, not the program, decided this outcome (see INFRASTRUCTURE_ERRORS)."""
        return self.error_type in INFRASTRUCTURE_ERRORS

    def execution(self) -> InputResult:
        """Only the program-and-input part (what the cache holds)."""
        return InputResult(self.status, self.output, self.error_type, self.message)

    def to_cache(self) -> list[Any]:
        return [self.status, None if self.output is None else encode_rows(self.output),
                self.error_type, self.message]

    @classmethod
    def from_cache(cls, raw: Any) -> InputResult | None:
        """Decode a cached entry, or None when it is not one we wrote (treated as a miss)."""
        if type(raw) is not list or len(raw) != 4 or raw[0] not in STATUSES:
            return None
        output = None if raw[1] is None else decode_rows(raw[1])
        if (raw[0] == "ok") != (output is not None):
            return None
        return cls(raw[0], output, _opt_str(raw[2]), _opt_str(raw[3]))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"status": self.status}
        if self.output is not None:
            d["output"] = [list(r) for r in self.output]
        if self.error_type is not None:
            d["error_type"] = self.error_type
            d["message"] = self.message
        if self.correct is not None:
            d.update(correct=self.correct, shape_match=self.shape_match,
                     cell_accuracy=self.cell_accuracy)
        return d

    def with_error(self, status: Status, error_type: str, message: str) -> InputResult:
        return replace(self, status=status, output=None, error_type=error_type,
                       message=message[:MAX_MESSAGE])


def _opt_str(v: Any) -> str | None:
    return v[:MAX_MESSAGE] if type(v) is str else None


@dataclass(frozen=True)
class ProgramResult:
    """One program on one task: a result per train input, then per test input."""

    task_id: str
    code_hash: str
    train: tuple[InputResult, ...]
    test: tuple[InputResult, ...]
    cached: bool = False  # served from the execution cache (or a duplicate in the batch)

    @property
    def train_accuracy(self) -> float:
        """Fraction of train examples solved exactly (SOAR's h)."""
        return sum(bool(r.correct) for r in self.train) / len(self.train) if self.train else 0.0

    @property
    def infrastructure(self) -> bool:
        """Some input's outcome is the machine's (a lost sandbox): not a result to keep."""
        return any(r.infrastructure for r in self.train + self.test)

    @property
    def all_ok(self) -> bool:
        return all(r.ok for r in self.train + self.test)

    @property
    def test_outputs(self) -> tuple[Grid | None, ...]:
        return tuple(r.output for r in self.test)

    def summary(self) -> dict[str, Any]:
        statuses: dict[str, int] = {}
        for r in self.train + self.test:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        test_known = [r for r in self.test if r.correct is not None]
        return {
            "train_accuracy": self.train_accuracy,
            "train_correct": sum(bool(r.correct) for r in self.train),
            "train_total": len(self.train),
            "test_correct": (sum(bool(r.correct) for r in test_known) if test_known else None),
            "test_total": len(self.test),
            "all_ok": self.all_ok,
            "statuses": statuses,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "code_hash": self.code_hash, "cached": self.cached,
                "train": [r.to_dict() for r in self.train],
                "test": [r.to_dict() for r in self.test],
                "summary": self.summary()}


# The verifier contract SOAR's driver awaits: (task, codes) -> one result per code, in order.
# An ArcExecutor in one process or an ArcVerifierPool on Ray is adapted to it (evolution.backends).
Verifier = Callable[[ArcTask, Sequence[str]], Awaitable[list[ProgramResult]]]
