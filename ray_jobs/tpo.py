"""Thinking-LLM preference training (TPO): thoughts judged by their responses, DPO iterations.

    python -m ray_jobs.tpo --config configs/tpo-demo.yaml                 # offline demo (make demo-tpo)
    python -m ray_jobs.tpo --config configs/tpo-demo.yaml --iterations 3 measure.seeds=[0,1,2]
    ray job submit --working-dir . --runtime-env deploy/runtime_env.yaml -- \
        python -m ray_jobs.tpo --config configs/tpo-qwen.yaml storage=/shared/ratchet/checkpoints  # GPUs, vLLM

Wiring only: config -> store -> sampler pool (and the judge) -> thinking.TpoLoop -> report.
The loop samples K thought+response outputs per fresh instruction, judges the responses
alone, builds length-controlled DPO pairs, trains (TRL DPO as a Ray task, GPU if any),
publishes the version, switches the samplers to it (its weights from memory or its
checkpoint: sampler.weight_sync), and measures both arms (thought and the
direct baseline) on held-out instructions. Writes runs/<experiment>/summary.json,
report.md and iterations.png.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from common.fmt import num
from common.tracking import Tracker
from jobs import runner
from search.pool import SamplerPool
from thinking import checks, report
from thinking.config import TpoConfig
from thinking.judging import make_judge, resolve
from thinking.learn import dpo_trainer
from thinking.loop import TpoLoop
from thinking.state import TpoState
from training.checkpoints import clean_scratch

log = logging.getLogger(__name__)


async def run(cfg: TpoConfig, ctx: runner.JobContext) -> dict[str, Any]:
    models = ctx.store.models(cfg.experiment)
    seed = resolve(cfg.model.checkpoint)
    pool = SamplerPool(replace(cfg.sampler, experiment=cfg.experiment), checkpoint=seed)
    judge, judge_pool = make_judge(cfg)
    # under the experiment's name, so experiments sharing a storage path never collide
    storage = Path(cfg.storage) / cfg.experiment if cfg.storage else ctx.run_dir
    clean_scratch(storage / "checkpoints")  # a killed training's; the runner's lease makes them ours
    tracker = Tracker.start(cfg.tracking, run_dir=ctx.run_dir, experiment=cfg.experiment, config=cfg)
    try:
        log.info("starting %d sampler actor(s), engine %s, model %s", cfg.sampler.num_actors, cfg.sampler.engine, seed)
        await pool.ready()
        state = TpoState(ctx.store.client, cfg.experiment, ctx.store.fence_for(cfg.experiment))  # fenced writes
        loop = TpoLoop(cfg, state=state, models=models, sampler=pool, judge=judge,
                       train=dpo_trainer(cfg, storage, models, ctx.run_dir, seed), seed_checkpoint=seed, tracker=tracker)
        summary = await loop.run()
    finally:
        tracker.close()
        pool.shutdown()
        if judge_pool is not None:
            judge_pool.shutdown()
    summary |= {"experiment": cfg.experiment, "judge": cfg.judge.kind, "heldout": cfg.measure.heldout,
                "seeds": list(cfg.measure.seeds)}
    report.write(ctx.run_dir, summary)
    return summary


def headline(s: dict[str, Any]) -> str:
    t, d = s["iterations"][-1], (s["baselines"]["direct"] or [{}])[-1]
    return (f"iteration {t['iteration']}: TPO win rate vs seed {num(t['win_rate_vs_seed'])}, vs direct "
            f"{num(t.get('win_rate_vs_direct'))}, direct baseline vs seed {num(d.get('win_rate_vs_seed'))}")


JOB = runner.JobSpec(workload="tpo", config_cls=TpoConfig, run=run, doc=__doc__, headline=headline,
                     iterations_flag=True, check=checks.check_tpo, shared_paths=checks.tpo_shared_paths,
                     demands=checks.tpo_demands)


def main(argv: list[str] | None = None) -> None:
    runner.main(JOB, argv)


if __name__ == "__main__":
    main()
