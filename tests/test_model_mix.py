"""Several models in one search (evolution/model_mix.py): the bandit's choice rule, what the mix
records, and the vote over the pooled programs of a real search."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from common.config import load_config
from common.sampling import Completion, SamplingParams
from evolution import mixture
from evolution.backends import local_verifier
from evolution.config import SoarConfig
from evolution.driver import SearchConfig, SoarSearch
from evolution.model_mix import MixConfig, ModelMix, OneModelAtATime, RateBandit
from evolution.tasks import load_split
from verifiers.arc import ArcExecutor

SYMMETRIES = ["rot90", "rot180", "rot270", "flip_h", "flip_v", "transpose", "anti_transpose"]
ONE_STEP_TASKS = ["3c9b0459", "6150a2bd", "67a3c6ac", "68b16354", "74dd1130", "9dfd6313"]  # rotations/flips


def play(bandit: RateBandit, earns: dict[str, float], rounds: int, seconds: dict[str, float] | None = None) -> None:
    """`rounds` choices; each chosen model takes its seconds and is paid its earnings."""
    for _ in range(rounds):
        name = bandit.choose()
        bandit.record(name, programs=8, seconds=(seconds or {}).get(name, 1.0))
        bandit.credit(name, earns[name])


def test_a_model_that_never_earns_loses_its_share():
    bandit = RateBandit(["dud", "good"], "thompson", seed=0)
    play(bandit, {"dud": 0, "good": 2}, 200)
    shares = bandit.shares()
    assert shares["dud"] < 0.1 < 0.9 < shares["good"]
    assert bandit.arms["dud"].batches > 1  # tried beyond its warm-up: never starved outright


def test_after_the_warmup_the_draws_decide():
    bandit = RateBandit(["a", "b"], "thompson", warmup=1, seed=0)
    assert bandit.shares() == {"a": 0.0, "b": 0.0}  # nothing drawn yet
    assert [bandit.choose(), bandit.choose()] == ["a", "b"]
    bandit.record("a", programs=8, seconds=1000.0)
    bandit.record("b", programs=8, seconds=1.0)
    bandit.credit("b", 1000)
    assert [bandit.choose() for _ in range(3)] == ["b", "b", "b"]  # a's rate is ~1e-3 of b's


def test_earnings_count_per_unit_of_cost_not_per_batch():
    # the same reward per batch, but "slow" takes four times as long for it: "fast" earns more per second
    bandit = RateBandit(["slow", "fast"], "thompson", seed=1)
    play(bandit, {"slow": 1, "fast": 1}, 300, seconds={"slow": 4.0, "fast": 1.0})
    assert bandit.arms["fast"].batches > 2 * bandit.arms["slow"].batches
    # counted in programs (8 a batch for both), the same earnings split the budget about evenly
    by_programs = RateBandit(["slow", "fast"], "thompson", cost="programs", seed=1)
    play(by_programs, {"slow": 1, "fast": 1}, 300, seconds={"slow": 4.0, "fast": 1.0})
    assert 0.3 < by_programs.shares()["slow"] < 0.7


def test_warmup_tries_every_model_in_order_and_uniform_splits_evenly():
    bandit = RateBandit(["a", "b", "c"], "thompson", warmup=2, seed=0)
    assert [bandit.choose() for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]
    uniform = RateBandit(["a", "b", "c"], "uniform")
    play(uniform, {"a": 5, "b": 0, "c": 0}, 30)  # earnings do not move the control's split
    assert {a.batches for a in uniform.arms.values()} == {10}


@pytest.mark.parametrize("bad, message", [({"names": []}, "at least one"), ({"names": ["a", "a"]}, "repeat"),
                                          ({"rule": "ucb2"}, "choose one of"), ({"cost": "tokens"}, "choose one of"),
                                          ({"warmup": 0}, "warmup")])
def test_bad_bandit_settings_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        RateBandit(**({"names": ["a", "b"]} | bad))
    with pytest.raises(ValueError, match="never negative"):
        RateBandit(["a"]).credit("a", -1)


def test_a_mix_config_refuses_what_cannot_run():
    with pytest.raises(ValueError, match=r"\['v1'\].*experiment's versions"):
        MixConfig(checkpoints={"v1": "models/a", "other": "models/b"})
    with pytest.raises(ValueError, match="mix.rule"):
        MixConfig(rule="ucb")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="mix.warmup"):
        MixConfig(warmup=0)


def test_a_mix_is_off_unless_asked_and_then_one_model_decodes_at_a_time():
    """What docs/soar.md promises: no run pays for a mix it did not ask for; a mix on one machine
    lets one engine decode at a time, after two batches of each model, with its uniform control."""
    assert MixConfig().enabled is False
    assert load_config(None, SoarConfig, ["mix.enabled=true"]).mix == MixConfig(
        enabled=True, rule="thompson", cost="programs", warmup=2, uniform_control=True, exclusive=True)


def test_mix_names_every_program_by_its_model_and_records_its_cost():
    async def fixed(prompts, params):
        return [[Completion("x", "stop", 1, 1, "engine-version") for _ in range(params.n)] for _ in prompts]

    mix = ModelMix({"m0": fixed, "m1": fixed}, "uniform")
    started = time.perf_counter()
    rows = [asyncio.run(mix(["p", "q"], SamplingParams(n=3))) for _ in range(4)]
    wall = time.perf_counter() - started
    assert 0 < mix.bandit.arms["m0"].seconds + mix.bandit.arms["m1"].seconds <= wall  # the calls' own time
    assert [{c.model_version for r in row for c in r} for row in rows] == [{"m0"}, {"m1"}, {"m0"}, {"m1"}]
    mix.credit({"m1": 2, "other": 5})  # a model outside the mix (an earlier version's program): ignored
    arms = mix.bandit.arms
    assert arms["m0"].programs == arms["m1"].programs == 12 and arms["m1"].reward == 2 and arms["m0"].reward == 0
    assert arms["m0"].batches == arms["m1"].batches == 2 and "other" not in arms
    assert mix.bandit.shares() == {"m0": 0.5, "m1": 0.5}


def test_search_over_a_mix_pays_the_model_that_writes_right_programs_and_votes_over_the_pool(store, experiment_name):
    arc = load_split("arc1-train")
    tasks = {t: arc[t] for t in ONE_STEP_TASKS}

    async def dud(prompts, params):  # runs on every grid, right on none of these tasks' pairs
        return [[Completion("    grid = grid\n    return grid\n", "stop", 0, 0) for _ in range(params.n)] for _ in prompts]

    drawn = iter(range(10**6))

    async def geometric(prompts, params):  # each of these tasks is one of the 7 ops: about 1 in 7 is right
        def program() -> str:
            k = next(drawn)  # distinct no-op tails: every program is new
            return f"    grid = {SYMMETRIES[k % 7]}(grid)\n" + "    grid = grid\n" * (k // 7) + "    return grid\n"
        return [[Completion(program(), "stop", 0, 0) for _ in range(params.n)] for _ in prompts]

    # paid per program drawn: in-process samplers take microseconds, and which is faster is noise
    mix = ModelMix({"dud": dud, "geometric": geometric}, "thompson", cost="programs", seed=0)
    cfg = SearchConfig(samples_per_task=64, refinements_per_task=0, batch=8, stop_after_correct=64,
                       prompt_style="compact", one_shot=False, tasks_in_flight=3, seed=0)
    with ArcExecutor(workers=1, allowed_modules=("evolution.dsl",)) as ex:
        search = SoarSearch(cfg, sampler=mix, verifier=local_verifier(ex), archive=store.archive(experiment_name),
                            model_version="mix", on_scored=mix.credit)
        outcomes = asyncio.run(search.run(tasks))
    arms = mix.bandit.arms
    assert arms["geometric"].reward > 0 and arms["dud"].reward == 0
    assert arms["dud"].programs < arms["geometric"].programs / 3  # it lost its share of the budget
    solved = [t for t, o in outcomes.items() if o.attempts and all(
        any(np.array_equal(ex.output, g) for g in tries) for ex, tries in zip(tasks[t].test, o.attempts, strict=True))]
    assert len(solved) == len(tasks)  # the vote found each task's right op in the pool
    pooled = [t for t in solved if {c.model_version for c in outcomes[t].candidates} == {"dud", "geometric"}]
    assert pooled  # solved with both models' programs in the vote
    for t in solved:  # the right programs are the geometric model's
        assert {c.model_version for c in outcomes[t].candidates if c.fully_correct} == {"geometric"}


async def settle() -> None:
    """Let every ready task run until it blocks (a bounded number of event-loop turns)."""
    for _ in range(50):
        await asyncio.sleep(0)


def test_the_gate_lets_one_model_in_at_a_time_first_come_first_served():
    async def scenario() -> list[str]:
        gate, entered = OneModelAtATime(), []

        async def call(name: str) -> None:
            await gate.enter(name)
            entered.append(name)

        first = [asyncio.create_task(call(n)) for n in ("a", "a")]
        await settle()
        assert entered == ["a", "a"]  # one model's calls go in together
        later = [asyncio.create_task(call(n)) for n in ("b", "a", "b")]
        await settle()
        assert entered == ["a", "a"]  # b waits for a; the later a waits behind b
        await gate.leave()
        await settle()
        assert entered == ["a", "a"]  # one a still in flight
        await gate.leave()
        await settle()
        assert entered == ["a", "a", "b"]  # the second b is behind the a that came before it
        await gate.leave()
        await settle()
        assert entered == ["a", "a", "b", "a"]
        await gate.leave()
        await asyncio.gather(*first, *later)
        return entered

    assert asyncio.run(scenario()) == ["a", "a", "b", "a", "b"]


def test_an_exclusive_mix_never_runs_two_models_at_once():
    async def scenario() -> tuple[int, list[str]]:
        running = {"a": 0, "b": 0}
        overlap = 0
        order: list[str] = []

        def model(name: str):
            async def sample(prompts, params):
                nonlocal overlap
                running[name] += 1
                order.append(name)
                overlap += bool(running["a"] and running["b"])
                await settle()  # other calls get their turn while this one is in flight
                running[name] -= 1
                return [[Completion("x", "stop", 1, 1)] for _ in prompts]
            return sample

        mix = ModelMix({"a": model("a"), "b": model("b")}, "uniform", exclusive=True)
        await asyncio.gather(*(mix(["p"], SamplingParams(n=1)) for _ in range(12)))
        return overlap, order

    overlap, order = asyncio.run(scenario())
    assert overlap == 0 and sorted(order) == ["a"] * 6 + ["b"] * 6
    open_mix = ModelMix({"a": None, "b": None}, "uniform")  # not exclusive: no gate at all
    assert open_mix.gate is None


def test_each_measured_search_has_its_own_mix_and_the_shares_are_pooled_per_split(store, experiment_name,
                                                                                  monkeypatch):
    """measure_mixes: the bandit and the uniform split on every seed and split, a fresh mix per
    search (what one search's bandit learnt never carries into the next), shares per split."""
    arc = load_split("arc1-train")
    tasks, heldout = {t: arc[t] for t in ONE_STEP_TASKS[:2]}, {t: arc[t] for t in ONE_STEP_TASKS[4:5]}
    drawn = iter(range(10**6))

    async def dud(prompts, params):
        return [[Completion("    grid = grid\n    return grid\n", "stop", 0, 0) for _ in range(params.n)] for _ in prompts]

    async def geometric(prompts, params):
        def program() -> str:
            k = next(drawn)
            return f"    grid = {SYMMETRIES[k % 7]}(grid)\n" + "    grid = grid\n" * (k // 7) + "    return grid\n"
        return [[Completion(program(), "stop", 0, 0) for _ in range(params.n)] for _ in prompts]

    cfg = load_config("configs/soar-demo.yaml", SoarConfig, [
        f"experiment={experiment_name}", "search.samples_per_task=32", "search.refinements_per_task=0",
        "search.batch=4", "search.stop_after_correct=32", "search.prompt_style=compact", "search.one_shot=false",
        "controls.seeds=[0,1]", "mix.enabled=true", "mix.warmup=1"])
    made: list[ModelMix] = []
    real_fresh = mixture._fresh_mix

    def fresh(*args):
        made.append(real_fresh(*args))
        return made[-1]

    monkeypatch.setattr(mixture, "_fresh_mix", fresh)  # to count the mixes made; each still a real one
    with ArcExecutor(workers=1, allowed_modules=("evolution.dsl",)) as ex:
        out = asyncio.run(mixture.measure_mixes(cfg, store, tasks, heldout, {"dud": dud, "geometric": geometric},
                                                local_verifier(ex)))
    assert set(out) == {"model_mix_thompson", "model_mix_uniform"}
    assert len(made) == 2 * 2 * 2 and len({id(m) for m in made}) == 8  # rules x seeds x splits, each new
    bandit, uniform = out["model_mix_thompson"], out["model_mix_uniform"]
    assert bandit["models"] == ["dud", "geometric"] and len(bandit["heldout_solved_seeds"]) == 2
    for split, n_tasks in (("demo", 2), ("heldout", 1)):
        b, u = bandit["shares"][split], uniform["shares"][split]
        assert b["dud"]["programs"] + b["geometric"]["programs"] == 2 * 32 * n_tasks  # both seeds' budgets
        assert u["dud"]["budget_share"] == u["geometric"]["budget_share"] == 0.5
        assert b["geometric"]["budget_share"] > 0.5 and b["geometric"]["right_share"] == 1.0
        assert b["dud"]["right_share"] == 0.0
    assert store.archive(f"{experiment_name}.mix-uniform.heldout.s1").get_task(ONE_STEP_TASKS[4])
    with pytest.raises(ValueError, match="two models"):
        asyncio.run(mixture.measure_mixes(cfg, store, tasks, heldout, {"dud": dud}, None))


# --- evolution/mixture.py's plain parts: which rules are measured, the shares pooled ---------

def test_mix_rules_add_the_uniform_control_once():
    def rules(**mix):
        return mixture.mix_rules(load_config(None, SoarConfig, [f"mix.{k}={v}" for k, v in mix.items()]))

    assert rules(rule="thompson") == ["thompson", "uniform"]
    assert rules(rule="thompson", uniform_control="false") == ["thompson"]
    assert rules(rule="uniform") == ["uniform"]  # the control is the rule itself: measured once
    assert mixture.MIX_PREFIX + "thompson" == "model_mix_thompson"  # the baselines' key the report reads


def _mix(**arms: tuple[int, float, float]):
    """A stand-in mix whose bandit holds these arms: name -> (programs, right, seconds)."""
    from types import SimpleNamespace

    from evolution.model_mix import Arm

    return SimpleNamespace(bandit=SimpleNamespace(arms={
        n: Arm(n, programs=p, reward=r, seconds=s) for n, (p, r, s) in arms.items()}))


def test_pooled_shares_add_each_splits_searches_and_divide_by_the_splits_totals():
    mixes = {("demo", 0): _mix(a=(30, 3.0, 1.004), b=(10, 1.0, 2.0)),
             ("demo", 1): _mix(a=(10, 0.0, 1.0), b=(30, 4.0, 0.5)),
             ("heldout", 0): _mix(a=(0, 0.0, 0.0), b=(6, 0.0, 0.25))}
    assert mixture.pooled_shares(mixes) == {
        "demo": {"a": {"programs": 40, "right": 3.0, "seconds": 2.0, "budget_share": 0.5, "right_share": 0.375},
                 "b": {"programs": 40, "right": 5.0, "seconds": 2.5, "budget_share": 0.5, "right_share": 0.625}},
        # nothing right on held-out tasks: right shares are 0, not a division by zero
        "heldout": {"a": {"programs": 0, "right": 0.0, "seconds": 0.0, "budget_share": 0.0, "right_share": 0.0},
                    "b": {"programs": 6, "right": 0.0, "seconds": 0.25, "budget_share": 1.0, "right_share": 0.0}}}
    assert mixture.pooled_shares(mixes)["demo"]["a"]["programs"] == 40
    assert mixes[("demo", 0)].bandit.arms["a"].programs == 30  # the searches' own arms are not added into


def test_pooled_shares_round_to_four_digits_and_leave_out_splits_that_drew_nothing():
    shares = mixture.pooled_shares({("demo", 0): _mix(a=(1, 1.0, 0.123456), b=(2, 2.0, 0.0)),
                                    ("heldout", 0): _mix(a=(0, 0.0, 0.0), b=(0, 0.0, 0.0))})  # resumed: nothing drawn
    assert set(shares) == {"demo"}
    assert shares["demo"]["a"] == {"programs": 1, "right": 1.0, "seconds": 0.12, "budget_share": 0.3333,
                                   "right_share": 0.3333}
    assert shares["demo"]["b"]["budget_share"] == 0.6667 and mixture.pooled_shares({}) == {}
    # a split that drew nothing before one that did (in sorted order) leaves the later one in
    later = mixture.pooled_shares({("demo", 0): _mix(a=(0, 0.0, 0.0), b=(0, 0.0, 0.0)),
                                   ("heldout", 0): _mix(a=(3, 0.0, 0.5), b=(1, 1.0, 0.5))})
    assert set(later) == {"heldout"} and later["heldout"]["a"]["budget_share"] == 0.75


def test_a_models_seconds_are_the_wall_clock_it_held_not_the_sum_of_its_overlapping_calls(monkeypatch):
    """mix.cost=seconds: two calls of one model in flight together for 10 s cost it 10 s, not 20, and
    its idle time costs nothing. Summing each call's latency charged a model the bandit picks often
    (more of its calls in flight at once) more than the time it sampled, so the bandit held it back."""
    from evolution import model_mix

    now = [0.0]
    monkeypatch.setattr(model_mix.time, "perf_counter", lambda: now[0])
    release: dict[str, asyncio.Event] = {}

    async def model(prompts, params):
        release[prompts[0]] = asyncio.Event()
        await release[prompts[0]].wait()
        return [[Completion("x", "stop", 1, 1)] for _ in prompts]

    async def scenario() -> list[float]:
        mix = ModelMix({"a": model, "b": model}, "thompson", cost="seconds", warmup=1)
        mix.bandit.choose = lambda: "a"  # both calls to one model
        first = [asyncio.create_task(mix([p], SamplingParams(n=1))) for p in ("p1", "p2")]
        await settle()  # both in flight from t = 0
        now[0] = 4.0
        release["p1"].set()
        await first[0]
        charged = [mix.bandit.arms["a"].seconds]  # p2 still runs: 4 s so far, charged as they pass
        now[0] = 10.0
        release["p2"].set()
        await first[1]
        charged.append(mix.bandit.arms["a"].seconds)
        now[0] = 15.0  # 5 s idle
        third = asyncio.create_task(mix(["p3"], SamplingParams(n=1)))
        await settle()
        now[0] = 18.0
        release["p3"].set()
        await third
        charged.append(mix.bandit.arms["a"].seconds)
        return charged

    assert asyncio.run(scenario()) == [4.0, 10.0, 13.0]
