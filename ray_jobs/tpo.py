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
from common.tracking import Tracker, training_args
from ray_jobs import checks, runner
from search.pool import SamplerPool, planned_path
from thinking import report
from thinking.config import TpoConfig
from thinking.judging import make_judge, resolve
from thinking.loop import TpoLoop
from thinking.state import TpoState
from training.checkpoints import clean_scratch, discard_unpublished

log = logging.getLogger(__name__)


def dpo_loss(sft_weight: float) -> dict[str, Any]:
    """Plain DPO, or DPO plus sft_weight x NLL on the chosen response (TRL's combined loss types)."""
    return {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, sft_weight]} if sft_weight else {}


def dpo_trainer(cfg: TpoConfig, storage: Path, models, run_dir: Path, seed_checkpoint: str):
    """TpoLoop's train: DPO as a Ray task; it hands the weights back through Ray's object store
    when the samplers take them from memory (sampler.weight_sync)."""
    # imported here, not at the top: --help needs no torch or TRL
    from training.common import lora_args
    from training.dpo import DPOJobConfig, train_dpo_remote

    in_memory = planned_path(cfg.sampler.weight_sync, cfg.sampler.engine) == "memory"

    async def train(rows: list[dict[str, Any]], start, arm: str, iteration: int) -> tuple[str, dict[str, Any], Any]:
        t = cfg.train
        out = storage / "checkpoints" / f"{arm}-it{iteration + 1}"
        discard_unpublished(out, models.list())  # a run killed before publishing it; never a published one
        # a Ray task's stderr is no terminal: the trainer's numbers come as log lines, not a bar
        job = DPOJobConfig(model_path=start.checkpoint, output_dir=str(out.resolve()),
                           max_steps=t.max_steps, save_steps=t.save_steps, learning_rate=t.learning_rate,
                           beta=t.beta, **lora_args(t.lora, t, seed_checkpoint),
                           per_device_train_batch_size=t.batch_size, max_length=t.max_length,
                           disable_tqdm=True, logging_steps=max(1, t.max_steps // 5), seed=iteration,
                           completion_eos=not cfg.pairs.divergence_words,  # windows stop mid-thought
                           **dpo_loss(t.sft_weight),
                           **training_args(cfg.tracking, run_dir, out.name))
        weights = None
        if in_memory:
            result_ref, weights = train_dpo_remote(job, rows, num_cpus=t.num_cpus, weights=True)
            result = await result_ref
        else:
            result = await train_dpo_remote(job, rows, num_cpus=t.num_cpus)
        return result.checkpoint, result.metrics | {"rows": len(rows)}, weights
    return train


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
