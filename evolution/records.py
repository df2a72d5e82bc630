"""The candidate record: one program for one task, as SOAR archives, refines, votes on and
relabels it. Described once here; every evolution module and its tests use it.

Archived in the store as plain JSON (grids as lists of digit strings, the verifier's wire form).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from verifiers.arc.grids import Grid, decode_rows, encode_rows
from verifiers.arc.results import ProgramResult

Kind = Literal["sample", "refine"]


@dataclass(frozen=True)
class Candidate:
    task_id: str
    code: str
    code_hash: str  # store.code_hash(code): normalized, the identity of the program
    kind: Kind = "sample"
    parent: str | None = None  # code_hash of the refined parent (kind == "refine")
    model_version: str = ""  # the sampler version that wrote it
    iteration: int = 0  # SOAR iteration that produced it
    train_correct: tuple[bool, ...] = ()  # per train pair: exact match
    train_outputs: tuple[Grid | None, ...] = ()  # per train pair: the program's output
    test_outputs: tuple[Grid | None, ...] = ()  # per test input: the program's output
    test_correct: tuple[bool, ...] | None = None  # per test input, when the answers are known
    all_ok: bool = False  # ran cleanly on every input with valid grids
    statuses: tuple[str, ...] = ()  # per input (train then test)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def train_accuracy(self) -> float:
        """SOAR's h: fraction of train pairs solved exactly."""
        return sum(self.train_correct) / len(self.train_correct) if self.train_correct else 0.0

    @property
    def fully_correct(self) -> bool:
        """Right on every train pair and, when known, every test input."""
        return bool(self.train_correct) and all(self.train_correct) and all(self.test_correct or (True,))

    @classmethod
    def from_result(cls, result: ProgramResult, code: str, **meta: Any) -> Candidate:
        return cls(
            task_id=result.task_id, code=code, code_hash=result.code_hash,
            train_correct=tuple(bool(r.correct) for r in result.train),
            train_outputs=tuple(r.output for r in result.train),
            test_outputs=tuple(r.output for r in result.test),
            test_correct=(tuple(bool(r.correct) for r in result.test)
                          if all(r.correct is not None for r in result.test) else None),
            all_ok=result.all_ok,
            statuses=tuple(r.status for r in result.train + result.test),
            **meta,
        )

    def to_record(self) -> dict[str, Any]:
        """Plain JSON for the store's archive (grids as digit-string rows)."""
        d = asdict(self)
        for key in ("train_outputs", "test_outputs"):
            d[key] = [None if g is None else encode_rows(g) for g in getattr(self, key)]
        return d

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> Candidate:
        d = dict(d)
        for key in ("train_outputs", "test_outputs"):
            d[key] = tuple(None if g is None else decode_rows(g) for g in d.get(key, ()))
        for key in ("train_correct", "statuses"):
            d[key] = tuple(d.get(key, ()))
        if d.get("test_correct") is not None:
            d["test_correct"] = tuple(d["test_correct"])
        return cls(**d)
