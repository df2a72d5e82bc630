"""The TPO loop after a DPO round, on a real local Ray with the shipped tiny seed: the samplers
take the trained weights as sampler.weight_sync says, and sample from them.

The loop's pool is compared with a fresh pool started on the published checkpoint: the same
greedy tokens and log-probabilities, which differ from the seed's. A loop that switched the
version tag but kept the old weights, or that loaded the seed again, fails it; one that took
the checkpoint when memory was asked for fails on the recorded path."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from common.config import load_config
from common.sampling import SamplingParams
from search.pool import SamplerPool
from thinking.config import TpoConfig
from thinking.judging import make_judge, resolve
from thinking.learn import dpo_trainer
from thinking.loop import TpoLoop
from thinking.state import TpoState

PROBE = SamplingParams(temperature=0, max_tokens=12, logprobs=0)
PROMPTS = ["Q: 3+4\nA:", "Q: 9-5+2\nA:", "Q: 8+7-6\nA:"]


def probe(pool: SamplerPool) -> list[tuple[str, list[float]]]:
    rows = pool.generate_sync(PROMPTS, PROBE)
    return [(r[0].text, [t["logprob"] for t in r[0].logprobs]) for r in rows]


# disk is also covered by tests/test_weight_sync.py at pool level; the loop's run costs ~15 s more
@pytest.mark.parametrize("mode,path", [("auto", "memory"), pytest.param("disk", "disk", marks=pytest.mark.slow)])
def test_the_loop_samples_from_the_trained_weights_by_the_path_asked(ray_local, store, experiment_name, tmp_path,
                                                                      mode, path):
    cfg = load_config("configs/tpo-demo.yaml", TpoConfig, [
        f"experiment={experiment_name}", "iterations=1", "baseline=false", "sample.instructions=16", "sample.k=4",
        "sample.batch_instructions=16", "measure.heldout=4", "measure.seeds=[0]",
        "train.max_steps=2", "train.batch_size=4", "sampler.num_cpus_per_actor=0.5", f"sampler.weight_sync={mode}"])
    seed, models = resolve(cfg.model.checkpoint), store.models(experiment_name)
    pool = SamplerPool(replace(cfg.sampler, experiment=experiment_name), checkpoint=seed)
    fresh = None
    try:
        asyncio.run(pool.ready())
        before = probe(pool)
        loop = TpoLoop(cfg, state=TpoState(store.client, experiment_name), models=models, sampler=pool,
                       judge=make_judge(cfg)[0], train=dpo_trainer(cfg, tmp_path, models, tmp_path, seed),
                       seed_checkpoint=seed, progress=False)
        summary = asyncio.run(loop.run())
        trained = models.list()[-1]
        entry = summary["iterations"][1]
        assert (entry["model_version"], entry["weight_sync"]) == (trained.version, path) and entry["switch_s"] >= 0
        assert "weight_sync_note" not in entry and loop.weights == {}  # memory as planned; no ref kept
        fresh = SamplerPool(replace(cfg.sampler, experiment=None), checkpoint=trained.checkpoint,
                            version=trained.version)
        asyncio.run(fresh.ready())
        after = probe(pool)
        assert after == probe(fresh) and after != before
        assert {c.model_version for row in pool.generate_sync(PROMPTS, PROBE) for c in row} == {trained.version}
    finally:
        pool.shutdown()
        if fresh is not None:
            fresh.shutdown()
