"""Several models in one search: each batch drawn from one of them, chosen by what each earned.

SOAR's best result pools the samples of five models. A `ModelMix` is a sampler (the driver's
`sampler(prompts, params)`) over several samplers, one per model. Each call goes to one model,
chosen by a `RateBandit` on what that model's batches earned per second of sampling; the driver
credits each batch's earnings back (`ModelMix.credit`, wired as SoarSearch's `on_scored`), and
the vote pools every model's programs, since each Completion carries its model's name.

The bandit is Thompson sampling for Poisson rates: a model that earned R rewards in T seconds
has the posterior Gamma(1 + R, rate T) on its reward rate (a flat prior on the rate, exposure in
seconds, or in programs drawn with cost="programs": SOAR's budgets are counted in programs);
each choice draws one rate per model and takes the largest. Every model is tried
`warmup` times first, so T > 0 before any draw. A model that never earns keeps Gamma(1, T): its
draws shrink as T grows and it loses its share; none is ever starved entirely. `uniform` is the
control: the model with the fewest batches so far, in the order given.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from common.sampling import Completion, Generate, Prompt, SamplingParams

Rule = Literal["thompson", "uniform"]
RULES: tuple[str, ...] = ("thompson", "uniform")
Cost = Literal["seconds", "programs"]  # what a model's earnings are divided by
COSTS: tuple[str, ...] = ("seconds", "programs")


@dataclass
class MixConfig:
    """Several models in one search, measured after the iterations like a control (evolution/mixture.py)."""

    enabled: bool = False
    # other models by name, beside every published version of the experiment: Hugging Face
    # checkpoint dirs, `pretrained:<name>`, or adapter dirs (merged into their base, as model.checkpoint)
    checkpoints: dict[str, str] = field(default_factory=dict)
    rule: Rule = "thompson"  # which model samples the next batch
    cost: Cost = "programs"  # earnings per program drawn (the budgets' unit) or per second of sampling
    warmup: int = 2  # batches of every model before the bandit draws
    uniform_control: bool = True  # the same models split evenly: what the bandit's choice adds
    # one model samples at a time: engines that share the same cores (vLLM's CPU build on one
    # machine) slow each other down when two decode at once
    exclusive: bool = True

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"mix.rule={self.rule!r}: choose one of {list(RULES)}")
        if self.cost not in COSTS:
            raise ValueError(f"mix.cost={self.cost!r}: choose one of {list(COSTS)}")
        if self.warmup < 1:
            raise ValueError(f"mix.warmup={self.warmup} must be >= 1")
        taken = sorted(n for n in self.checkpoints if re.fullmatch(r"v\d+", n))
        if taken:
            raise ValueError(f"mix.checkpoints names {taken}: v0, v1, ... are the experiment's versions; rename them")


class OneModelAtATime:
    """A gate: calls to the model in flight enter together, another model's calls wait until they
    drain; between models, first come first served (a waiting call of another model holds back
    later calls of the one in flight, so neither starves)."""

    def __init__(self) -> None:
        self.active: str | None = None  # the model last let in: in flight while running > 0
        self.running = 0
        self.waiting: list[tuple[object, str]] = []
        self.cond = asyncio.Condition()

    def _may_enter(self, ticket: object, name: str) -> bool:
        ahead = self.waiting[: self.waiting.index((ticket, name))]
        return (self.running == 0 or self.active == name) and all(n == name for _, n in ahead)

    async def enter(self, name: str) -> None:
        ticket = object()
        async with self.cond:
            self.waiting.append((ticket, name))
            await self.cond.wait_for(lambda: self._may_enter(ticket, name))
            self.waiting.remove((ticket, name))
            self.active, self.running = name, self.running + 1
            self.cond.notify_all()  # the same model's calls behind this one may enter too

    async def leave(self) -> None:
        async with self.cond:
            self.running -= 1  # at 0 any model may enter, whichever `active` names
            self.cond.notify_all()


@dataclass
class Arm:
    """What one model has cost and earned in this search."""

    name: str
    batches: int = 0
    programs: int = 0  # completions drawn
    seconds: float = 0.0  # wall seconds while any of its sampler calls was in flight (overlaps counted once)
    reward: float = 0.0  # credited by the driver: new programs right on the training pairs


class RateBandit:
    """Chooses which model samples the next batch (module docstring: the rule and why)."""

    def __init__(self, names: Sequence[str], rule: Rule = "thompson", *, cost: Cost = "seconds", warmup: int = 1,
                 seed: int = 0):
        if not names:
            raise ValueError("a model mix needs at least one model")
        if len(set(names)) != len(names):
            raise ValueError(f"model names {list(names)} repeat a name")
        if rule not in RULES:
            raise ValueError(f"bandit rule {rule!r}: choose one of {list(RULES)}")
        if cost not in COSTS:
            raise ValueError(f"bandit cost {cost!r}: choose one of {list(COSTS)}")
        if warmup < 1:
            raise ValueError(f"warmup={warmup} must be >= 1: a model's rate needs some seconds before a draw")
        self.rule, self.cost, self.warmup = rule, cost, warmup
        self.arms = {name: Arm(name) for name in names}
        self.rng = np.random.default_rng(seed)
        self._chosen = {name: 0 for name in names}  # choices made, in flight or done

    def choose(self) -> str:
        fewest = min(self._chosen.values())
        if self.rule == "uniform" or fewest < self.warmup:
            name = next(n for n, k in self._chosen.items() if k == fewest)
        else:
            draws = {n: self.rng.gamma(1.0 + a.reward, 1.0 / max(self.exposure(a), 1e-9)) for n, a in self.arms.items()}
            name = max(draws, key=draws.__getitem__)
        self._chosen[name] += 1
        return name

    def exposure(self, arm: Arm) -> float:
        return arm.seconds if self.cost == "seconds" else float(arm.programs)

    def record(self, name: str, programs: int, seconds: float) -> None:
        arm = self.arms[name]
        arm.batches += 1
        arm.programs += programs
        arm.seconds += seconds

    def credit(self, name: str, reward: float) -> None:
        if reward < 0:
            raise ValueError(f"reward {reward} for {name}: earnings are counts, never negative")
        self.arms[name].reward += reward

    def shares(self) -> dict[str, float]:
        """Each model's share of the programs drawn so far."""
        total = sum(a.programs for a in self.arms.values())
        return {n: (a.programs / total if total else 0.0) for n, a in self.arms.items()}


class ModelMix:
    """A sampler over several models' samplers; each call goes where the bandit says."""

    def __init__(self, samplers: Mapping[str, Generate], rule: Rule = "thompson", *, cost: Cost = "seconds",
                 warmup: int = 1, seed: int = 0, exclusive: bool = False):
        self.samplers = dict(samplers)
        self.bandit = RateBandit(list(self.samplers), rule, cost=cost, warmup=warmup, seed=seed)
        self.gate = OneModelAtATime() if exclusive else None  # MixConfig.exclusive
        self._in_flight = {name: 0 for name in self.samplers}
        self._charged_to: dict[str, float] = {}  # the clock up to which each model has paid

    async def __call__(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        name = self.bandit.choose()
        if self.gate:
            await self.gate.enter(name)
        try:
            # after the gate: a model pays for its sampling, not its wait; and for the wall clock
            # while any call of it is in flight, not each overlapping call's latency over again
            if self._in_flight[name] == 0:
                self._charged_to[name] = time.perf_counter()
            self._in_flight[name] += 1
            try:
                rows = await self.samplers[name](prompts, params)
            finally:
                self._in_flight[name] -= 1
                now = time.perf_counter()
                seconds, self._charged_to[name] = now - self._charged_to[name], now
            self.bandit.record(name, sum(len(r) for r in rows), seconds)
        finally:
            if self.gate:
                await self.gate.leave()
        # the model's name on every program, so credit and the report find it
        return [[replace(c, model_version=name) for c in row] for row in rows]

    def credit(self, earned: Mapping[str, float]) -> None:
        """The driver's on_scored hook: {model name: new programs right on the training pairs}."""
        for name, reward in earned.items():
            if name in self.bandit.arms:
                self.bandit.credit(name, reward)
