"""Scaling-curve experiment: sampling-based search with self-verification, from one stored pool.

    python -m ray_jobs.scaling --config configs/scaling-demo.yaml          # offline demo (make demo-scaling)
    python -m ray_jobs.scaling --config configs/scaling-demo.yaml questions=20 k_inf=8
    python -m ray_jobs.scaling --config configs/scaling-demo.yaml checker=examples.checkers:exact_text \\
        experiment=scaling-demo-exact          # your own answer checker (docs/configuration.md#plug-in-points)
    python -m ray_jobs.scaling dataset=/data/math500.jsonl model=/ckpt/qwen prompt_style=full \\
        sampler.engine=vllm sampler.num_actors=8 experiment=math500-v1
    ray job submit --working-dir . --runtime-env deploy/runtime_env.yaml -- \
        python -m ray_jobs.scaling --config configs/scaling-demo.yaml   # the shipped model travels in the working dir

Writes runs/<experiment>/: config.yaml, pool.npz, candidates.jsonl, curves.csv, heatmap.csv, summary.json,
heatmap.png, curves.png, curves_ambiguous.png and report.md (with the verification
benchmark). The steps live in scaling.experiment; this file only wires them.
"""

from __future__ import annotations

import logging
from typing import Any

from common.fmt import num
from common.tracking import Tracker
from jobs import runner
from scaling import checks
from scaling.config import ScalingConfig
from scaling.experiment import ScalingExperiment, make_generate
from training import adapters, embedded, pretrained
from training.seed import build_seed_model

log = logging.getLogger(__name__)


def resolve_model(cfg: ScalingConfig) -> str:
    """The checkpoint to sample from: `seed` builds (or reuses) the offline seed model; an embedded
    model (models/<name> with a manifest) is checked against its file hashes first. With
    sampler.engine=openai, the name the server serves it as (engine_kwargs.model, else model), as is."""
    if cfg.sampler.engine == "openai":
        return cfg.sampler.engine_kwargs.get("model") or cfg.model
    if cfg.model != "seed":
        return embedded.verified(pretrained.resolve_checkpoint(cfg.model))
    seed = build_seed_model(cfg.seed_model)  # a bar on a terminal, else a log line per tenth of the steps
    log.info("seed model %s: %s (%s parameters, built in %ss)", "reused" if seed.cached else "built", seed.path,
             f"{seed.info['parameters']:,}", seed.info["build_s"])
    return seed.path


def resolve_verifier(cfg: ScalingConfig) -> str:
    """The verifier's checkpoint ("" = self-verification): an adapter dir (an embedded one checked
    against its manifest first) is merged into its base once (training.adapters)."""
    if not cfg.verifier:
        return ""
    if cfg.sampler.engine == "openai":  # a served name
        return cfg.verifier_pool().engine_kwargs.get("model") or cfg.verifier
    return adapters.checkpoint_of(cfg.verifier)


def run_job(cfg: ScalingConfig, ctx: runner.JobContext) -> dict[str, Any]:
    checkpoint, verifier = resolve_model(cfg), resolve_verifier(cfg)
    generate, shutdown = make_generate(cfg, checkpoint)
    verify_generate, shutdown_verifier = make_generate(cfg, verifier, cfg.verifier_pool()) if verifier else (None, lambda: None)
    try:
        with Tracker.start(cfg.tracking, run_dir=ctx.run_dir, experiment=cfg.experiment, config=cfg) as tracker:
            return ScalingExperiment(cfg, ctx.store, ctx.run_dir, generate, model=checkpoint, tracker=tracker,
                                     verify_generate=verify_generate, verifier=verifier).run()
    finally:
        shutdown_verifier()
        shutdown()


def headline(summary: dict[str, Any]) -> str:
    k_inf = summary.get("pool", {}).get("k_inf")
    rows = {d["strategy"]: d for d in summary.get("differences", []) if d["k"] == k_inf}
    parts = [f"{s} - consistency at k={d['k']}: {d['difference']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]"
             for s, d in rows.items()]
    own = summary.get("own_verification", {})
    auc = own.get("within_question_auc_probability", own.get("within_question_auc"))
    if auc is not None and own.get("mixed_questions"):  # no AUC (nan) without a question of both kinds
        parts.append(f"within-question AUC: verifier {auc:.3f}, answer votes {own['answer_frequency_auc']:.3f} "
                     f"({own['mixed_questions']} questions)")
    return "scaling: " + ("; ".join(parts) or "verification benchmark done") + f" ({num(summary['wall_s'])} s)"


JOB = runner.JobSpec(workload="scaling", config_cls=ScalingConfig, run=run_job, doc=__doc__, headline=headline,
                     check=checks.check_scaling, shared_paths=checks.scaling_shared_paths,
                     demands=checks.scaling_demands)


def run(cfg: ScalingConfig) -> dict[str, Any]:
    """Run one experiment with its status kept (what tests and other code call)."""
    return runner.execute(JOB, cfg)


def main(argv: list[str] | None = None) -> None:
    runner.main(JOB, argv)


if __name__ == "__main__":
    main()
