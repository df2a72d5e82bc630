"""The scaling job: the resumable sampling phases on a real Redis, its report and headline, and the
job end to end on a real (tiny, untrained) model. The served search's live selection on free-text
verdicts is tests/test_search_free_text.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from pathlib import Path

import pytest
from _arith_oracle import ArithOracle, Recorder

from ray_jobs.scaling import ScalingConfig, headline, run
from scaling.arith_problems import make_problems
from scaling.sampling import SamplingPlan, ScalingSampler
from search.scored_pool import ScoredPool


def plan(**kw) -> SamplingPlan:
    base = dict(k_inf=4, k_verif=3, k_tie=4, compare_classes=3, temperature=1.0, verify_temperature=1.0,
                max_tokens=32, verify_max_tokens=32, style="compact", batch_questions=2)
    return SamplingPlan(**(base | kw))


def test_sampler_stores_everything_and_resumes_without_resampling(store, experiment_name):
    questions = [{"id": f"q{i}", "question": r["question"], "answer": r["answer"]}
                 for i, r in enumerate(make_problems(3, seed=5))]
    wrong = [" 1+1=2. Answer: 2", " 1+1=3. Answer: 3"]
    oracle = ArithOracle(wrong)
    rec = Recorder(oracle.generate)
    records = asyncio.run(ScalingSampler(store.client, experiment_name, rec.generate, plan(seed=3)).run(questions))
    first = oracle.calls
    assert first == 3 * 4 + 3 * 4 * 3 + 3 * 4  # candidates, verdicts, 4 comparisons per class pair
    keys = [(p, seed) for p, seed, _ in rec.requests]
    assert len(keys) == len(set(keys))  # repeated candidates and pairs went out as one request each
    pool = ScoredPool.from_records(records)
    assert pool.shape == (3, 4, 3) and not pool.correct.any()
    assert (pool.verdicts == 0).all()  # the oracle rejects every wrong candidate
    again = ArithOracle(wrong)
    records2 = asyncio.run(ScalingSampler(store.client, experiment_name, again.generate, plan(seed=3)).run(questions))
    assert again.calls == 0 and records2 == records
    with pytest.raises(ValueError, match=r"different \['k_inf'\]"):
        asyncio.run(ScalingSampler(store.client, experiment_name, again.generate, plan(k_inf=8, seed=3)).run(questions))


def test_scaling_job_end_to_end_on_a_real_model(store, experiment_name, tmp_path, untrained_model):
    cfg = ScalingConfig(
        experiment=experiment_name, runs_dir=str(tmp_path), mode="both", questions=4, model=untrained_model,
        in_process=True, prompt_style="compact", k_inf=4, k_verif=2, k_tie=2, temperature=1.0, max_tokens=6,
        verify_max_tokens=6, benchmark_triples=3, batch_questions=2,
    )
    cfg.curves.seeds, cfg.curves.bootstrap = 3, 50
    summary = run(cfg)
    out = Path(tmp_path) / experiment_name
    for name in ("config.yaml", "pool.npz", "curves.csv", "heatmap.csv", "summary.json", "report.md",
                 "heatmap.png", "curves.png"):
        assert (out / name).exists(), name
    saved = json.loads((out / "summary.json").read_text())
    assert set(saved["curves"]) == {"pass", "consistency", "best_of_n", "weighted_best_of_n", "verification",
                                    "verification_tie"}
    assert {(d["strategy"], d["k"]) for d in saved["differences"]} >= {("verification", 4), ("verification_tie", 4),
                                                                          ("weighted_best_of_n", 4)}
    assert set(saved["unparsable"]) == {"verdicts", "comparisons"}
    own = saved["own_verification"]
    assert own["correct_candidates"] + own["wrong_candidates"] == 16
    report = (out / "report.md").read_text()
    # it opens with the comparison against the control (majority vote), then the curves
    assert report.index("## Does verification beat majority voting? Paired differences") < report.index(
        "## All questions")
    # the paired difference at every k (1, 2, 4) and the ambiguous curve at every k (implicit scaling)
    every_k = report.split("### At every k")[1].split("##")[0]
    assert [int(line.split(" | ")[1]) for line in every_k.splitlines() if line.startswith("| Verification@k -")] == [1, 2, 4]
    assert [p["k"] for p in saved["curves"]["verification"]] == [1, 2, 4]
    assert saved["heatmap"]["k_verif_values"] == [1, 2]
    bench = summary["verification_benchmark"]
    assert bench["triples"] == 3 and 0 <= bench["unparsable_rate"] <= 1
    assert ScoredPool.load(out / "pool.npz").shape == (4, 4, 2)
    assert store.experiments.get(experiment_name).status == "done"


def test_report_shows_the_implicit_scaling_curve_at_every_k():
    """Accuracy on ambiguous draws at every k, for verification and its control (a pool that has some)."""
    from scaling.curves import CurvesConfig, compute_curves
    from scaling.report import report
    from search.scored_pool import synthetic_pool

    pool = synthetic_pool(questions=30, candidates=8, verdicts=2, seed=1)
    summary = compute_curves(pool, CurvesConfig(seeds=2, bootstrap=20)).summary()
    text = report(ScalingConfig(experiment="synthetic"), summary | {"own_verification": pool.own_verification()})
    implicit = text.split("## Implicit scaling: accuracy on ambiguous draws at every k")[1].split("##")[0]
    rows = [line for line in implicit.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split(" | ")[0][2:]) for r in rows] == [1, 2, 4, 8]
    assert "Verification@k | Consistency@k" in implicit
    ver = [float(r.split(" | ")[1]) for r in rows]
    assert ver == [round(x["accuracy"], 3) for x in summary["curves_ambiguous"]["verification"]]


def test_a_rerun_with_another_model_refuses_instead_of_mixing_samples(store, experiment_name, tmp_path,
                                                                      untrained_model):
    """The stored plan names the model: even with --allow-config-change (for, say, new curve
    settings), samples of two models never end up in one pool; the run ends "failed"."""
    import shutil

    from jobs.runner import execute
    from ray_jobs.scaling import JOB
    from store import keys

    cfg = ScalingConfig(experiment=experiment_name, runs_dir=str(tmp_path), mode="curves", questions=2,
                        model=untrained_model, in_process=True, prompt_style="compact", k_inf=2, k_verif=1, k_tie=0,
                        max_tokens=4, verify_max_tokens=4, batch_questions=2)
    cfg.curves.seeds, cfg.curves.bootstrap = 2, 10
    execute(JOB, cfg, store=store)
    stored = store.client.hlen(keys.scaling(experiment_name, "candidates"))
    other = tmp_path / "other-model"
    shutil.copytree(untrained_model, other)
    cfg.model = str(other)
    with pytest.raises(ValueError, match=r"different \['model'\]"):
        execute(JOB, cfg, store=store, allow_config_change=True)
    record = store.experiments.get(experiment_name)
    assert record.status == "failed" and "model" in record.error
    assert store.client.hlen(keys.scaling(experiment_name, "candidates")) == stored


def test_a_scaling_job_that_fails_reads_failed(store, experiment_name, tmp_path):
    from jobs.runner import execute
    from ray_jobs.scaling import JOB

    broken = tmp_path / "not-a-checkpoint"  # exists (the pre-start checks pass), but holds no model
    broken.mkdir()
    cfg = ScalingConfig(experiment=experiment_name, runs_dir=str(tmp_path), mode="curves", questions=2,
                        model=str(broken), in_process=True, prompt_style="compact")
    with pytest.raises(Exception):  # noqa: B017 - whatever the engine raises for a dir without a model
        execute(JOB, cfg, store=store)
    record = store.experiments.get(experiment_name)
    assert record.status == "failed" and "tokenizer" in record.error  # the error, recorded


def test_own_verification_is_the_verdicts_on_the_pools_own_candidates():
    import numpy as np
    correct = np.array([[True, False, False]])
    verdicts = np.array([[[1, 1, 0, -1], [0, 0, 1, -1], [0, 0, 0, 0]]], np.int8)
    pool = ScoredPool(["q"], correct, np.array([[0, 1, 2]], np.int32), np.array([[True, False, False]]),
                      verdicts, np.zeros((1, 3, 3, 3), np.int32), np.zeros((1, 3)))
    own = pool.own_verification()
    assert {k: own[k] for k in ("on_correct", "on_wrong", "correct_candidates", "wrong_candidates")} == {
        "on_correct": 0.5, "on_wrong": (0.5 + 1.0) / 2, "correct_candidates": 1, "wrong_candidates": 2}
    # mean verdicts 0.5 (right), 0.25, 0 (wrong); the answers are three singletons (1 vote each)
    assert own["within_question_auc"] == 1.0 and own["answer_frequency_auc"] == 0.5
    assert own["mixed_questions"] == 1


def test_within_question_auc_ignores_what_only_tells_questions_apart():
    """A verifier that says 1 on every candidate of an easy question and 0 on every candidate of a
    hard one ranks the pooled candidates well, and cannot select within a question: chance there.
    Majority voting's signal (votes of the candidate's answer) is measured the same way."""
    import numpy as np
    # easy question: 3 of 4 right (one answer), 1 wrong; hard: 1 of 4 right, 3 wrong sharing one answer
    correct = np.array([[True, True, True, False], [True, False, False, False]])
    answers = np.array([[0, 0, 0, 1], [0, 1, 1, 1]], np.int32)
    verdicts = np.repeat(np.array([[1], [0]], np.int8)[:, :, None], 4, 1).repeat(2, 2)  # [2, 4, 2]
    pool = ScoredPool(["easy", "hard"], correct, answers, np.array([[True, False], [True, False]]),
                      verdicts, np.zeros((2, 2, 2, 3), np.int32), np.zeros((2, 4)))
    own = pool.own_verification()
    assert own["pooled_auc"] == 0.75  # 9 of 16 pairs won, 6 tied
    assert own["within_question_auc"] == 0.5
    # votes: the easy question's right answer leads (3 vs 1), the hard one's wrong answer (1 vs 3)
    assert own["answer_frequency_auc"] == (1.0 + 0.0) / 2
    assert own["mixed_questions"] == 2


def test_the_headline_sets_the_verifier_auc_beside_the_votes():
    summary = {"pool": {"k_inf": 8}, "wall_s": 3.0,
               "differences": [{"strategy": "verification", "k": 8, "difference": -0.092, "ci_low": -0.223,
                                "ci_high": 0.038}, {"strategy": "verification", "k": 4, "difference": 0.5,
                                                    "ci_low": 0.4, "ci_high": 0.6}],
               "own_verification": {"within_question_auc": 0.554, "within_question_auc_probability": 0.664,
                                    "answer_frequency_auc": 0.807, "mixed_questions": 42}}
    line = headline(summary)
    assert "verification - consistency at k=8: -0.092 [-0.223, +0.038]" in line and "+0.500" not in line
    assert "within-question AUC: verifier 0.664, answer votes 0.807 (42 questions)" in line
    del summary["own_verification"]["within_question_auc_probability"]  # sampled verdicts: their mean
    assert "verifier 0.554" in headline(summary)


def test_the_verifier_pool_takes_its_own_engine_kwargs_over_the_samplers(monkeypatch):
    """verifier_engine_kwargs (e.g. dtype float32 for finer verdict probabilities) reach the verifier's
    engine only; the candidates' engine keeps sampler.engine_kwargs."""
    import search.engines
    from scaling.experiment import make_generate
    from search.pool import PoolConfig

    built = []

    class Built:  # what the engine was built with, and the checkpoint it loaded (as a pool's actor does)
        def __init__(self, name, **kw):
            built.append([name, kw])

        def load(self, checkpoint, version=None):
            built[-1].append(checkpoint)

    monkeypatch.setattr(search.engines, "make_engine", Built)
    cfg = ScalingConfig(in_process=True, verifier="v", verifier_engine_kwargs={"dtype": "float32"},
                        sampler=PoolConfig(engine="vllm", engine_kwargs={"dtype": "bfloat16", "max_model_len": 2048}))
    make_generate(cfg, "model")
    make_generate(cfg, "verifier", cfg.verifier_pool())
    assert built == [["vllm", {"dtype": "bfloat16", "max_model_len": 2048}, "model"],
                     ["vllm", {"dtype": "float32", "max_model_len": 2048}, "verifier"]]
    with pytest.raises(ValueError, match="set verifier too"):
        ScalingConfig(verifier_engine_kwargs={"dtype": "float32"})
    with pytest.raises(ValueError, match="verifier_engine_kwargs: .*holds a secret"):
        ScalingConfig(verifier="v", verifier_engine_kwargs={"api_key": "sk-live-0123456789abcdef"},
                      sampler=PoolConfig(engine="openai", engine_kwargs={"base_url": "http://localhost:1/v1"}))
    with pytest.raises(ValueError, match=r"verifier_engine_kwargs: .*\['gpu_layers'\] are not arguments"):
        ScalingConfig(verifier="v", verifier_engine_kwargs={"gpu_layers": 3})


def test_a_verifier_on_another_engine_setting_is_another_plan(store, experiment_name):
    """A float32 and a bf16 verifier give other verdict probabilities: a rerun of one experiment that
    changes verifier_engine_kwargs is refused rather than mixing their verdicts in one pool; a plan
    stored before the field existed reads as {}."""
    from scaling.sampling import ScalingSampler

    cfg = ScalingConfig(experiment=experiment_name, verifier="v", verifier_engine_kwargs={"dtype": "float32"})
    ScalingSampler(store.client, experiment_name, None, cfg.plan(verifier="v")).check_plan()
    ScalingSampler(store.client, experiment_name, None, cfg.plan(verifier="v")).check_plan()  # same: resumes
    cfg.verifier_engine_kwargs = {"dtype": "bfloat16"}
    with pytest.raises(ValueError, match=r"different \['verifier_engine_kwargs'\]"):
        ScalingSampler(store.client, experiment_name, None, cfg.plan(verifier="v")).check_plan()
    older = f"{experiment_name}-older"
    key = ScalingSampler(store.client, older, None, cfg.plan()).key("plan")
    stored = {k: v for k, v in dataclasses.asdict(ScalingConfig().plan()).items()
              if k not in ("verifier_engine_kwargs", "batch_questions")}
    store.client.set(key, json.dumps(stored))
    ScalingSampler(store.client, older, None, ScalingConfig().plan()).check_plan()


def test_sampling_on_the_transformers_engine_reports_progress_while_a_batch_runs(store, experiment_name, tmp_path,
                                                                                monkeypatch, caplog):
    """Issue #47: a stored batch of questions on the transformers engine can take minutes on a CPU, and
    progress came only when a batch was stored. Each phase's line now comes at the interval whatever
    the engine (common.progress's heartbeat): the first batch here waits for one saying 0/4."""
    import logging
    import threading

    from common import progress
    from common.sampling import threaded_generate
    from scaling.experiment import ScalingExperiment
    from search.engines import make_engine

    monkeypatch.setenv(progress.ENV_MODE, "log")
    monkeypatch.setenv(progress.ENV_INTERVAL, "0.05")
    cfg = ScalingConfig(experiment=experiment_name, runs_dir=str(tmp_path), questions=4, model="models/scaling-arith-seed",
                        in_process=True, prompt_style="compact", k_inf=2, k_verif=1, k_tie=0, temperature=1.0,
                        max_tokens=8, verify_max_tokens=8, batch_questions=2)
    heartbeat = threading.Event()

    class Heartbeat(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno == logging.INFO and "candidates: 0/4" in record.getMessage():
                heartbeat.set()

    engine = threaded_generate(make_engine("transformers", checkpoint=cfg.model))

    calls = []

    async def generate(prompts, params):
        if not calls:  # the first batch "runs" until the phase has said so (old code: never, 30 s in vain)
            await asyncio.to_thread(heartbeat.wait, 30)
        calls.append(len(prompts))
        return await engine(prompts, params)

    handler = Heartbeat()
    logging.getLogger("ratchet.progress").addHandler(handler)
    try:
        with caplog.at_level(logging.DEBUG, logger="ratchet.progress"):
            experiment = ScalingExperiment(cfg, store, tmp_path, generate, model=cfg.model)
            experiment.sample(experiment.questions())
    finally:
        logging.getLogger("ratchet.progress").removeHandler(handler)
    assert heartbeat.is_set(), "no progress line while the first batch of candidates ran"
    for phase in ("candidates", "verdicts"):
        lines = [r.getMessage() for r in caplog.records if f"] {phase}: " in r.getMessage()]
        counts = [int(re.search(rf"{phase}: (\d+)/4", line).group(1)) for line in lines]
        assert counts == sorted(counts) and counts[0] == 0 and counts[-1] == 4, lines
    infos = [r for r in caplog.records if r.levelno == logging.INFO and "candidates: 0/4" in r.getMessage()]
    assert infos, "the heartbeat's line is INFO (the console shows it), not only the phase's first DEBUG line"
