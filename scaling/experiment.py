"""The scaling experiment as a plain class: one method per step.

    exp = ScalingExperiment(cfg, store, run_dir, generate)
    summary = exp.run()      # = questions -> sample -> curves -> benchmark -> write

Samples k_inf candidates per question and k_verif self-verification verdicts per candidate
(plus k_tie stored pairwise comparisons per pair of answer classes), stores everything in
Redis (a rerun resumes), then computes every strategy's accuracy at every (k, k_verif) by
subsampling the stored pool, with bootstrap CIs over questions. `generate` is any async
(prompts, params) -> completions: make_generate() builds one over the SamplerPool or an
in-process engine.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from common.jsonio import write_json
from common.progress import progress
from common.sampling import Generate, SamplingParams, threaded_generate
from common.tracking import Tracker
from scaling.arith_problems import DATASETS, arith_triples, generated_problems
from scaling.config import ScalingConfig
from scaling.curves import compute_curves
from scaling.report import CANDIDATES_FILE, report, write_candidates, write_outputs
from scaling.sampling import ScalingSampler
from scaling.verifier_adapter import check_heldout
from search.pool import PoolConfig, SamplerPool  # Ray is started by the job runner
from search.scored_pool import ScoredPool
from search.verdicts import sample_verdicts
from store import Store
from store.codehash import content_hash
from verifiers.math_answers import load_jsonl_dataset
from verifiers.selfverify import compare_prompt, verify_prompt

log = logging.getLogger(__name__)
# what each stored phase is, for its progress bar
PHASE_NAMES = {"candidates": "sampling", "verdicts": "verification", "comparisons": "tie-breaks"}


def load_questions(cfg: ScalingConfig) -> list[dict[str, str]]:
    """Questions with ids that change when the text does (stored samples are keyed by them)."""
    if cfg.dataset in DATASETS:
        rows = generated_problems(cfg.dataset, cfg.questions, seed=cfg.arith_seed)
    else:
        rows = load_jsonl_dataset(cfg.dataset, cfg.questions)
    return [{"id": f"{r['id']}:{content_hash(r['question'] + '|' + r['answer'])[:8]}",
             "question": r["question"], "answer": r["answer"]} for r in rows]


def make_generate(cfg: ScalingConfig, checkpoint: str,
                  pool: PoolConfig | None = None) -> tuple[Generate, Callable[[], None]]:
    """An async (prompts, params) -> completions over the SamplerPool or an in-process engine;
    `pool`: other settings than cfg.sampler (the verifier's: cfg.verifier_pool())."""
    sampler = replace(pool or cfg.sampler, experiment=cfg.experiment)
    if cfg.in_process:
        from search.engines import make_engine

        engine = make_engine(sampler.engine, **sampler.engine_kwargs)  # as a pool's actor builds it
        engine.load(checkpoint)
        return threaded_generate(engine), lambda: None

    pool = SamplerPool(sampler, checkpoint=checkpoint)
    return pool.generate, pool.shutdown


async def verification_benchmark(generate, triples: list[dict[str, str]], cfg: ScalingConfig) -> dict[str, Any]:
    """Verifier accuracy on correct and on wrong responses, and pairwise comparison accuracy
    (verdicts decoded in cfg.verdict's mode, as the curves' are)."""
    style = cfg.prompt_style
    params = SamplingParams(temperature=cfg.verify_temperature, max_tokens=cfg.verify_max_tokens, seed=cfg.sample_seed)
    prompts = [verify_prompt(t["question"], t[kind], style, cfg.verify_view) for t in triples
               for kind in ("correct", "wrong")]
    rows = await sample_verdicts(generate, prompts, [cfg.k_verif] * len(prompts), params, mode=cfg.verdict,
                                 kind="verify", salt=3)
    verdicts = np.array([[code for code, _ in row] for row in rows]).reshape(len(triples), 2, -1)
    pairs = [compare_prompt(t["question"], t["correct"], t["wrong"], style) for t in triples]
    pairs += [compare_prompt(t["question"], t["wrong"], t["correct"], style) for t in triples]
    cmp = await sample_verdicts(generate, pairs, [max(1, cfg.k_tie // 10)] * len(pairs), params, mode=cfg.verdict,
                                kind="compare", salt=4)
    wanted = [1] * len(triples) + [2] * len(triples)  # where the correct response sits
    picks = [(code, w) for row, w in zip(cmp, wanted, strict=True) for code, _ in row]
    return {
        "triples": len(triples), "verdicts_per_response": cfg.k_verif, "verdict_mode": cfg.verdict,
        "accuracy_on_correct": float((verdicts[:, 0] == 1).mean()),
        "accuracy_on_wrong": float((verdicts[:, 1] == 0).mean()),
        "unparsable_rate": float((verdicts < 0).mean()),
        "comparison_accuracy": float(np.mean([code == w for code, w in picks])),
        "comparison_unparsable_rate": float(np.mean([code < 0 for code, _ in picks])),
    }


class ScalingExperiment:
    """One scaling experiment: each step a method, the state in Redis and run_dir."""

    def __init__(self, cfg: ScalingConfig, store: Store, run_dir: Path, generate: Generate, model: str = "",
                 tracker: Tracker | None = None, verify_generate: Generate | None = None, verifier: str = ""):
        """`model`: the resolved checkpoint, stored in the sampling plan (a rerun with another refuses);
        `verify_generate` samples the verdicts and comparisons from `verifier` (cfg.verifier resolved),
        else `generate` does (self-verification)."""
        self.cfg, self.store, self.run_dir, self.generate, self.model = cfg, store, run_dir, generate, model
        self.verify_generate, self.verifier = verify_generate or generate, verifier
        self.tracker = tracker or Tracker({})
        self.started = time.time()
        self.bars: dict[str, Any] = {}

    def progress(self, phase: str, done: int, total: int) -> None:
        """One bar per sampling phase (the sampler reports done/total after each stored batch)."""
        bar = self.bars.get(phase)
        if bar is None:
            bar = self.bars[phase] = progress(total=total, initial=done, unit="q",
                                              desc=f"[{PHASE_NAMES.get(phase, phase)}] {phase}")
        bar.update(done - bar.n)
        if done >= total:
            bar.close()

    def questions(self) -> list[dict[str, str]]:
        questions = load_questions(self.cfg)
        if self.cfg.verifier:
            check_heldout(self.cfg.verifier, [q["question"] for q in questions])
        return questions

    def sample(self, questions: list[dict[str, str]]) -> ScoredPool:
        """Candidates, verdicts and comparisons (resumed from Redis), as one pool."""
        sampler = ScalingSampler(self.store.client, self.cfg.experiment, self.generate,
                                 self.cfg.plan(self.model, self.verifier), self.progress,
                                 fence=self.store.fence_for(self.cfg.experiment), verify_generate=self.verify_generate)
        try:
            records = asyncio.run(sampler.run(questions))
        finally:  # a phase that failed half way: its bar (and heartbeat, common/progress.py) ends with it
            for bar in self.bars.values():
                bar.close()
        write_candidates(self.run_dir / CANDIDATES_FILE, sampler.candidate_rows(questions))
        return ScoredPool.from_records(records, score=self.cfg.curves.options.score)

    def curves(self, pool: ScoredPool) -> dict[str, Any]:
        t = time.time()
        log.info("curves: %d strategies, bootstrap CIs over %d questions", len(self.cfg.curves.strategies),
                 len(pool.question_ids))
        curves = compute_curves(pool, self.cfg.curves)
        write_outputs(self.run_dir, curves, pool)
        summary = curves.summary() | {"own_verification": pool.own_verification()}
        for strategy, rows in summary["curves"].items():  # accuracy against k, one series per strategy
            for row in rows:
                self.tracker.log({strategy: row["accuracy"]}, step=row["k"], prefix="curves/accuracy")
        return summary | {"curves_s": round(time.time() - t, 2)}

    def triples(self) -> list[dict[str, str]]:
        cfg = self.cfg
        if cfg.triples == "arith":
            return arith_triples(cfg.benchmark_triples, seed=cfg.arith_seed + 1)
        lines = Path(cfg.triples).read_text().splitlines()
        return [json.loads(x) for x in lines if x.strip()][: cfg.benchmark_triples]

    def benchmark(self) -> dict[str, Any]:
        triples = self.triples()
        log.info("verification benchmark: %d triples, %d verdicts per response", len(triples), self.cfg.k_verif)
        result = asyncio.run(verification_benchmark(self.verify_generate, triples, self.cfg))
        self.tracker.log(result, step=0, prefix="verification_benchmark")
        return result

    def write(self, summary: dict[str, Any]) -> None:
        summary["wall_s"] = round(time.time() - self.started, 1)
        write_json(self.run_dir / "summary.json", summary)
        (self.run_dir / "report.md").write_text(report(self.cfg, summary))
        self.store.events(self.cfg.experiment).emit("scaling_done", wall_s=summary["wall_s"])

    def run(self) -> dict[str, Any]:
        summary: dict[str, Any] = {"experiment": self.cfg.experiment, "model": self.model,
                                   "verifier": self.verifier or "self"}
        if self.cfg.mode in ("curves", "both"):
            summary |= self.curves(self.sample(self.questions()))
        if self.cfg.mode in ("verification_benchmark", "both"):
            summary["verification_benchmark"] = self.benchmark()
        self.write(summary)
        return summary
