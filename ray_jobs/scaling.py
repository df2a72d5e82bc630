"""Scaling-curve experiment: sampling-based search with self-verification, from one stored pool.

    python -m ray_jobs.scaling --config configs/scaling-demo.yaml          # offline demo (make demo-scaling)
    python -m ray_jobs.scaling --config configs/scaling-demo.yaml questions=20 k_inf=8
    python -m ray_jobs.scaling dataset=data/math500.jsonl model=/ckpt/qwen prompt_style=full \\
        engine=vllm num_actors=8 experiment=math500-v1
    ray job submit --working-dir . -- python -m ray_jobs.scaling --config configs/scaling-demo.yaml

Samples k_inf candidates per question and k_verif self-verification verdicts per candidate
(plus k_tie pairwise comparisons) through the SamplerPool, stores everything in Redis (a
rerun resumes), then computes every strategy's accuracy at every (k, k_verif) by
subsampling, with bootstrap CIs over questions. Writes runs/<experiment>/: config.yaml,
pool.npz, curves.csv, heatmap.csv, summary.json, heatmap.png, curves.png,
curves_ambiguous.png, verification_benchmark.json and report.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from common.config import dump_yaml, load_config, to_dict
from search.scaling.arith_problems import arith_triples, make_problems
from search.scaling.curves import LABELS, Curves, CurvesConfig, compute_curves, plot_curves
from search.scaling.pool import ScoredPool
from search.scaling.sampling import SamplingPlan, ScalingSampler
from common.sampling import Completion, Prompt, SamplingParams
from store import Store
from store.codehash import content_hash
from training.seed import SeedConfig, build_seed_model
from verifiers.math_answers import load_jsonl_dataset
from verifiers.selfverify import compare_prompt, parse_comparison, parse_verification, verify_prompt

CPUS_PER_SAMPLER = 1.0  # each sampler actor's CPU share; engines use that many threads


def demo_seed() -> SeedConfig:
    return SeedConfig(preset="tiny", corpus="search.scaling.arith_problems:seed_corpus", n=4000, max_steps=600,
                      max_length=256)


@dataclass
class ScalingConfig:
    experiment: str = "scaling"  # Redis namespace; outputs go to runs_dir/experiment/
    runs_dir: str = "runs"
    mode: Literal["curves", "verification_benchmark", "both"] = "curves"  # what to run
    dataset: str = "arith"  # "arith" (generated offline) or a JSONL of {question, answer} rows
    questions: int = 500  # first N questions of the dataset
    arith_seed: int = 1000  # seed of generated problems (the seed corpus uses 0)
    triples: str = "arith"  # verification benchmark: "arith" or a JSONL of {question, correct, wrong}
    benchmark_triples: int = 100  # triples used by the verification benchmark
    model: str = "seed"  # "seed": build/reuse the offline seed model; else a checkpoint (or served model name)
    seed_model: SeedConfig = field(default_factory=demo_seed)  # used when model == "seed"
    engine: str = "transformers"  # search.engines name
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. batch_size, base_url
    sampler: Literal["pool", "local"] = "pool"  # Ray SamplerPool, or one engine in this process
    num_actors: int = 1  # sampler actors (pool only)
    prompt_style: Literal["full", "compact"] = "full"  # "compact" is what the seed model was trained on
    k_inf: int = 200  # candidates per question (REFERENCES: 200)
    k_verif: int = 50  # verdicts per candidate (REFERENCES: 50)
    k_tie: int = 100  # pairwise comparisons per question (REFERENCES: 100)
    compare_classes: int = 4  # best-verified answer classes that enter the comparisons
    temperature: float = 1.5  # candidate sampling (REFERENCES: 1.5)
    verify_temperature: float = 1.0  # verdicts and comparisons (REFERENCES: 1.0)
    max_tokens: int = 2048  # per candidate
    verify_max_tokens: int = 2048  # per verdict or comparison
    batch_questions: int = 8  # questions per stored batch (the resumable unit)
    sample_seed: int | None = 0  # sampling seed (None: fresh randomness)
    curves: CurvesConfig = field(default_factory=CurvesConfig)  # subsampling, CIs, Verification@k options

    def __post_init__(self):
        for name in ("questions", "k_inf", "k_verif", "num_actors", "batch_questions", "compare_classes",
                     "max_tokens", "verify_max_tokens", "benchmark_triples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.k_tie < 0:
            raise ValueError(f"k_tie={self.k_tie} must be >= 0")
        if self.temperature < 0 or self.verify_temperature < 0:
            raise ValueError("temperature and verify_temperature must be >= 0")

    def plan(self) -> SamplingPlan:
        return SamplingPlan(
            k_inf=self.k_inf, k_verif=self.k_verif, k_tie=self.k_tie, compare_classes=self.compare_classes,
            temperature=self.temperature, verify_temperature=self.verify_temperature, max_tokens=self.max_tokens,
            verify_max_tokens=self.verify_max_tokens, style=self.prompt_style, batch_questions=self.batch_questions,
            seed=self.sample_seed,
        )


def load_questions(cfg: ScalingConfig) -> list[dict[str, str]]:
    """Questions with ids that change when the text does (stored samples are keyed by them)."""
    if cfg.dataset == "arith":
        rows = make_problems(cfg.questions, seed=cfg.arith_seed)
    else:
        rows = load_jsonl_dataset(cfg.dataset, cfg.questions)
    return [{"id": f"{r['id']}:{content_hash(r['question'] + '|' + r['answer'])[:8]}",
             "question": r["question"], "answer": r["answer"]} for r in rows]


def make_generate(cfg: ScalingConfig, checkpoint: str):
    """An async (prompts, params) -> completions over the SamplerPool or an in-process engine."""
    if cfg.sampler == "local":
        from search.engines import make_engine

        engine = make_engine(cfg.engine, checkpoint=checkpoint, **cfg.engine_kwargs)

        async def generate(prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
            return await asyncio.to_thread(engine.generate, list(prompts), params)

        return generate, lambda: None
    import ray

    from search.pool import PoolConfig, SamplerPool

    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    pool = SamplerPool(PoolConfig(engine=cfg.engine, engine_kwargs=cfg.engine_kwargs, num_actors=cfg.num_actors,
                                  num_cpus_per_actor=CPUS_PER_SAMPLER, experiment=cfg.experiment),
                       checkpoint=checkpoint)
    return pool.generate, pool.shutdown


async def verification_benchmark(generate, triples: list[dict[str, str]], cfg: ScalingConfig) -> dict[str, Any]:
    """Verifier accuracy on correct and on wrong responses, and pairwise comparison accuracy."""
    style = cfg.prompt_style
    params = SamplingParams(n=cfg.k_verif, temperature=cfg.verify_temperature, max_tokens=cfg.verify_max_tokens,
                            seed=cfg.sample_seed)
    prompts = [verify_prompt(t["question"], t[kind], style) for t in triples for kind in ("correct", "wrong")]
    rows = await generate(prompts, params)
    verdicts = np.array([[parse_verification(c.text).value if parse_verification(c.text).ok else -1 for c in row]
                         for row in rows]).reshape(len(triples), 2, -1)
    pairs = [compare_prompt(t["question"], t["correct"], t["wrong"], style) for t in triples]
    pairs += [compare_prompt(t["question"], t["wrong"], t["correct"], style) for t in triples]
    cmp = await generate(pairs, SamplingParams(n=max(1, cfg.k_tie // 10), temperature=cfg.verify_temperature,
                                               max_tokens=cfg.verify_max_tokens, seed=cfg.sample_seed))
    wanted = [1] * len(triples) + [2] * len(triples)  # where the correct response sits
    picks = [(parse_comparison(c.text), w) for row, w in zip(cmp, wanted, strict=True) for c in row]
    return {
        "triples": len(triples), "verdicts_per_response": cfg.k_verif,
        "accuracy_on_correct": float((verdicts[:, 0] == 1).mean()),
        "accuracy_on_wrong": float((verdicts[:, 1] == 0).mean()),
        "unparsable_rate": float((verdicts < 0).mean()),
        "comparison_accuracy": float(np.mean([v.ok and v.value == w for v, w in picks])),
        "comparison_unparsable_rate": float(np.mean([not v.ok for v, _ in picks])),
    }


def write_outputs(run_dir: Path, curves: Curves, pool: ScoredPool, summary: dict[str, Any]) -> None:
    pool.save(run_dir / "pool.npz")
    curves.write_csv(run_dir / "curves.csv")
    grid = curves.heatmap()
    lines = ["k_inf," + ",".join(f"k_verif={v}" for v in curves.k_verif_values)]
    lines += [f"{k}," + ",".join(f"{x:.4f}" for x in row) for k, row in zip(curves.k_values, grid, strict=True)]
    (run_dir / "heatmap.csv").write_text("\n".join(lines) + "\n")
    plot_curves(curves, run_dir)


def report(cfg: ScalingConfig, summary: dict[str, Any]) -> str:
    out = [f"# {cfg.experiment}: sampling-based search with self-verification\n"]
    if "curves" in summary:
        p = summary["pool"]
        out.append(f"{p['questions']} questions x {p['k_inf']} candidates x {p['k_verif']} verdicts; "
                   f"{summary['ambiguous_questions']} ambiguous (at least one correct candidate). "
                   f"Each point: mean over {cfg.curves.seeds} subsamples; 95% bootstrap CI over questions.\n")
        for key, title in (("curves", "All questions"), ("curves_ambiguous", "Ambiguous questions")):
            out += [f"\n## {title}, largest k\n", "| strategy | k | accuracy | 95% CI |", "|---|---|---|---|"]
            for s, rows in summary[key].items():
                if rows:
                    r = rows[-1]
                    out.append(f"| {LABELS.get(s, s)} | {r['k']} | {r['accuracy']:.3f} | "
                               f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}] |")
        out.append("\n![heatmap](heatmap.png)\n\n![curves](curves.png)\n\n![ambiguous](curves_ambiguous.png)\n")
        out.append("Tables: [curves.csv](curves.csv), [heatmap.csv](heatmap.csv), [summary.json](summary.json).\n")
    if "verification_benchmark" in summary:
        b = summary["verification_benchmark"]
        out += ["\n## Verification benchmark\n", "| measure | value |", "|---|---|"]
        out += [f"| {k} | {v:.3f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in b.items()]
    out.append("\nResolved config: [config.yaml](config.yaml).\n")
    return "\n".join(out)


def run(cfg: ScalingConfig) -> dict[str, Any]:
    started = time.time()
    run_dir = Path(cfg.runs_dir) / cfg.experiment
    run_dir.mkdir(parents=True, exist_ok=True)
    dump_yaml(cfg, run_dir / "config.yaml")
    store = Store.connect()
    store.experiments.create(cfg.experiment, "scaling", to_dict(cfg), exist_ok=True)
    store.experiments.set_status(cfg.experiment, "running")

    checkpoint = cfg.model
    if cfg.model == "seed":
        seed = build_seed_model(cfg.seed_model, progress=False)
        checkpoint = seed.path
        print(f"[model] seed model {'reused' if seed.cached else 'built'}: {seed.path} "
              f"({seed.info['parameters']:,} parameters, built in {seed.info['build_s']}s)", flush=True)
    generate, shutdown = make_generate(cfg, checkpoint)
    summary: dict[str, Any] = {"experiment": cfg.experiment, "model": checkpoint}
    try:
        if cfg.mode in ("curves", "both"):
            questions = load_questions(cfg)

            def progress(phase: str, done: int, total: int) -> None:
                print(f"[{phase}] {done}/{total} questions ({time.time() - started:.0f}s)", flush=True)

            sampler = ScalingSampler(store.client, cfg.experiment, generate, cfg.plan(), progress)
            records = asyncio.run(sampler.run(questions))
            pool = ScoredPool.from_records(records)
            t = time.time()
            curves = compute_curves(pool, cfg.curves)
            summary |= curves.summary() | {"curves_s": round(time.time() - t, 2)}
            write_outputs(run_dir, curves, pool, summary)
        if cfg.mode in ("verification_benchmark", "both"):
            triples = (arith_triples(cfg.benchmark_triples, seed=cfg.arith_seed + 1) if cfg.triples == "arith"
                       else [json.loads(x) for x in Path(cfg.triples).read_text().splitlines() if x.strip()]
                       [: cfg.benchmark_triples])
            summary["verification_benchmark"] = asyncio.run(verification_benchmark(generate, triples, cfg))
    finally:
        shutdown()
    summary["wall_s"] = round(time.time() - started, 1)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    (run_dir / "report.md").write_text(report(cfg, summary))
    store.experiments.set_status(cfg.experiment, "done")
    store.events(cfg.experiment).emit("scaling_done", wall_s=summary["wall_s"])
    print(report(cfg, summary))
    print(f"wrote {run_dir}/ in {summary['wall_s']}s")
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ray_jobs.scaling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="YAML of overrides (see configs/scaling-demo.yaml)")
    parser.add_argument("overrides", nargs="*", help="field=value overrides, e.g. k_inf=16 curves.seeds=5")
    args = parser.parse_args(argv)
    run(load_config(args.config, ScalingConfig, args.overrides))


if __name__ == "__main__":
    main()
