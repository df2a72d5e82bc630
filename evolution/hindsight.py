"""Hindsight relabeling and data selection: SOAR's search traces become SFT data.

- Sampling data: a program that runs cleanly on every input of a task (valid grids) is a
  correct program for the task its own outputs define. Prompt: that relabeled task (example
  order shuffled); completion: the program. Programs with identical outputs count once.
- Refinement data: the parent's refinement prompt (with its feedback on the real task) ->
  a child that solved more train pairs than the parent, balanced across parent accuracy bins.
- Selection per task, "greedy-diverse" (N = 50 in the paper): half the best programs by
  train accuracy (shorter code wins ties), half wrong programs with distinct outputs. The
  published code loses the diverse half to an inverted condition; here it is kept, and a
  test checks that wrong programs land in the dataset. "primitive-diverse" takes the best
  program of each set of DSL primitives in turn, so a model's most written primitives do not
  fill the rows (learnt, its own samples narrow it onto them: docs/real-model.md).

Train accuracy is the only correctness signal used, never test answers, so the same code
serves test-time training on an evaluation split.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from evolution.filters import FilterConfig, Reason, reasons_to_drop
from evolution.programs import called_primitives
from evolution.prompts import (
    PromptStyle,
    as_completion,
    as_prompt,
    completion_from_program,
    one_shot_example,
    refinement_prompt,
    sampling_prompt,
)
from evolution.records import Candidate
from evolution.rex import accuracy_bin
from evolution.voting import vote
from verifiers.arc.grids import ArcTask, Example

Selection = Literal["greedy-diverse", "greedy", "correct-only", "uniform", "primitive-diverse"]


@dataclass
class HindsightConfig:
    per_task: int = 50  # programs kept per task (paper: 50)
    selection: Selection = "greedy-diverse"  # paper's best; "correct-only" is what its released code does
    refinement_per_task: int = 10  # refinement pairs kept per task, balanced across parent bins
    iterations: Literal["all", "last"] = "all"  # archive iterations to learn from
    # SOAR's filters applied to the training data too: a program that copies its input, writes
    # one grid for every input, hard-codes an output or has an over-long line defines no task
    # worth learning (thresholds from the job's `filters`).
    drop: tuple[Reason, ...] = ("identity", "identical_outputs", "hardcoded_output", "long_line")
    # Refinement pairs: "improves" = the child solves more train pairs than its parent;
    # "solves" = the child solves every train pair (SOAR's rule).
    refine_rule: Literal["improves", "solves"] = "improves"
    # Test-time training: among programs equally right on the train pairs, prefer those whose
    # test outputs the weighted majority vote favours (the test answers are never seen).
    vote_weighted: bool = False
    # Weight of right programs: each becomes this many rows (its task's examples shuffled anew
    # each time), so a search's few right programs are not drowned by its many wrong ones.
    correct_repeat: int = 1
    seed: int = 0

    def __post_init__(self):
        if self.per_task < 1:
            raise ValueError(f"hindsight.per_task={self.per_task} must be >= 1")
        if self.refinement_per_task < 0:
            raise ValueError(f"hindsight.refinement_per_task={self.refinement_per_task} must be >= 0")
        if self.correct_repeat < 1:
            raise ValueError(f"hindsight.correct_repeat={self.correct_repeat} must be >= 1")


def relabeled_task(task: ArcTask, c: Candidate, rng: random.Random) -> ArcTask | None:
    """The task `c`'s own outputs define on `task`'s inputs, or None when it did not run cleanly."""
    outputs = list(c.train_outputs) + list(c.test_outputs)
    if not c.all_ok or len(outputs) != len(task.train) + len(task.test) or any(o is None for o in outputs):
        return None
    examples = [Example(i, o) for i, o in zip(task.inputs, outputs, strict=True)]
    rng.shuffle(examples)
    n_test = len(task.test)
    return ArcTask(f"{task.id}-{c.code_hash[:8]}", tuple(examples[:-n_test]), tuple(examples[-n_test:]))


def _distinct(cands: Iterable[Candidate]) -> list[Candidate]:
    """Wrong programs: one per output signature (the shortest), since programs with the same
    outputs define the same relabeled task. Right programs: every distinct code, since each
    is another way to solve the real task."""
    best: dict[tuple, Candidate] = {}
    for c in cands:
        key = (c.code_hash,) if c.train_accuracy == 1.0 else (c.train_outputs, c.test_outputs)
        if key not in best or len(c.code) < len(best[key].code):
            best[key] = c
    return list(best.values())


def vote_weights(task: ArcTask, cands: Sequence[Candidate]) -> dict[str, float]:
    """code_hash -> the vote weight of the group its test outputs belong to."""

    result = vote([c for c in cands if c.all_ok], task)
    return {h: g.weight for g in result.groups for h in g.code_hashes}


def select_programs(cands: Sequence[Candidate], cfg: HindsightConfig, rng: random.Random,
                    weights: dict[str, float] | None = None) -> list[Candidate]:
    """Pick up to cfg.per_task clean programs of one task by the configured strategy.

    `weights` (code_hash -> vote weight) breaks ties in train accuracy before code length.
    """
    pool = _distinct(c for c in cands if c.all_ok)
    weights = weights or {}
    by_quality = sorted(pool, key=lambda c: (-c.train_accuracy, -weights.get(c.code_hash, 0.0), len(c.code), c.code_hash))
    n = cfg.per_task
    if cfg.selection == "greedy":
        return by_quality[:n]
    if cfg.selection == "correct-only":
        return [c for c in by_quality if c.train_accuracy == 1.0][:n]
    if cfg.selection == "uniform":
        return rng.sample(pool, min(n, len(pool)))
    if cfg.selection == "primitive-diverse":
        return _round_robin_by_primitives(by_quality, n)
    greedy = by_quality[: (n + 1) // 2]
    chosen = {c.code_hash for c in greedy}
    wrong = [c for c in pool if c.train_accuracy < 1.0 and c.code_hash not in chosen]
    diverse = rng.sample(wrong, min(n - len(greedy), len(wrong)))
    rest = [c for c in by_quality if c.code_hash not in chosen and c not in diverse]
    return greedy + diverse + rest[: n - len(greedy) - len(diverse)]  # top up when few are wrong


def _round_robin_by_primitives(ranked: Sequence[Candidate], n: int) -> list[Candidate]:
    """Up to n programs: the best of each primitive set (sets in the order of their best
    program), then the second best of each, and so on."""
    groups: dict[frozenset[str], list[Candidate]] = defaultdict(list)
    for c in ranked:
        groups[called_primitives(c.code)].append(c)
    picked: list[Candidate] = []
    for rank in range(max((len(g) for g in groups.values()), default=0)):
        picked += [g[rank] for g in groups.values() if rank < len(g)]
    return picked[:n]


Examples = Mapping[str, tuple[ArcTask, str]]  # task id -> (solved task, its code): one-shot prompts


def sampling_rows(task: ArcTask, cands: Sequence[Candidate], cfg: HindsightConfig,
                  rng: random.Random, style: PromptStyle = "compact", *, chat: bool = False,
                  examples: Examples | None = None) -> list[dict]:
    """Relabeled tasks' sampling prompts -> their programs, in the form the sampler saw: the same
    one-shot example as the task's own prompts, the code in the block the prompt asks for, chat
    messages (TRL's conversational prompt/completion) for a chat model."""
    rows = []
    example = one_shot_example(task.id, examples) if examples else None
    weights = vote_weights(task, cands) if cfg.vote_weighted else None
    for c in select_programs(cands, cfg, rng, weights):
        for _ in range(cfg.correct_repeat if c.train_accuracy == 1.0 else 1):
            new = relabeled_task(task, c, rng)
            if new is None:
                break
            rows.append({"prompt": as_prompt(sampling_prompt(new, style, example), chat),
                         "completion": as_completion(completion_from_program(c.code, style), chat),
                         "task_id": task.id, "kind": "sample", "train_accuracy_on_task": c.train_accuracy})
    return rows


def refinement_rows(task: ArcTask, cands: Sequence[Candidate], cfg: HindsightConfig,
                    rng: random.Random, style: PromptStyle = "compact", max_prompt_chars: int | None = None,
                    learnable: set[str] | None = None, *, chat: bool = False,
                    examples: Examples | None = None) -> list[dict]:
    """Parent prompt -> a better child (cfg.refine_rule), balanced across parent bins. Only
    children in `learnable` (code hashes; None: all) are taught; any parent may be repaired."""
    by_hash = {c.code_hash: c for c in cands}
    pairs_by_bin: dict[str, list[tuple[Candidate, Candidate]]] = defaultdict(list)
    for child in cands:
        parent = by_hash.get(child.parent or "")
        if child.kind != "refine" or parent is None or (learnable is not None and child.code_hash not in learnable):
            continue
        if cfg.refine_rule == "solves":
            better = child.train_accuracy == 1.0 and parent.train_accuracy < 1.0
        else:
            better = sum(child.train_correct) > sum(parent.train_correct)
        if better:
            pairs_by_bin[accuracy_bin(parent.train_accuracy)].append((parent, child))
    queues = [rng.sample(v, len(v)) for _, v in sorted(pairs_by_bin.items())]
    picked: list[tuple[Candidate, Candidate]] = []
    while len(picked) < cfg.refinement_per_task and any(queues):
        for q in queues:
            if q and len(picked) < cfg.refinement_per_task:
                picked.append(q.pop())
    visible = task.without_answers()
    example = one_shot_example(task.id, examples) if examples else None
    return [{"prompt": as_prompt(refinement_prompt(visible, p, style, max_prompt_chars, example), chat),
             "completion": as_completion(completion_from_program(ch.code, style), chat),
             "task_id": task.id, "kind": "refine", "train_accuracy_on_task": ch.train_accuracy}
            for p, ch in picked]


def build_rows(tasks: dict[str, ArcTask], cands_by_task: dict[str, list[Candidate]], cfg: HindsightConfig,
               iteration: int, *, style: PromptStyle = "compact", max_prompt_chars: int | None = None,
               filters: FilterConfig | None = None, chat: bool = False,
               examples: Examples | None = None) -> tuple[list[dict], dict[str, int]]:
    """All hindsight rows for the tasks, and counts for the summary. `cands_by_task` holds the
    programs to learn from (the caller applies `cfg.iterations`); `style` and
    `max_prompt_chars` are the search's, so rows look like the prompts the model samples from."""
    rng = random.Random(cfg.seed * 7919 + iteration)
    rows: list[dict] = []
    counts = {"sample_rows": 0, "refine_rows": 0, "wrong_program_rows": 0, "tasks_with_rows": 0, "filtered": 0}
    drop = set(cfg.drop)
    for tid, task in tasks.items():
        given = cands_by_task.get(tid, [])
        cands = [c for c in given if not drop & set(reasons_to_drop(c, task, filters))]
        counts["filtered"] += len(given) - len(cands)
        s = sampling_rows(task, cands, cfg, rng, style, chat=chat, examples=examples)
        r = refinement_rows(task, given, cfg, rng, style, max_prompt_chars, {c.code_hash for c in cands},
                            chat=chat, examples=examples)
        counts["sample_rows"] += len(s)
        counts["refine_rows"] += len(r)
        counts["wrong_program_rows"] += sum(row["train_accuracy_on_task"] < 1.0 for row in s)
        counts["tasks_with_rows"] += bool(s or r)
        rows += s + r
    rng.shuffle(rows)
    return rows, counts
