"""What a TPO run checks before Redis, Ray or a seed build start, and what it asks of the cluster
(the job's `JobSpec.check`, `shared_paths` and `demands`, ray_jobs/tpo.py).

Building the config does no I/O (TpoConfig's own rules); these read the disk and import: the
checkpoints, the judge (its class, its kwargs against its constructor), the instructions
source, the sampler's engine. Each failure is one ConfigError naming the field and the fix.
"""

from __future__ import annotations

from pathlib import Path

from common.config import ConfigError
from common.placement import Demand
from common.plugins import load_function
from search.engines.checks import check_engine
from search.pool_config import pool_demand
from thinking.config import TpoConfig
from training.checks import need_checkpoint, training_demand


def check_tpo(cfg: TpoConfig) -> None:
    from thinking.judging import check_judge

    if cfg.sampler.engine == "openai":  # a served judge is judge.engine=openai, not the sampler
        raise ConfigError("sampler.engine=openai: TPO samples the checkpoints its DPO trains, which a server does "
                          "not serve; set sampler.engine=transformers or vllm (a served judge: judge.engine=openai)")
    need_checkpoint("model.checkpoint", cfg.model.checkpoint)
    if cfg.judge.checkpoint:
        need_checkpoint("judge.checkpoint", cfg.judge.checkpoint)
    check_judge(cfg.judge)  # imports an own judge class; its kwargs against its constructor
    load_function("instructions", cfg.instructions, "thinking.arith:instructions")  # thinking.loop calls it
    check_engine("sampler", cfg.sampler, job="tpo")


def tpo_shared_paths(cfg: TpoConfig) -> dict[str, str]:
    """The paths every node reads: the checkpoints' storage (runs_dir's when it is absolute)."""
    return {"storage": cfg.storage or (cfg.runs_dir if Path(cfg.runs_dir).is_absolute() else "")}


def tpo_demands(cfg: TpoConfig, gpus_exist: bool) -> list[Demand]:
    """The sampler pool, the judge LLM's own pool when make_judge starts one (the same
    judge_pool_config decides both), and the DPO task, which runs while both stay up."""
    from thinking.judging import judge_pool_config

    demands = [pool_demand("sampler.num_actors", cfg.sampler, gpus_exist)]
    judge_pool = judge_pool_config(cfg)
    if judge_pool is not None:
        demands.append(pool_demand("judge (a pairwise judge's pool: 1 x sampler.*)", judge_pool, gpus_exist))
    return demands + [training_demand("train.num_cpus (the DPO task)", cfg.train.num_cpus, gpus_exist)]
