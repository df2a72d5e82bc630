"""The ARC adapter (SOAR's warm start on a real model): its corpus never draws on a demo's tasks, its
rows are the chat prompts SOAR sends, a real adapter is built, merged as SOAR's base and refused on
the tasks it saw."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from common.config import ConfigError, load_config
from evolution.arc_adapter import (
    TRAINING_TASKS,
    ArcAdapterRecipe,
    build_embedded,
    check_unseen,
    protected_tasks,
    smollm2_arc,
    training_rows,
    training_tasks,
)
from evolution.checks import check_soar
from evolution.config import SoarConfig
from evolution.gridtext import grid_text
from evolution.learn import seed_rows
from evolution.loop import base_model
from evolution.tasks import load_split, select
from training import adapters, embedded

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def test_protected_tasks_are_every_demos_searched_and_heldout_tasks():
    demo = load_config(CONFIGS / "soar-demo.yaml", SoarConfig).tasks
    real = load_config(CONFIGS / "soar-smollm-vllm.yaml", SoarConfig).tasks
    protected = set(protected_tasks())
    assert {*demo.ids, *demo.heldout_ids, *real.ids, *real.heldout_ids} <= protected
    assert len(protected) >= 35


def test_the_recipe_draws_on_training_tasks_outside_every_demo():
    recipe = smollm2_arc()
    tasks = training_tasks(recipe)
    assert len(tasks) > 50
    assert not set(tasks) & set(protected_tasks())
    assert set(tasks) <= set(load_split("arc1-train"))
    assert not set(tasks) & set(load_split("arc1-eval"))


def test_rows_show_only_the_inputs_of_the_tasks_drawn_on():
    """Exclude every small task but two: each row's first input grid is one of those two tasks' inputs."""
    small = select(load_split("arc1-train"), max_grid=10)
    keep = ["3c9b0459", "6150a2bd"]
    recipe = ArcAdapterRecipe(exclude_tasks=tuple(sorted(set(small) - set(keep))), rows=12, max_chars=900)
    allowed = {grid_text(ex.input, "digits") for t in keep for ex in (*small[t].train, *small[t].test)}
    assert training_tasks(recipe) == keep
    rows = training_rows(recipe)
    assert len(rows) == 12
    for row in rows:
        [message] = row["prompt"]
        grids = message["content"].split("\n->\n")[0].split("\n", 2)[2]  # 'task', 'pair 1: ...', then the grid
        assert grids in allowed


def test_rows_are_the_chat_prompts_soar_sends_in_the_compact_style():
    row = training_rows(ArcAdapterRecipe(rows=1))[0]
    [user], [assistant] = row["prompt"], row["completion"]
    assert user["role"] == "user" and user["content"].endswith("def transform(grid):\n")
    assert assistant["role"] == "assistant" and assistant["content"].startswith("    grid = ")
    assert assistant["content"].endswith("    return grid\n")
    text = training_rows(replace(ArcAdapterRecipe(rows=1), chat=False))[0]
    assert text["prompt"] == user["content"] and text["completion"] == assistant["content"]


def test_the_recipe_refuses_an_evaluation_split():
    with pytest.raises(ValueError, match="training split only"):
        ArcAdapterRecipe(split="arc1-eval")


def test_check_unseen_refuses_a_task_the_adapter_drew_on(tmp_path):
    (tmp_path / TRAINING_TASKS).write_text(json.dumps(["aaaaaaaa", "bbbbbbbb"]))
    check_unseen(str(tmp_path), ["cccccccc"])
    check_unseen(str(tmp_path / "elsewhere"), ["aaaaaaaa"])  # no list: nothing to refuse
    with pytest.raises(ValueError, match="1 of this experiment's tasks.*bbbbbbbb"):
        check_unseen(str(tmp_path), ["cccccccc", "bbbbbbbb"])


def test_replay_rows_follow_the_prompt_format():
    cfg = load_config(CONFIGS / "soar-smollm-arc.yaml", SoarConfig)
    assert cfg.search.prompt_format == "chat"
    [row] = seed_rows(cfg, 1, 1, protected_tasks())
    assert row["prompt"][0]["role"] == "user" and row["completion"][0]["role"] == "assistant"
    [text] = seed_rows(replace(cfg, search=replace(cfg.search, prompt_format="text")), 1, 1, protected_tasks())
    assert text == {"prompt": row["prompt"][0]["content"], "completion": row["completion"][0]["content"]}


def test_the_short_demo_is_the_full_run_with_smaller_budgets_and_keeps_its_control():
    full = load_config(CONFIGS / "soar-smollm-arc.yaml", SoarConfig)
    demo = load_config(CONFIGS / "soar-smollm-arc-demo.yaml", SoarConfig)
    assert (demo.tasks, demo.model, demo.sampler) == (full.tasks, full.model, full.sampler)
    assert demo.experiment != full.experiment  # never resumes the full run's record
    assert demo.iterations == 2 and demo.controls.seed_only and demo.controls.measures(1)
    assert len(demo.controls.seeds) >= 2  # a paired interval needs two seeds
    assert demo.learn.max_steps < full.learn.max_steps
    # tasks, checkpoints, adapters; the engine's check wants vllm importable, which only .venv-vllm has
    check_soar(replace(demo, sampler=replace(demo.sampler, engine="transformers", engine_kwargs={})))


def test_the_shipped_adapter_saw_no_demo_task():
    path = Path(embedded.MODELS_DIR) / "smollm2-arc-lora"
    seen = set(json.loads((path / TRAINING_TASKS).read_text()))
    assert seen and not seen & set(protected_tasks())
    assert adapters.base_of(path) == "pretrained:smollm2-135m-instruct"


@pytest.fixture(scope="module")
def tiny_arc_adapter(tmp_path_factory, untrained_model) -> Path:
    """A real adapter built by the embedded builder on the tiny untrained model (a few LoRA steps)."""
    out = tmp_path_factory.mktemp("arc-adapter")
    recipe = ArcAdapterRecipe(base=untrained_model, exclude_tasks=tuple(protected_tasks()), rows=8, batch_size=4,
                              lora_r=4, lora_alpha=8, max_chars=500)
    info = build_embedded(recipe, out)
    assert info["train"]["steps"] == 2 and info["source_tasks"] == len(training_tasks(recipe))
    return out


def test_soar_searches_with_the_adapter_merged_and_refuses_tasks_it_saw(tiny_arc_adapter, store, experiment_name,
                                                                        ratchet_home, monkeypatch):
    monkeypatch.setenv("RATCHET_HOME", str(ratchet_home))
    here = ["sampler.engine=transformers", "sampler.engine_kwargs={}"]  # vllm imports only in .venv-vllm
    cfg = load_config(CONFIGS / "soar-smollm-arc.yaml", SoarConfig,
                      [f"experiment={experiment_name}", f"model.checkpoint={tiny_arc_adapter}", *here])
    check_soar(cfg)
    v0 = base_model(cfg, store, sorted({*cfg.tasks.ids, *cfg.tasks.heldout_ids}))
    assert v0.checkpoint == adapters.merged_checkpoint(tiny_arc_adapter, home=ratchet_home)
    assert (Path(v0.checkpoint) / "model.safetensors").exists()

    seen = json.loads((tiny_arc_adapter / TRAINING_TASKS).read_text())[0]
    leaky = load_config(CONFIGS / "soar-smollm-arc.yaml", SoarConfig,
                        [f"experiment={experiment_name}-b", f"model.checkpoint={tiny_arc_adapter}",
                         f"tasks.heldout_ids=[{seen}]", *here])
    with pytest.raises(ConfigError, match=seen):
        check_soar(leaky)
    with pytest.raises(ValueError, match=seen):
        base_model(leaky, store, [seen])
