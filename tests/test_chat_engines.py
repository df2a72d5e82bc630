"""Engines and chat models: a prefilled answer is continued, every EOS id of generation_config
stops a completion, and engine_kwargs are checked against the chosen engine."""

from __future__ import annotations

import json

import httpx
import pytest
from _models import build_models

from common.sampling import SamplingParams, render_prompt
from search.engines import make_engine
from search.engines.openai_engine import OpenAIEngine

PROMPTS = ["map 3 1 4 =>", "map 1 2 3 4 5 6 =>", "map 8 =>", "map 0 9 =>"]


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    return build_models(tmp_path_factory)


@pytest.fixture(scope="module")
def engine(models):
    return make_engine("transformers", checkpoint=models["trained"], version="v0", num_threads=1)


# --- chat models: prefilled answers and every EOS id --------------------------------------

def test_a_prefilled_assistant_message_is_continued_not_closed(engine):
    from common.sampling import prefilled

    messages = prefilled([{"role": "user", "content": "map 1 =>"}], "Work:")
    assert render_prompt(engine.tokenizer, messages) == "<|user|>\nmap 1 =>\n<|assistant|>\nWork:"

    class NoTemplate:
        chat_template = None

    assert render_prompt(NoTemplate(), messages) == "user: map 1 =>\nassistant: Work:"
    # A client's trailing assistant message is a finished turn: a new one is opened after it.
    finished = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert render_prompt(engine.tokenizer, finished).endswith("b\n<|assistant|>\n")


def test_openai_engine_sends_a_prefill_as_vllms_continue_final_message():
    from common.sampling import prefilled

    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={
            "id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": " 7"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}})

    engine = OpenAIEngine("http://mock/v1", model="m", http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    engine.generate([prefilled([{"role": "user", "content": "q"}], "So:")], SamplingParams())
    engine.generate([[{"role": "user", "content": "q"}]], SamplingParams())
    assert seen[0]["continue_final_message"] is True and seen[0]["add_generation_prompt"] is False
    assert seen[0]["messages"][-1] == {"role": "assistant", "content": "So:"}  # ratchet's marker key is not sent
    assert "continue_final_message" not in seen[1]


def test_every_eos_id_of_the_generation_config_stops_the_transformers_engine(models, tmp_path):
    """Chat checkpoints (Qwen2.5, Llama-3) end a turn with ids beside the tokenizer's EOS, listed in
    generation_config.json: each one must end a completion."""
    import shutil

    from transformers import GenerationConfig

    ckpt = tmp_path / "ckpt"
    shutil.copytree(models["untrained"], ckpt)
    engine = make_engine("transformers", checkpoint=str(ckpt), num_threads=1, prefix_cache_bytes=0)
    free = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=6))
    assert all(row[0].finish_reason == "length" for row in free)  # the untrained model never stops early
    first = engine.tokenizer(free[0][0].text, add_special_tokens=False)["input_ids"][0]
    GenerationConfig(eos_token_id=[engine.tokenizer.eos_token_id, first]).save_pretrained(ckpt)
    engine.load(str(ckpt))
    assert engine.eos_ids == [engine.tokenizer.eos_token_id, first]
    stopped = engine.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=6))[0][0]
    assert (stopped.finish_reason, stopped.completion_tokens) == ("stop", 1)


def test_engine_kwargs_of_another_engine_are_refused_when_the_config_loads():
    """tpo-qwen's vLLM engine_kwargs with sampler.engine=transformers crash-looped every actor
    (TypeError in the constructor, 4 restarts); --dry-run passed the config."""
    from common.config import ConfigError, load_config
    from thinking.config import TpoConfig

    with pytest.raises((ConfigError, ValueError), match=r"\['gpu_memory_utilization', 'max_model_len'\] are not arguments of the "
                                                        r"transformers engine"):
        load_config("configs/tpo-qwen.yaml", TpoConfig, ["sampler.engine=transformers"])
    from search.pool_config import PoolConfig

    PoolConfig(engine="openai", engine_kwargs={"base_url": "http://x/v1", "api_key_env": "KEY"})  # a reference is fine
    with pytest.raises(ValueError, match="are not arguments of the openai engine"):
        PoolConfig(engine="openai", engine_kwargs={"base_url": "http://x/v1", "batch_size": 8})


# --- a pairwise judge on a real engine ------------------------------------------------------

def test_a_pool_judge_asks_a_chat_model_through_its_template_and_every_verdict_parses(engine):
    """The pairwise judge sent a chat model raw text, and a small model's free reply rarely began
    with A or B (every such verdict was lost). Through the template and under CHOICE_REGEX, each
    of the 6 comparisons (3 pairs x both orders) parses, whatever the model would have said."""
    import asyncio

    from verifiers.judges import JudgeItem, make_judge
    from verifiers.judges.pairwise import CHOICE_REGEX

    seen: list = []

    async def generate(prompts, params):
        seen.extend(prompts)
        return engine.generate(prompts, params)

    items = [JudgeItem("map 3 1 4 =>", r, group="g") for r in ("3 1 4", "4 1 3", "7")]
    free = asyncio.run(make_judge("pairwise", generate=generate).score(items))
    assert sum((v.detail or {}).get("unparsable", 1) for v in free) > 0  # the model's own words: not a verdict
    seen.clear()
    judge = make_judge("pairwise", generate=generate, chat=True, regex=CHOICE_REGEX)
    verdicts = asyncio.run(judge.score(items))
    assert len(seen) == 6 and all(p[0]["role"] == "user" and "Response A" in p[0]["content"] for p in seen)
    assert all(v.ok and v.detail["unparsable"] == 0 and v.detail["comparisons"] == 4 for v in verdicts)
