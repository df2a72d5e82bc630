"""The TPO judge from its config: a registered judge or the user's own class, with what it needs.

    judge, judge_pool = make_judge(cfg)     # judge_pool: the judge LLM's own SamplerPool, or None

A judge's constructor takes `judge.kwargs`, plus what the job supplies when it asks for it by
parameter name: `generate` (the judge LLM: its own pool of judge.checkpoint, or judge.base_url
through the OpenAI engine) and `checkpoint` (judge.checkpoint, resolved to a local path). So a
user's LLM judge is a class with a `generate` parameter and `async score`; docs/tpo.md shows one.
`check_judge` is the same decision without starting anything, for `--dry-run`.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path

from common.config import ConfigError
from common.secrets import secret_from_environment
from search.pool import SamplerPool
from search.pool_config import PoolConfig
from thinking.config import JudgeConfig, TpoConfig
from training import pretrained
from training.checkpoints import is_chat_model
from verifiers.judges import Judge
from verifiers.judges.pairwise import CHOICE_REGEX
from verifiers.judges.registry import check_kwargs, judge_class

SUPPLIED = ("generate", "checkpoint")  # constructor parameters the job fills in itself


def resolve(path: str) -> str:
    """Absolute checkpoint path (Ray workers do not run in the driver's directory); a
    `pretrained:<name>` is fetched (once) and converted."""
    p = Path(pretrained.resolve_checkpoint(path))
    return str(p.resolve()) if p.exists() else path


def wants(cls: type) -> set[str]:
    """Which of SUPPLIED the judge's constructor takes."""
    return set(SUPPLIED) & set(inspect.signature(cls.__init__).parameters)


def check_judge(j: JudgeConfig) -> type:
    """The judge class, its kwargs checked against its constructor, and the engine it asks for
    configured; ConfigError naming the field otherwise."""
    cls = judge_class(j.kind)
    needs = wants(cls)
    check_kwargs(cls, j.kwargs, needs)
    if "generate" in needs:
        if j.engine == "openai" and not j.base_url:
            raise ConfigError(f"judge.base_url is empty: judge {j.kind!r} generates with a model and "
                              "judge.engine is 'openai'; give the endpoint URL")
        if j.engine == "pool" and not j.checkpoint:
            raise ConfigError(f"judge.checkpoint is empty: judge {j.kind!r} generates with a model in a pool of "
                              "its own (judge.engine 'pool'); give the judge model's checkpoint, or "
                              "judge.engine=openai with judge.base_url")
    if "checkpoint" in needs and not j.checkpoint and \
            inspect.signature(cls.__init__).parameters["checkpoint"].default is inspect.Parameter.empty:
        raise ConfigError(f"judge.checkpoint is empty: judge {j.kind!r} needs a checkpoint")
    check = getattr(cls, "check_checkpoint", None)  # e.g. a reward model: a sequence classifier, or refused
    if "checkpoint" in needs and j.checkpoint and check is not None:
        try:
            check(j.checkpoint)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    return cls


def judge_pool_config(cfg: TpoConfig) -> PoolConfig | None:
    """The judge LLM's own sampler pool, when the judge generates on engine 'pool': one actor with
    the samplers' settings, outside the experiment's registry. None when make_judge starts none;
    the job's resource demands (thinking/checks.py) ask the same question."""
    j = cfg.judge
    if j.engine != "pool" or "generate" not in wants(judge_class(j.kind)):
        return None
    return replace(cfg.sampler, num_actors=1, experiment=None)


def make_judge(cfg: TpoConfig) -> tuple[Judge, SamplerPool | None]:
    """The judge and, when it generates through a pool of its own, that pool (the caller shuts it down)."""
    j = cfg.judge
    cls = check_judge(j)
    needs, kwargs, pool = wants(cls), dict(j.kwargs), None
    if "checkpoint" in needs and j.checkpoint:
        kwargs["checkpoint"] = resolve(j.checkpoint)
    pool_cfg = judge_pool_config(cfg)
    if "generate" in needs and j.engine == "openai":
        from search.engines.openai_engine import OpenAIEngine

        engine = OpenAIEngine(j.base_url, model=j.model or None, api_key=secret_from_environment("OPENAI_API_KEY"))
        kwargs["generate"] = engine.agenerate
    elif pool_cfg is not None:  # "generate" in needs, on engine 'pool'
        checkpoint = resolve(j.checkpoint)
        pool = SamplerPool(pool_cfg, checkpoint=checkpoint)
        kwargs["generate"] = pool.generate
        if cls.__name__ == "PairwiseJudge":  # its own pool constrains the verdict to one letter, asked through
            kwargs = {"chat": is_chat_model(checkpoint), "regex": CHOICE_REGEX} | kwargs  # a chat template
    return cls(**kwargs), pool

