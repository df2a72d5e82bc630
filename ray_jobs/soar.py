"""SOAR on ARC: sample programs, execute them in the sandbox, refine, vote, learn in hindsight.

    python -m ray_jobs.soar --config configs/soar-demo.yaml --iterations 2      # make demo
    python -m ray_jobs.soar --config configs/soar-demo.yaml search.samples_per_task=64
    python -m ray_jobs.soar --config configs/soar-demo.yaml --dry-run           # checks it; starts nothing
    ray job submit --working-dir . --runtime-env deploy/runtime_env.yaml -- \
        python -m ray_jobs.soar --config configs/soar-qwen.yaml storage_path=/shared/ratchet/checkpoints

Writes runs/<experiment>/: config.yaml, metrics.jsonl (one row per task and iteration),
summary.json (an `iterations` list, `baselines`), report.md, curve.png, iterations.png, task
renderings and attempts/<task>.json (each test input's two attempts and their programs).
Killed and started again with the same experiment name, it resumes from Redis. The loop
itself is evolution/loop.py; this file only wires it.
"""

from __future__ import annotations

import logging
from typing import Any

from common.fmt import num
from common.tracking import Tracker
from evolution import checks, metrics
from evolution.config import ARC_DSL, SoarConfig
from jobs import runner

log = logging.getLogger(__name__)


async def run(cfg: SoarConfig, ctx: runner.JobContext) -> dict[str, Any]:
    # imported here, not at the top: --help and --dry-run need none of torch, TRL or the actors
    from evolution.backends import pool_verifier
    from evolution.loop import SoarLoop, base_model, extra_tasks, load_tasks
    from search.pool import SamplerPool
    from verifiers.arc.pool import ArcVerifierPool

    tasks, heldout = load_tasks(cfg.tasks)  # a module:function source is imported and called here too
    extra = extra_tasks(cfg, tasks, heldout)
    base = base_model(cfg, ctx.store, sorted({*tasks, *heldout}))
    log.info("base model %s = %s", base.version, base.checkpoint)  # the tasks' counts: checks.check_soar's line
    sampler_pool = SamplerPool(cfg.sampler, checkpoint=base.checkpoint, version=base.version, files=base.files)
    verifier_pool = ArcVerifierPool(actors=cfg.verifier.actors, workers_per_actor=cfg.verifier.workers_per_actor,
                                    allowed_modules=(ARC_DSL,), use_cache=cfg.verifier.use_cache,
                                    request_timeout_s=cfg.verifier.request_timeout_s,
                                    scheduling_strategy=cfg.verifier.scheduling_strategy,
                                    resources=cfg.verifier.resources)
    tracker = Tracker.start(cfg.tracking, run_dir=ctx.run_dir, experiment=cfg.experiment, config=cfg)
    try:
        await sampler_pool.ready()
        def mix_pool(checkpoint: str, version: str, files: dict[str, str] | None, share: float) -> SamplerPool:
            return SamplerPool(checks.mix_pool_config(cfg.sampler, share), checkpoint=checkpoint, version=version,
                               files=files)

        loop = SoarLoop(cfg, store=ctx.store, tasks=tasks, heldout=heldout, base=base, sampler=sampler_pool,
                        verifier=pool_verifier(verifier_pool), run_dir=ctx.run_dir, tracker=tracker, extra=extra,
                        new_sampler=mix_pool)
        return await loop.fit()
    finally:
        tracker.close()
        sampler_pool.shutdown()
        verifier_pool.close()


def headline(summary: dict[str, Any]) -> str:
    """The last search's figures, then (when measured) the last model minus the seed-only control
    on held-out tasks, paired by seed: the number that says whether hindsight taught it anything."""
    e = summary["iterations"][-1]
    oracle = f" (oracle {num(e['oracle'])})" if metrics.scored(e) else ""
    line = (f"iteration {e['iteration']}: {metrics.solved_text(e, oracle)}, "
            f"{num(e['programs'])} programs, hit rate {num(e['hit_rate'])}, "
            f"sampler busy {num(e['sampler_busy_frac'])}, {num(e['wall_s'])} s")
    held = summary.get("comparisons", {}).get("last_minus_seed_only_control", {}).get("heldout_solved_seeds")
    if held:
        ci = f" [{held['ci95'][0]:+.2f}, {held['ci95'][1]:+.2f}]" if held["ci95"] else ""
        line += f"; held-out solved minus the seed-only control {held['mean']:+.2f}{ci} over {held['n']} seeds"
    return line


JOB = runner.JobSpec(workload="soar", config_cls=SoarConfig, run=run, doc=__doc__, headline=headline,
                     iterations_flag=True, check=checks.check_soar, shared_paths=checks.soar_shared_paths,
                     demands=checks.soar_demands)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return runner.main(JOB, argv)


if __name__ == "__main__":
    main()
