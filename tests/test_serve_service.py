"""The real OpenAI-compatible service (`jobs.serving.run` on Ray Serve + SamplerPool on the
session's Ray and Redis), driven by the `openai` client and ratchet's `openai` engine. The HTTP
behaviour on an in-process backend is tests/test_serve.py."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from _models import build_models, expected

from common.ports import free_port
from common.sampling import ContextLengthError, SamplingParams
from search.engines.openai_engine import OpenAIEngine
from search.pool import PoolConfig
from search.serve import ServeSettings
from search.serve.guard import api_key_digest

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    return build_models(tmp_path_factory)


@pytest.fixture(scope="module")
def service(ray_local, redis_server, models):
    """`ratchet serve --experiment <exp>` on the session's Ray, serving registry version v1."""
    import uuid

    from ray import serve

    from jobs.serving import run
    from store import Store

    experiment = f"serve-{uuid.uuid4().hex[:8]}"
    registry = Store.connect(redis_server.url).models(experiment)
    registry.publish(models["untrained"])
    registry.publish(models["trained"], parent="v0")
    settings = ServeSettings(
        pool=PoolConfig(num_actors=1, num_cpus_per_actor=0.5, engine_kwargs={"num_threads": 1},
                        experiment=experiment, prompts_per_request=2),
        model_name="tiny", api_key=KEY,
    )
    url = run(settings, host="127.0.0.1", port=free_port(), blocking=False)
    yield url
    serve.shutdown()


def test_openai_engine_against_the_service(service):
    engine = OpenAIEngine(service, api_key=KEY)
    prompts = ["map 3 1 4 =>", "map 7 =>", [{"role": "user", "content": "map 1 =>"}]]
    rows = engine.generate(prompts, SamplingParams(n=3, temperature=0, max_tokens=8))
    assert engine.model == "tiny"  # discovered from /v1/models
    assert [row[0].text for row in rows[:2]] == [expected(p) for p in prompts[:2]]
    assert all(len(row) == 3 for row in rows)
    assert {c.model_version for row in rows for c in row} == {"v1"}
    c = rows[0][0]
    assert (c.finish_reason, c.prompt_tokens, c.completion_tokens) == ("stop", 12, 3)


def test_a_prefilled_chat_through_the_service_continues_as_the_engine_does(service, models):
    """ratchet serve continues a prefilled assistant message exactly as its engine does in-process
    (the openai engine sends vLLM's continue_final_message; it was refused as an unknown field)."""
    from common.sampling import prefilled
    from search.engines.hf import TransformersEngine

    prompt = prefilled([{"role": "user", "content": "map 3 1 4 =>"}], "map 3 1 4 =>")
    params = SamplingParams(n=1, temperature=0, max_tokens=6)
    served = OpenAIEngine(service, api_key=KEY, model="tiny").generate([prompt], params)[0][0].text
    local = TransformersEngine(models["trained"], num_threads=1).generate([prompt], params)[0][0].text
    assert served == local


def test_service_samples_with_seeds_and_stops(service):
    engine = OpenAIEngine(service, api_key=KEY)
    params = SamplingParams(n=2, temperature=1.0, max_tokens=6, seed=11, stop=["\n"])
    assert engine.generate(["map 1 2 =>"], params) == engine.generate(["map 1 2 =>"], params)


def test_service_requires_the_token(service):
    # a refused key is the request's fault, the same on every actor: a ValueError, never retried
    with pytest.raises(ValueError, match=r"rejected the request \(401\)") as refused:
        OpenAIEngine(service, model="tiny", api_key="wrong").generate(["map 1 =>"], SamplingParams())
    assert isinstance(refused.value.__cause__, openai.AuthenticationError)
    assert httpx.get(f"{service}/models").status_code == 401


def test_service_rejects_bad_input_and_keeps_serving(service):
    engine = OpenAIEngine(service, api_key=KEY, model="tiny")
    with pytest.raises(ContextLengthError, match="maximum context length of 2048"):
        engine.generate(["map " * 1000], SamplingParams())
    r = httpx.post(f"{service}/completions", headers=AUTH, json={"prompt": "x", "top_p": 0})
    assert r.status_code == 400 and "top_p" in r.json()["error"]["message"]
    assert engine.generate(["map 4 =>"], SamplingParams(temperature=0, max_tokens=4))[0][0].text == expected("map 4 =>")


def test_chat_search_extension_answers_with_the_selected_candidate(service):
    """Any OpenAI client gets test-time search: k candidates, self-verification, one answer."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "map 3 1 4 =>"}], "max_tokens": 6,
            "temperature": 1.0, "seed": 3,
            "search": {"k": 4, "strategy": "verification", "k_tie": 2, "style": "compact",
                       "return_candidates": True}}
    r = httpx.post(f"{service}/chat/completions", headers=AUTH, json=body, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["choices"]) == 1 and len(out["search"]["candidates"]) == 4
    chosen = out["search"]["candidates"][out["search"]["index"]]
    assert out["choices"][0]["message"]["content"] == chosen["text"]
    assert out["usage"]["completion_tokens"] >= 4  # candidates and verdicts all count
    # constrained verdicts through the pool: each parses, with its probability
    assert all(c["verdicts"][0] in (0, 1) and 0 <= c["probabilities"][0] <= 1 for c in out["search"]["candidates"])
    bad = httpx.post(f"{service}/chat/completions", headers=AUTH, json=body | {"search": {"k": 0}})
    assert bad.status_code == 400 and "search.k" in bad.json()["error"]["message"]


def test_a_pairwise_judge_over_the_service_gets_a_letter_for_every_comparison(service):
    """TPO's served judge (judge.engine=openai): with judge.kwargs.regex the service constrains
    each verdict to A or B, so none is unparsable, whatever the model would have written."""
    from verifiers.judges import JudgeItem
    from verifiers.judges.pairwise import CHOICE_REGEX, PairwiseJudge

    judge = PairwiseJudge(OpenAIEngine(service, api_key=KEY).agenerate, regex=CHOICE_REGEX)
    items = [JudgeItem("map 3 1 4 =>", r, group="g") for r in ("4 2 5", "9", "4 2 5 1")]
    verdicts = asyncio.run(judge.score(items))
    assert [(v.ok, v.detail["unparsable"], v.detail["comparisons"]) for v in verdicts] == [(True, 0, 4)] * 3


def _stats(service: str) -> list[dict]:
    return httpx.get(service.removesuffix("/v1") + "/stats", headers=AUTH).json()["actors"]


def test_the_openai_client_streams_from_the_service_sync(service):
    client = openai.OpenAI(base_url=service, api_key=KEY, max_retries=0)
    prompts = ["map 3 1 4 =>", "map 7 =>", "map 2 5 =>"]
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    usage = None
    for chunk in client.completions.create(model="tiny", prompt=prompts, n=2, max_tokens=8, temperature=0,
                                           stream=True, stream_options={"include_usage": True}):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            finish[c.index] = c.finish_reason or finish.get(c.index)
        usage = chunk.usage or usage
    assert texts == {2 * i + k: expected(p) for i, p in enumerate(prompts) for k in range(2)}
    assert set(finish.values()) == {"stop"}
    assert usage.completion_tokens == 6 * 3 and usage.prompt_tokens > 0  # space, digit, EOS each
    plain = client.completions.create(model="tiny", prompt=prompts, n=2, max_tokens=8, temperature=0)
    assert [c.text for c in plain.choices] == [texts[i] for i in range(6)]

    messages = [{"role": "user", "content": "map 1 =>"}]
    whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0, n=2)
    content: dict[int, str] = {}
    for chunk in client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, temperature=0, n=2,
                                                stream=True):
        for c in chunk.choices:
            content[c.index] = content.get(c.index, "") + (c.delta.content or "")
    assert content == {i: c.message.content for i, c in enumerate(whole.choices)}


def test_the_openai_client_streams_from_the_service_async(service):
    async def run():
        client = openai.AsyncOpenAI(base_url=service, api_key=KEY, max_retries=0)
        stream = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "map 4 =>"}], max_tokens=6, temperature=0,
            stream=True, stream_options={"include_usage": True})
        chunks = [chunk async for chunk in stream]
        plain = await client.completions.create(model="tiny", prompt="map 4 =>", max_tokens=8, temperature=0)
        streamed = [c async for c in await client.completions.create(
            model="tiny", prompt="map 4 =>", max_tokens=8, temperature=0, stream=True)]
        await client.close()
        return chunks, plain, streamed

    chunks, plain, streamed = asyncio.run(run())
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert [c.choices[0].finish_reason for c in chunks[:-1]][-1] in ("stop", "length")
    assert plain.choices[0].text == expected("map 4 =>") == "".join(c.choices[0].text for c in streamed)


def test_logprobs_come_back_in_openais_shapes(service):
    client = openai.OpenAI(base_url=service, api_key=KEY, max_retries=0)
    r = client.completions.create(model="tiny", prompt="map 3 1 4 =>", max_tokens=8, temperature=0, logprobs=2)
    lp, text = r.choices[0].logprobs, r.choices[0].text
    assert "".join(lp.tokens).startswith(text) and len(lp.tokens) == r.usage.completion_tokens
    assert all(v <= 0 for v in lp.token_logprobs) and all(len(top) == 2 for top in lp.top_logprobs)
    assert all(max(top.values()) >= v - 1e-6 for top, v in zip(lp.top_logprobs, lp.token_logprobs, strict=True))
    assert lp.text_offset[:2] == [0, len(lp.tokens[0])]
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "map 1 =>"}],
                                          max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
    content = chat.choices[0].logprobs.content
    assert len(content) == chat.usage.completion_tokens and all(len(t.top_logprobs) == 3 for t in content)
    assert content[0].top_logprobs[0].token == content[0].token  # greedy: the sampled token is the most likely
    engine = OpenAIEngine(service, api_key=KEY, model="tiny")
    c = engine.generate(["map 3 1 4 =>"], SamplingParams(temperature=0, max_tokens=8, logprobs=1))[0][0]
    assert [e["token"] for e in c.logprobs] == lp.tokens and all(len(e["top_logprobs"]) == 1 for e in c.logprobs)


def test_the_openai_engines_regex_is_applied_by_the_service(service):
    """The engine sends structured_outputs.regex; the service constrains with it (it used to drop it)."""
    import regex

    pattern = "( [0-4]){2,3}"  # the trained model answers one digit, here 9
    engine = OpenAIEngine(service, api_key=KEY, model="tiny")
    rows = engine.generate(["map 3 1 4 =>"], SamplingParams(n=6, temperature=1.0, max_tokens=12, seed=0, regex=pattern))
    assert all(regex.fullmatch(pattern, c.text) for c in rows[0]), [c.text for c in rows[0]]


def test_a_client_that_goes_away_cancels_its_generation(service):
    """Closing a stream cancels its prompts' requests still queued in the pool or on the actor.

    Observed without timing: a request sent after the close queues behind whatever the
    stream still holds (the pool's queue is FIFO), so when it returns, the stream's requests
    that ran are counted; without cancellation that is all of them."""
    requests = 32  # 64 prompts, 2 per request, each a forced 12-digit answer (25 tokens)
    before = _stats(service)
    body = {"model": "tiny", "prompt": [f"map {i % 10} =>" for i in range(2 * requests)], "max_tokens": 40,
            "temperature": 1.0, "seed": 0, "stream": True, "structured_outputs": {"regex": "( [0-9]){12}"}}
    with httpx.stream("POST", f"{service}/completions", json=body, headers=AUTH, timeout=120) as r:
        assert r.status_code == 200
        first = next(line for line in r.iter_lines() if line)
        assert len(json.loads(first.removeprefix("data: "))["choices"][0]["text"].split()) == 12
    follow = httpx.post(f"{service}/completions", headers=AUTH, timeout=120,
                        json={"prompt": "map 4 =>", "max_tokens": 4, "temperature": 0})
    assert follow.status_code == 200 and follow.json()["choices"][0]["text"] == expected("map 4 =>")
    after = _stats(service)
    ran = sum(a["requests"] for a in after) - sum(b["requests"] for b in before) - 1
    assert 1 <= ran < requests
    assert all(a["queue_depth"] == 0 for a in after)  # nothing left holding a slot


def test_unknown_routes_and_docs_on_the_service(service):
    root = service.removesuffix("/v1")
    r = httpx.post(f"{service}/embeddings", headers=AUTH, json={"input": "x"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert httpx.get(f"{root}/docs").status_code == 401 and httpx.get(f"{root}/openapi.json").status_code == 401
    assert httpx.get(f"{root}/openapi.json", headers=AUTH).status_code == 200
    assert httpx.get(f"{root}/health").status_code == 200


def test_the_api_key_never_enters_rays_cluster_state(service):
    """Replicas get the key's SHA-256 only: Serve's stored state holds the digest, never the key."""
    import pickle

    from ray.experimental.internal_kv import _internal_kv_get, _internal_kv_list

    blobs = [_internal_kv_get(k, namespace=b"serve") or b"" for k in _internal_kv_list(b"", namespace=b"serve")]
    assert any(api_key_digest(KEY).encode() in b for b in blobs)  # the scan does see the init args
    assert not any(KEY.encode() in b for b in blobs)
    assert KEY.encode() not in pickle.dumps(ServeSettings(checkpoint="/ckpt", api_key=KEY))
