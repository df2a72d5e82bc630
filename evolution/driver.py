"""SOAR's search driver: sample programs per task, execute them, refine the promising ones, vote.

The driver is plain asyncio over two injected async functions, so it runs the same on a
Ray cluster (SamplerPool + ArcVerifierPool) and in one process (an engine + ArcExecutor):

    sampler(prompts, params) -> list[list[Completion]]
    verifier(task, codes)    -> list[ProgramResult]

Many tasks are in flight at once, so while one task waits for its programs to execute the
samplers are busy with another's prompts. Every batch is archived in the store together
with the counters that budget it (one MULTI/EXEC), so a killed job resumes where it was:
no task re-sampled beyond its budget, no archived program lost.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from common.faults import InfrastructureError
from common.sampling import Completion, Generate, Prompt, SamplingParams
from evolution.dsl import __all__ as DSL_NAMES
from evolution.extract import extract_code
from evolution.filters import FilterConfig, keep_for_refinement, keep_for_voting
from evolution.programs import PRELUDE, body_regex, colours
from evolution.prompts import (
    PromptFormat,
    PromptStyle,
    as_prompt,
    one_shot_example,
    program_from_completion,
    refinement_prompt,
    sampling_prompt,
)
from evolution.records import Candidate
from evolution.rex import RexConfig, balanced_pool, choose_parents
from evolution.voting import VoteConfig, vote
from store import keys
from store.archive import CandidateArchive
from verifiers.arc.grids import ArcTask
from verifiers.arc.results import Verifier

Sampler = Generate


@dataclass
class SearchConfig:
    samples_per_task: int = 3000  # SOAR: 3k samples ...
    refinements_per_task: int = 3000  # ... + 3k refinements per task
    batch: int = 16  # completions per sampler request (sampling: n per prompt; refinement: parents)
    stop_after_correct: int = 32  # K: a task stops early once this many programs solve every train pair
    temperature: float = 1.0  # SOAR samples at 1.0 ...
    min_p: float = 0.05  # ... with min_p 0.05
    top_p: float = 1.0
    max_tokens: int = 1024  # per program
    stop: list[str] = field(default_factory=list)  # extra stop strings
    prompt_style: PromptStyle = "numpy"  # "compact" for the small seed models and models taught it (models/smollm2-arc-lora)
    prompt_format: PromptFormat = "auto"  # chat or text prompts (evolution/prompts.py); the loop resolves auto
    # compact prompts: sample only bodies of the DSL's grammar (SamplingParams.regex), so every
    # program parses and calls each primitive with its number of colour arguments
    constrain: bool = False
    max_prompt_chars: int | None = None  # compact refinement prompts drop feedback grids to fit (small contexts)
    one_shot: bool = True  # numpy style: show one solved example from another task
    # ... among those whose own prompt fits this many characters (numpy grids cost about a token a
    # character): a 20x20 example made a 3x3 task's prompt 4,900 tokens, past small models' contexts
    one_shot_max_chars: int | None = 2000
    rex_c: float = 20.0  # REX: theta ~ Beta(1 + C*h, 1 + C*(1-h) + N)
    pool_size: int = 64  # programs in the balanced refinement pool
    tasks_in_flight: int = 8  # tasks searched concurrently (keeps samplers busy)
    seed: int = 0  # sampling and REX seed (fixed per task and iteration, so resumes repeat it)

    def __post_init__(self):
        for name in ("batch", "stop_after_correct", "max_tokens", "pool_size", "tasks_in_flight"):
            if getattr(self, name) < 1:
                raise ValueError(f"search.{name}={getattr(self, name)} must be >= 1")
        for name in ("samples_per_task", "refinements_per_task"):
            if getattr(self, name) < 0:
                raise ValueError(f"search.{name}={getattr(self, name)} must be >= 0")


@dataclass
class TaskOutcome:
    task_id: str
    candidates: list[Candidate]  # this iteration's distinct programs, in archive order
    sampled: int  # completions drawn (sampling phase), across restarts
    refined: int  # completions drawn (refinement phase)
    no_code: int  # completions with no extractable program
    correct_samples: int  # completions whose program is fully correct (duplicates count)
    executions: int  # programs run in a sandbox in this iteration (kept in the store: restarts included)
    cache_hits: int  # programs answered by the execution cache (likewise)
    attempts: list[list]  # per test input: up to 2 grids (the vote)
    vote_groups: int


def _rng(seed: int, task_id: str, iteration: int, salt: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}:{task_id}:{iteration}:{salt}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


class SoarSearch:
    def __init__(self, cfg: SearchConfig, *, sampler: Sampler, verifier: Verifier, archive: CandidateArchive,
                 model_version: str, iteration: int = 0, filters: FilterConfig | None = None,
                 vote_cfg: VoteConfig | None = None, examples: dict[str, tuple[ArcTask, str]] | None = None,
                 on_progress: Callable[[str, int], None] | None = None,
                 on_scored: Callable[[dict[str, int]], None] | None = None):
        self.cfg, self.sampler, self.verifier, self.archive = cfg, sampler, verifier, archive
        self.model_version, self.iteration = model_version, iteration
        self.filters = filters or FilterConfig()
        self.vote_cfg = vote_cfg or VoteConfig()
        self.rex = RexConfig(c=cfg.rex_c)
        self.examples = examples or {}
        self.chat = cfg.prompt_format == "chat"  # "auto" is resolved by the loop against the checkpoint
        self.on_progress = on_progress or (lambda task_id, n: None)
        # after each batch: {model version: programs new to this iteration and right on every
        # training pair}, what a bandit over models (evolution/model_mix.py) is paid
        self.on_scored = on_scored or (lambda earned: None)
        self.sampler_wait_s = 0.0  # time requests spent in the sampler (summed over tasks)
        if cfg.constrain and cfg.prompt_style != "compact":
            raise ValueError("search.constrain needs prompt_style=compact (completions are DSL program bodies)")

    # --- counters kept in the store (budgets survive restarts) -----------------------------
    def _key(self, task_id: str, what: str) -> str:
        return keys.search_counter(self.iteration, what, task_id)

    def _params(self, task: ArcTask, n: int, salt: int) -> SamplingParams:
        c = self.cfg
        return SamplingParams(n=n, temperature=c.temperature, top_p=c.top_p, min_p=c.min_p,
                              max_tokens=c.max_tokens, stop=tuple(c.stop), seed=c.seed * 1_000_003 + salt,
                              regex=self._regex(task))

    def _regex(self, task: ArcTask) -> str | None:
        """The DSL grammar with the colours the task shows (None when unconstrained)."""
        if not self.cfg.constrain:
            return None
        shown = [ex.input for ex in task.train + task.test] + [ex.output for ex in task.train]
        return body_regex(colours=colours(shown))

    def _one_shot(self, task: ArcTask) -> tuple[ArcTask, str] | None:
        if not self.cfg.one_shot or self.cfg.prompt_style != "numpy":
            return None
        return one_shot_example(task.id, self.examples)

    async def _evaluate(self, task: ArcTask, completions: Sequence[Completion], kind: str,
                        parents: Sequence[Candidate | None], counters: dict[str, int], outcome: TaskOutcome) -> None:
        """Extract, execute, archive (with the budget counters, atomically)."""
        style = self.cfg.prompt_style
        codes = [extract_code(program_from_completion(c.text, style), prelude=PRELUDE, prelude_names=DSL_NAMES)
                 for c in completions]
        missing = sum(code is None for code in codes)
        outcome.no_code += missing
        if missing:
            counters = counters | {self._key(task.id, "no_code"): missing}
        start = outcome.sampled + outcome.refined  # programs tried before this batch
        # (position tried, code, completion, parent): the position is the curves' x-axis
        runnable = [(start + i, code, c, p) for i, (code, c, p) in enumerate(zip(codes, completions, parents, strict=True))
                    if code is not None]
        results = await self.verifier(task, [code for _, code, _, _ in runnable]) if runnable else []
        lost = [r for r in results if r.infrastructure]
        if lost:  # the archive keeps a program's first result for good: never the machine's failure
            raise InfrastructureError(
                f"task {task.id}: the verifier returned {len(lost)} result(s) of a lost sandbox worker "
                "instead of retrying them; nothing of this batch was archived")
        records, cands, seen = [], [], {}
        correct = executed = cached = 0
        for (seq, code, comp, parent), result in zip(runnable, results, strict=True):
            cand = Candidate.from_result(
                result, code, kind=kind, parent=parent.code_hash if parent else None,
                model_version=comp.model_version or self.model_version, iteration=self.iteration,
                extra={"seq": seq},
            )
            correct += cand.fully_correct
            executed += not result.cached
            cached += result.cached
            records.append(cand.to_record())
            cands.append(cand)
            seen.setdefault(cand.code_hash, seq)
        # kept in the store with the batch, so a resumed search reports the whole iteration
        counters = counters | {self._key(task.id, k): v for k, v in
                               (("correct", correct), ("executions", executed), ("cache_hits", cached)) if v}
        outcome.correct_samples += correct
        outcome.executions += executed
        outcome.cache_hits += cached
        # records, budget counters and this iteration's marks, in one transaction
        self.archive.add_many(records, counters, {self._key(task.id, "seen"): seen})
        known = {c.code_hash for c in outcome.candidates}
        earned = {(c.model_version or self.model_version): 0 for c in completions}
        for cand in cands:  # new to this iteration, even if an earlier one archived it first
            if cand.code_hash not in known:
                known.add(cand.code_hash)
                outcome.candidates.append(cand)
                earned[cand.model_version] += bool(cand.train_correct) and all(cand.train_correct)
        self.on_scored(earned)

    def refine_counts(self, task_id: str, cands: Sequence[Candidate]) -> dict[str, int]:
        """REX's N per parent: times this iteration's search refined it so far (from the store)."""
        counts = self.archive.counters([keys.refine_count(self.iteration, task_id, c.code_hash) for c in cands])
        return dict(zip((c.code_hash for c in cands), counts, strict=True))

    def _solved_train(self, outcome: TaskOutcome) -> int:
        return sum(bool(c.train_correct) and all(c.train_correct) for c in outcome.candidates)

    async def _sample(self, task: ArcTask, prompt: Prompt, n: int, salt: int) -> list[Completion]:
        started = time.perf_counter()
        rows = await self.sampler([prompt], self._params(task, n, salt))
        self.sampler_wait_s += time.perf_counter() - started
        return rows[0]

    async def search_task(self, task: ArcTask) -> TaskOutcome:
        cfg = self.cfg
        visible = task.without_answers()  # prompts never see test outputs
        seen = self.archive.marks(self._key(task.id, "seen"))  # code_hash -> seq, this iteration
        prior = [Candidate.from_record(r) for r in self.archive.get_task(task.id)]
        mine = sorted((replace(c, extra=c.extra | {"seq": seen[c.code_hash]}) for c in prior if c.code_hash in seen),
                      key=lambda c: c.extra["seq"])
        sampled, refined, no_code, correct, executions, cache_hits = self.archive.counters(
            [self._key(task.id, k) for k in ("sampled", "refined", "no_code", "correct", "executions", "cache_hits")])
        outcome = TaskOutcome(task.id, mine, sampled, refined, no_code, correct, executions, cache_hits, [], 0)
        self.on_progress(task.id, sampled + refined)

        prompt = as_prompt(sampling_prompt(visible, cfg.prompt_style, self._one_shot(task)), self.chat)
        while outcome.sampled < cfg.samples_per_task and self._solved_train(outcome) < cfg.stop_after_correct:
            n = min(cfg.batch, cfg.samples_per_task - outcome.sampled)
            completions = await self._sample(task, prompt, n, salt=outcome.sampled)
            await self._evaluate(task, completions, "sample", [None] * n,
                                 {self._key(task.id, "sampled"): n}, outcome)
            outcome.sampled += n
            self.on_progress(task.id, n)

        n_refined = self.refine_counts(task.id, outcome.candidates)
        while outcome.refined < cfg.refinements_per_task and self._solved_train(outcome) < cfg.stop_after_correct:
            # seeded per batch: a search resumed after a kill picks the parents an uninterrupted one does
            rng = _rng(cfg.seed, task.id, self.iteration, f"rex{outcome.refined}")
            pool = balanced_pool(outcome.candidates, cfg.pool_size, rng,
                                 keep=lambda c: keep_for_refinement(c, task, self.filters), cfg=self.rex)
            if not pool:
                break  # nothing worth refining: the budget is better left unspent than wasted
            n = min(cfg.batch, cfg.refinements_per_task - outcome.refined)
            parents = choose_parents(pool, n_refined, n, rng, self.rex)
            prompts = [as_prompt(refinement_prompt(visible, p, cfg.prompt_style, cfg.max_prompt_chars,
                                                   self._one_shot(task)), self.chat) for p in parents]
            started = time.perf_counter()
            rows = await self.sampler(prompts, self._params(task, 1, salt=10**9 + outcome.refined))
            self.sampler_wait_s += time.perf_counter() - started
            counters = {self._key(task.id, "refined"): n}
            for p in parents:
                n_refined[p.code_hash] = n_refined.get(p.code_hash, 0) + 1
                nref = keys.refine_count(self.iteration, task.id, p.code_hash)
                counters[nref] = counters.get(nref, 0) + 1
            await self._evaluate(task, [r[0] for r in rows], "refine", parents, counters, outcome)
            outcome.refined += n
            self.on_progress(task.id, n)

        result = vote([c for c in outcome.candidates if keep_for_voting(c, task, self.filters)], task, self.vote_cfg)
        outcome.attempts, outcome.vote_groups = result.attempts, len(result.groups)
        return outcome

    async def run(self, tasks: dict[str, ArcTask]) -> dict[str, TaskOutcome]:
        gate = asyncio.Semaphore(self.cfg.tasks_in_flight)

        async def one(task: ArcTask) -> TaskOutcome:
            async with gate:
                return await self.search_task(task)

        outcomes = await asyncio.gather(*(one(t) for t in tasks.values()))
        return {o.task_id: o for o in outcomes}
