"""Several models in one search, measured after the iterations like a control (issue #42 item 3).

The loop gives every model (each published version of the experiment, and each checkpoint
`mix.checkpoints` names) its own sampler; every measured search (each seed, demo and held-out
tasks) then draws each batch from one of them through a fresh `ModelMix`, so its bandit learns
within that search only, and the vote pools every model's programs. With `mix.uniform_control`
the same models are measured split evenly, so the report shows what the bandit's choice adds
over mixing alone. All searches keep SOAR's budget in programs: for models of one size (the
versions of one experiment) equal programs are equal sampling time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

from evolution.config import SoarConfig
from evolution.controls import measure_sampler
from evolution.driver import Sampler
from evolution.model_mix import Arm, MixConfig, ModelMix, Rule
from store import Store
from verifiers.arc.grids import ArcTask
from verifiers.arc.results import Verifier

log = logging.getLogger(__name__)

MIX_PREFIX = "model_mix_"  # baselines' keys: model_mix_thompson, model_mix_uniform


def mix_rules(cfg: SoarConfig) -> list[Rule]:
    """The configured rule, then the uniform split as its control (once)."""
    return [cfg.mix.rule] + (["uniform"] if cfg.mix.uniform_control and cfg.mix.rule != "uniform" else [])


def pooled_shares(mixes: Mapping[tuple[str, int], ModelMix]) -> dict[str, dict[str, dict[str, float]]]:
    """Per split, per model: its share of the programs drawn and of the right ones (right on
    every training pair), pooled over that split's searches. A search resumed from the store
    drew nothing in this process and counts for nothing here."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for split in sorted({s for s, _ in mixes}):
        arms: dict[str, Arm] = {}
        for (s, _), mix in mixes.items():
            if s != split:
                continue
            for name, a in mix.bandit.arms.items():  # a search resumed from the store: all zeros
                total = arms.setdefault(name, Arm(name))
                total.programs += a.programs
                total.reward += a.reward
                total.seconds += a.seconds
        programs = sum(a.programs for a in arms.values())
        right = sum(a.reward for a in arms.values())
        if not programs:
            continue  # every search of this split resumed: its shares were in the run that drew them
        out[split] = {n: {"programs": a.programs, "right": a.reward, "seconds": round(a.seconds, 2),
                          "budget_share": round(a.programs / programs, 4),
                          "right_share": round(a.reward / right, 4) if right else 0.0}
                      for n, a in arms.items()}
    return out


def _fresh_mix(mix_cfg: MixConfig, samplers: Mapping[str, Sampler], rule: Rule,
               made: dict[tuple[str, int], ModelMix], split: str, seed: int) -> ModelMix:
    """A new mix for one measured search, kept in `made` for its shares."""
    mix = ModelMix(samplers, rule, cost=mix_cfg.cost, warmup=mix_cfg.warmup, seed=seed, exclusive=mix_cfg.exclusive)
    made[(split, seed)] = mix
    return mix


async def measure_mixes(cfg: SoarConfig, store: Store, tasks: Mapping[str, ArcTask],
                        heldout: Mapping[str, ArcTask], samplers: Mapping[str, Sampler], verifier: Verifier,
                        examples: Mapping[str, tuple[ArcTask, str]] | None = None) -> dict[str, Any]:
    """{"model_mix_<rule>": measurement + the models and their shares} for every rule of mix_rules."""
    if len(samplers) < 2:
        raise ValueError(f"a model mix needs two models or more; this experiment has {sorted(samplers)}")
    out: dict[str, Any] = {}
    for rule in mix_rules(cfg):
        mixes: dict[tuple[str, int], ModelMix] = {}
        fresh = partial(_fresh_mix, cfg.mix, samplers, rule, mixes)
        log.info("model mix (%s) over %s", rule, ", ".join(samplers))
        measured = await measure_sampler(cfg, store, tasks, heldout, None, verifier,
                                         namespace=f"{cfg.experiment}.mix-{rule}", model_version=f"mix-{rule}",
                                         label=f"model mix ({rule})", examples=examples, fresh_sampler=fresh)
        out[MIX_PREFIX + rule] = measured | {"rule": rule, "models": list(samplers), "shares": pooled_shares(mixes)}
    return out
