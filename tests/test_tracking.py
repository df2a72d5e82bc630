"""Experiment tracking with the offline backend (TensorBoard event files): the search and judge
figures of a job and TRL's training logs, from the same `tracking.report_to`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from common.config import ConfigError, build_config
from common.tracking import Tracker, TrackingConfig, training_args
from thinking.loop import TpoLoop
from thinking.state import TpoState

events_module = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                                    reason="the tracking extra: pip install -e '.[tracking]' (make setup does)")

SECRET = "sk-tracking-secret-4711"
SEED = str(Path(__file__).parents[1] / "models" / "tpo-arith-seed")  # the embedded tiny model


def scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    events = events_module.EventAccumulator(str(path))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_search_figures_become_tensorboard_scalars_per_iteration(tmp_path):
    run_dir = tmp_path / "exp"
    config = {"experiment": "exp", "engine_kwargs": {"api_key": SECRET}}
    tracker = Tracker.start(TrackingConfig(report_to=["tensorboard"]), run_dir=run_dir, experiment="exp",
                            config=config)
    for it, solved in enumerate([1.0, 2.5]):
        sent = tracker.log({"iteration": it, "solved": solved, "model_version": f"v{it}", "curve": [1, 2],
                            "timing": {"search_s": 3.0 + it}, "ok": True}, step=it, prefix="search")
    tracker.close()
    assert sent == {"search/iteration": 1.0, "search/solved": 2.5, "search/timing/search_s": 4.0}
    found = scalars(run_dir / "tracking" / "search")
    assert found["search/solved"] == [(0, 1.0), (1, 2.5)] and found["search/timing/search_s"][1] == (1, 4.0)
    files = b"".join(p.read_bytes() for p in (run_dir / "tracking").rglob("*") if p.is_file())
    assert SECRET.encode() not in files  # the config shown in TensorBoard is redacted


def test_nothing_is_tracked_unless_asked(tmp_path):
    with Tracker.start(TrackingConfig(), run_dir=tmp_path / "exp", experiment="exp") as tracker:
        tracker.log({"solved": 1.0}, step=0)
    assert not (tmp_path / "exp" / "tracking").exists()
    assert training_args(TrackingConfig(), tmp_path, "it1") == {"report_to": "none"}


def test_an_unknown_tracker_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"report_to.*tensorboard"):
        build_config(TrackingConfig, {"report_to": ["tensorbored"]}, "tpo.yaml")


def test_trl_training_reports_its_loss_to_the_same_tensorboard(tmp_path):
    """report_to reaches TRL; the event files outlive the trainer's scratch dir."""
    from training.corpora import digit_map
    from training.sft import SFTJobConfig, train_sft

    run_dir = tmp_path / "exp"
    cfg = SFTJobConfig(model_path=SEED, output_dir=str(tmp_path / "ckpt"), max_steps=4, logging_steps=1,
                       per_device_train_batch_size=8, disable_tqdm=True, quiet=True, seed=0,
                       **training_args(TrackingConfig(report_to=["tensorboard"]), run_dir, "it1"))
    train_sft(cfg, digit_map(n=32, seed=0, permutation="0123456789"))
    found = scalars(run_dir / "tracking" / "train-it1")
    assert [step for step, _ in found["train/loss"]] == [1, 2, 3, 4]


def test_tpo_loop_sends_each_iterations_judged_figures_per_arm(store, experiment_name, tmp_path):
    from test_tpo import RecordingJudge, StubSampler, tiny_cfg

    async def train(rows, start, arm, iteration):
        return f"/ckpt/{arm}-{iteration + 1}", {"loss": 0.0}, None

    cfg = tiny_cfg(experiment_name)
    with Tracker.start(TrackingConfig(report_to=["tensorboard"]), run_dir=tmp_path, experiment=cfg.experiment
                       ) as tracker:
        summary = asyncio.run(TpoLoop(cfg, state=TpoState(store.client, cfg.experiment),
                                      models=store.models(cfg.experiment), sampler=StubSampler(),
                                      judge=RecordingJudge(), train=train, seed_checkpoint="/ckpt/seed",
                                      progress=False, tracker=tracker).run())
    found = scalars(tmp_path / "tracking" / "search")
    wins = [e["win_rate_vs_seed"] for e in summary["iterations"]]
    assert found["thought/win_rate_vs_seed"] == [(0, pytest.approx(wins[0])), (1, pytest.approx(wins[1]))]
    assert [s for s, _ in found["direct/score"]] == [0, 1] and "thought/pair_counts/pairs" in found
