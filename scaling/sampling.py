"""The sampling half of a scaling experiment: candidates, verdicts, comparisons, in Redis.

Three phases, each per question and each skipped for questions already stored, so a job
killed at any point resumes where it stopped (the unit of work is a batch of questions;
a batch cut short is redone, nothing stored twice):

1. candidates: k_inf responses per question, final answers grouped by equivalence and judged
   by the plan's checker (math-verify, or the user's: verifiers.math_answers.grade_answers);
2. verdicts: k_verif self-verification verdicts per candidate;
3. comparisons: k_tie pairwise comparisons per pair of the `compare_classes` answer classes
   whose best candidate verifies best, half in each order (representatives cycle through
   each class's best-verified candidates); the offline tie-break replays draws from them.

Verdicts and comparisons are decoded in the plan's `verdict` mode (search.verdicts):
free text parsed, or a verdict constrained to its choices with the choice's probability stored
beside it ({"codes", "probs"} per question). No two identical requests are sent
(search.requests): repeats of one prompt go out as one request with n summed, so a
seeded engine cannot return copies.

Keys: ratchet:x:<experiment>:scaling:{candidates,verdicts,comparisons} are hashes whose
fields are question ids and whose values are JSON.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from common.sampling import Generate, SamplingParams
from search.selection import verdict_score
from search.verdicts import sample_verdicts
from store import keys
from store.lease import fenced_pipeline
from verifiers.math_answers import extract_answer, grade_answers
from verifiers.selfverify import Style, View, answer_prompt, compare_prompt, verify_prompt
from verifiers.verdicts import Mode

PHASES = ("candidates", "verdicts", "comparisons")


@dataclass
class SamplingPlan:
    k_inf: int  # candidates per question
    k_verif: int  # verdicts per candidate
    k_tie: int  # stored pairwise comparisons per pair of answer classes, half in each order
    compare_classes: int  # answer classes that take part in the comparisons
    temperature: float  # candidates
    verify_temperature: float  # verdicts and comparisons
    max_tokens: int  # per candidate
    verify_max_tokens: int  # per verdict or comparison
    style: Style  # verifiers.selfverify prompt style
    batch_questions: int  # questions per stored batch (the resumable unit)
    seed: int | None = None  # sampling seed
    model: str = ""  # the checkpoint sampled: a rerun with another model must not mix its samples in
    verdict: Mode = "parsed"  # verifiers.verdicts mode of verdicts and comparisons
    verifier: str = ""  # the checkpoint of verdicts and comparisons; "" = `model` (self-verification)
    verify_view: View = "solution"  # what a verdict sees of a candidate (verifiers.selfverify.verify_prompt)
    # the verifier's engine settings over the sampler's (ScalingConfig.verifier_engine_kwargs): a bf16 and
    # a float32 verifier give other verdict probabilities, which must not mix in one pool
    verifier_engine_kwargs: dict[str, Any] = field(default_factory=dict)
    # the answer checker's `module:function` ("" = math-verify): stored candidates' classes and
    # correctness were decided by it, so a rerun with another checker must not reuse them. A name, not
    # the function: the plan is stored as JSON, and whoever samples imports it by name.
    checker: str = ""


# Plan fields added after experiments were stored: a stored plan without one was sampled with this.
PLAN_DEFAULTS = {"verdict": "parsed", "verifier": "", "verify_view": "solution", "verifier_engine_kwargs": {},
                 "checker": ""}


def verdict_codes(stored: list | dict) -> list[list[int]]:
    """A question's stored verdict codes [candidate][verdict] (lists before probabilities were stored)."""
    return stored["codes"] if isinstance(stored, dict) else stored


def verdict_probs(stored: list | dict) -> list[list[float | None]] | None:
    """A question's stored verdict probabilities, or None when its mode records none."""
    return stored.get("probs") if isinstance(stored, dict) else None


class ScalingSampler:
    def __init__(self, client: Any, experiment: str, generate: Generate, plan: SamplingPlan,
                 progress: Callable[[str, int, int], None] | None = None, fence: tuple[str, int] | None = None,
                 verify_generate: Generate | None = None):
        """`fence` (Store.fence_for): every write checks the driver still holds the lease.
        `verify_generate`: the verifier's sampler (plan.verifier), else `generate` verifies too."""
        self.client, self.experiment, self.generate, self.plan = client, experiment, generate, plan
        self.verify_generate = verify_generate or generate
        self.progress = progress or (lambda phase, done, total: None)
        self.fence = fence

    def key(self, phase: str) -> str:
        return keys.scaling(self.experiment, phase)

    def stored(self, phase: str, ids: list[str]) -> dict[str, Any]:
        if not ids:
            return {}
        raw = self.client.hmget(self.key(phase), ids)
        return {i: json.loads(r) for i, r in zip(ids, raw, strict=True) if r is not None}

    def _save(self, phase: str, values: dict[str, Any]) -> None:
        if values:
            with fenced_pipeline(self.client, self.experiment, self.fence) as pipe:
                pipe.hset(self.key(phase), mapping={k: json.dumps(v) for k, v in values.items()})

    def check_plan(self) -> None:
        """Stored samples must come from the same plan: a changed k or prompt would mix pools."""
        fixed = {k: v for k, v in asdict(self.plan).items() if k not in ("batch_questions",)}
        key = self.key("plan")
        with fenced_pipeline(self.client, self.experiment, self.fence) as pipe:
            pipe.set(key, json.dumps(fixed, sort_keys=True), nx=True)
        old = json.loads(self.client.get(key))
        diff = sorted(k for k in fixed if old.get(k, PLAN_DEFAULTS.get(k)) != fixed[k])
        if diff:
            raise ValueError(f"experiment {self.experiment!r} was sampled with different {diff} "
                             f"(stored: { {k: old.get(k) for k in diff} }); use a new experiment name "
                             "or the stored values")

    async def run(self, questions: list[dict[str, str]]) -> list[dict[str, Any]]:
        """Sample whatever is missing; return the complete per-question records."""
        self.check_plan()
        await self._phase("candidates", questions, self._candidates)
        await self._phase("verdicts", questions, self._verdicts)
        await self._phase("comparisons", questions, self._comparisons)
        return self.records(questions)

    async def _phase(self, phase: str, questions: list[dict[str, str]], work) -> None:
        todo = [q for q in questions if q["id"] not in self.stored(phase, [q["id"]])]
        done = len(questions) - len(todo)
        self.progress(phase, done, len(questions))
        for start in range(0, len(todo), self.plan.batch_questions):
            batch = todo[start : start + self.plan.batch_questions]
            self._save(phase, await work(batch))
            done += len(batch)
            self.progress(phase, done, len(questions))

    def _params(self, n: int, temperature: float, max_tokens: int) -> SamplingParams:
        return SamplingParams(n=n, temperature=temperature, max_tokens=max_tokens, seed=self.plan.seed)

    async def _candidates(self, batch: list[dict[str, str]]) -> dict[str, Any]:
        p = self.plan
        rows = await self.generate([answer_prompt(q["question"], p.style) for q in batch],
                                   self._params(p.k_inf, p.temperature, p.max_tokens))
        out = {}
        for q, row in zip(batch, rows, strict=True):
            texts = [c.text for c in row]
            answers = [extract_answer(t) for t in texts]
            classes, class_ok = grade_answers(answers, q["answer"], p.checker)
            out[q["id"]] = {"texts": texts, "answers": answers, "answer_ids": classes, "answer_correct": class_ok}
        return out

    async def _verdicts(self, batch: list[dict[str, str]]) -> dict[str, Any]:
        p = self.plan
        cands = self.stored("candidates", [q["id"] for q in batch])
        prompts = [verify_prompt(q["question"], t, p.style, p.verify_view) for q in batch
                   for t in cands[q["id"]]["texts"]]
        rows = iter(await sample_verdicts(self.verify_generate, prompts, [p.k_verif] * len(prompts),
                                          self._params(1, p.verify_temperature, p.verify_max_tokens),
                                          mode=p.verdict, kind="verify", salt=1))
        out = {}
        for q in batch:
            scored = [next(rows) for _ in cands[q["id"]]["texts"]]
            codes = [[code for code, _ in row] for row in scored]
            # parsed verdicts have no probabilities: stored as before, a list of codes per candidate
            out[q["id"]] = codes if p.verdict == "parsed" else {"codes": codes, "probs": [[pr for _, pr in row]
                                                                                       for row in scored]}
        return out

    def comparison_pairs(self, cand: dict[str, Any], verdicts: list[list[int]]) -> list[tuple[int, int]]:
        """k_tie ordered candidate pairs across the best-verified answer classes."""
        scores = [float(verdict_score(vs.count(1), len(vs))) for vs in verdict_codes(verdicts)]
        members: dict[int, list[int]] = {}
        for i in sorted(range(len(scores)), key=lambda i: -scores[i]):
            if cand["answer_ids"][i] >= 0:
                members.setdefault(cand["answer_ids"][i], []).append(i)
        classes = sorted(members, key=lambda c: -scores[members[c][0]])[: self.plan.compare_classes]
        pairs = []
        for a, b in itertools.combinations(classes, 2):
            for r in range(self.plan.k_tie):
                i, j = members[a][(r // 2) % len(members[a])], members[b][(r // 2) % len(members[b])]
                pairs.append((i, j) if r % 2 == 0 else (j, i))
        return pairs

    async def _comparisons(self, batch: list[dict[str, str]]) -> dict[str, Any]:
        p = self.plan
        ids = [q["id"] for q in batch]
        cands, verdicts = self.stored("candidates", ids), self.stored("verdicts", ids)
        jobs = [(q, i, j) for q in batch for i, j in self.comparison_pairs(cands[q["id"]], verdicts[q["id"]])]
        out: dict[str, Any] = {q: [] for q in ids}
        if jobs:
            texts = lambda q, i: cands[q["id"]]["texts"][i]  # noqa: E731
            prompts = [compare_prompt(q["question"], texts(q, i), texts(q, j), p.style) for q, i, j in jobs]
            rows = await sample_verdicts(self.verify_generate, prompts, [1] * len(prompts),
                                         self._params(1, p.verify_temperature, p.verify_max_tokens),
                                         mode=p.verdict, kind="compare", salt=2)
            for (q, i, j), ((code, _),) in zip(jobs, rows, strict=True):
                ids_ = cands[q["id"]]["answer_ids"]
                out[q["id"]].append([i, j, ids_[i], ids_[j], code])
        return out

    def records(self, questions: list[dict[str, str]]) -> list[dict[str, Any]]:
        """Per-question records in ScoredPool.from_records' shape (comparisons by answer class)."""
        ids = [q["id"] for q in questions]
        cands, verdicts, comps = (self.stored(ph, ids) for ph in PHASES)
        missing = [i for i in ids if not (i in cands and i in verdicts and i in comps)]
        if missing:
            raise RuntimeError(f"{len(missing)} questions are not fully sampled (e.g. {missing[0]}); run the job again")
        out = []
        for qid in ids:
            c = cands[qid]
            ok = c["answer_correct"]
            probs = verdict_probs(verdicts[qid]) or [None] * len(c["answer_ids"])
            out.append({
                "id": qid, "answer_correct": ok,
                "candidates": [{"answer_id": a, "correct": a >= 0 and ok[a], "verdicts": v, "verdict_probs": pr}
                               for a, v, pr in zip(c["answer_ids"], verdict_codes(verdicts[qid]), probs,
                                                   strict=True)],
                "comparisons": [[a, b, w] for _, _, a, b, w in comps[qid]],
            })
        return out

    def texts(self, qid: str) -> dict[str, Any]:
        return self.stored("candidates", [qid])[qid]

    def candidate_rows(self, questions: list[dict[str, str]]) -> Iterator[dict[str, Any]]:
        """One row per stored candidate, in the pool's order (`question`, `candidate`: its indices
        in pool.npz), with its text: what the model answered, which the pool keeps no trace of."""
        cands = self.stored("candidates", [q["id"] for q in questions])
        for i, q in enumerate(questions):
            c = cands[q["id"]]
            for j, (text, answer, cls) in enumerate(zip(c["texts"], c["answers"], c["answer_ids"], strict=True)):
                yield {"question": i, "id": q["id"], "candidate": j, "answer": answer, "answer_id": cls,
                       "correct": cls >= 0 and c["answer_correct"][cls], "reference": q["answer"], "text": text}
