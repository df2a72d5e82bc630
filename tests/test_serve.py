"""The OpenAI-compatible endpoint: HTTP behaviour on an in-process backend, then the real
service (`ray_jobs.serve.run` on Ray Serve + SamplerPool) driven by the `openai` engine."""

from __future__ import annotations

import socket

import httpx
import openai
import pytest
from _models import build_models, expected
from fastapi.testclient import TestClient

from common.sampling import Completion, ContextLengthError, SamplingParams
from search.engines.openai_engine import OpenAIEngine
from search.pool import PoolConfig
from search.serve import ServeSettings
from search.serve.app import build_app

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    return build_models(tmp_path_factory)


# --- HTTP behaviour, no Ray ------------------------------------------------------------

class EchoBackend:
    """Answers each prompt with its own text; prompts containing 'LONG' exceed the context."""

    version = "v7"

    async def generate(self, prompts, params: SamplingParams):
        rows = []
        for i, p in enumerate(prompts):
            text = p if isinstance(p, str) else p[-1]["content"]
            if "LONG" in text:
                raise ContextLengthError(f"prompt {i} has 5000 tokens ... maximum context length of 2048 tokens")
            rows.append([Completion(text[: params.max_tokens], "length", 3, params.max_tokens, "v7")
                         for _ in range(params.n)])
        return rows


@pytest.fixture
def client():
    return TestClient(build_app(EchoBackend(), model_name="tiny", api_key=KEY, chat_max_tokens=5))


def test_requests_without_the_bearer_token_get_401(client):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = client.post("/v1/completions", json={"prompt": "x"}, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert client.get("/v1/models").status_code == 401
    assert client.get("/v1/models", headers=AUTH).json()["data"][0] == {
        "id": "tiny", "object": "model", "created": pytest.approx(0, abs=1e10), "owned_by": "ratchet",
        "version": "v7"}


def test_no_token_configured_means_open_access():
    open_client = TestClient(build_app(EchoBackend(), model_name="tiny"))
    assert open_client.post("/v1/completions", json={"prompt": "abc"}).status_code == 200


@pytest.mark.parametrize("body,needle", [
    ({"prompt": "x", "n": 0}, "SamplingParams.n=0"),
    ({"prompt": "x", "temperature": -1}, "SamplingParams.temperature=-1"),
    ({"prompt": "x", "top_p": 2}, "SamplingParams.top_p=2"),
    ({"prompt": "x", "max_tokens": 0}, "SamplingParams.max_tokens=0"),
    ({"prompt": "x", "stream": True}, "stream=true is not supported"),
    ({"prompt": "x", "n": "many"}, "invalid request: n:"),
    ({"n": 1}, "invalid request: prompt:"),
    ({"prompt": []}, "prompt is an empty list"),
])
def test_invalid_parameters_get_400_with_a_message(client, body, needle):
    r = client.post("/v1/completions", json=body, headers=AUTH)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_unknown_model_gets_404(client):
    r = client.post("/v1/completions", json={"prompt": "x", "model": "gpt-9"}, headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_too_long_prompt_is_rejected_alone_and_the_service_keeps_serving(client):
    r = client.post("/v1/completions", json={"prompt": ["ok", "LONG"]}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert client.post("/v1/completions", json={"prompt": "ok"}, headers=AUTH).status_code == 200


def test_completion_and_chat_responses_have_openai_shape(client):
    r = client.post("/v1/completions", json={"prompt": ["ab", "cd"], "n": 2, "max_tokens": 4}, headers=AUTH).json()
    assert [c["index"] for c in r["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in r["choices"]] == ["ab", "ab", "cd", "cd"]
    assert r["usage"] == {"prompt_tokens": 6, "completion_tokens": 16, "total_tokens": 22}
    assert r["system_fingerprint"] == "v7" and r["model"] == "tiny"
    chat = client.post("/v1/chat/completions", headers=AUTH,
                       json={"messages": [{"role": "user", "content": "hello world"}], "n": 3}).json()
    assert [c["message"]["content"] for c in chat["choices"]] == ["hello"] * 3  # chat_max_tokens=5
    assert chat["object"] == "chat.completion"
    r = client.post("/v1/chat/completions", json={"messages": []}, headers=AUTH)
    assert r.status_code == 400


# --- the real service ------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def service(ray_local, redis_server, models):
    """`ratchet serve --experiment <exp>` on the session's Ray, serving registry version v1."""
    import uuid

    from ray import serve

    from ray_jobs.serve import run
    from store import Store

    experiment = f"serve-{uuid.uuid4().hex[:8]}"
    registry = Store.connect(redis_server.url).models(experiment)
    registry.publish(models["untrained"])
    registry.publish(models["trained"], parent="v0")
    settings = ServeSettings(
        pool=PoolConfig(num_actors=1, num_cpus_per_actor=0.5, engine_kwargs={"num_threads": 1},
                        experiment=experiment),
        model_name="tiny", api_key=KEY,
    )
    url = run(settings, host="127.0.0.1", port=_free_port(), blocking=False)
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


def test_service_samples_with_seeds_and_stops(service):
    engine = OpenAIEngine(service, api_key=KEY)
    params = SamplingParams(n=2, temperature=1.0, max_tokens=6, seed=11, stop=["\n"])
    assert engine.generate(["map 1 2 =>"], params) == engine.generate(["map 1 2 =>"], params)


def test_service_requires_the_token(service):
    with pytest.raises(openai.AuthenticationError):
        OpenAIEngine(service, model="tiny", api_key="wrong").generate(["map 1 =>"], SamplingParams())
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
            "search": {"k": 4, "verify": 2, "k_tie": 2, "verify_max_tokens": 8, "style": "compact",
                       "return_candidates": True}}
    r = httpx.post(f"{service}/chat/completions", headers=AUTH, json=body, timeout=120)
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out["choices"]) == 1 and len(out["search"]["candidates"]) == 4
    chosen = out["search"]["candidates"][out["search"]["index"]]
    assert out["choices"][0]["message"]["content"] == chosen["text"]
    assert out["usage"]["completion_tokens"] >= 4  # candidates and verdicts all count
    bad = httpx.post(f"{service}/chat/completions", headers=AUTH, json=body | {"search": {"k": 0}})
    assert bad.status_code == 400 and "search.k" in bad.json()["error"]["message"]


def test_cli_parses_serve_arguments(monkeypatch):
    from ray_jobs.serve import parse

    monkeypatch.setenv("MY_KEY", "s3")
    settings, host, port = parse(["experiment=demo", "version=v2", "api_key_env=MY_KEY",
                                  "sampler.num_actors=2", "port=9001", "thought_marker=Work:", "response_marker=So:"])
    assert (settings.api_key, settings.version, settings.pool.num_actors, port) == ("s3", "v2", 2, 9001)
    assert settings.served_name == "demo" and "s3" not in repr(settings)
    assert (settings.reasoning.thought_marker, settings.reasoning.response_marker) == ("Work:", "So:")


@pytest.mark.parametrize("argv, message", [
    (["model=models/tpo-arith-seed", "version=v1"], "version names a registry version"),
    (["model=models/tpo-arith-seed", "api_key_env=UNSET_VARIABLE_XYZ"], "api_key_env=UNSET_VARIABLE_XYZ: that "
                                                                          "environment variable is empty"),
    (["model=/no/such/ckpt"], "model='/no/such/ckpt': no such checkpoint directory"),
    (["experiment=demo", "actors=2"], "field 'actors' was renamed: use 'sampler.num_actors'"),
    (["experiment=demo", "--actors", "2"], "--actors is gone: write sampler.num_actors=N"),
    (["--model", "/ckpt"], "--model is gone: write model=PATH"),
    (["experiment=demo", "sampler.num_actor=2"], "did you mean 'sampler.num_actors'"),
])
def test_serve_config_errors_are_one_line_and_exit_2(argv, message, capsys):
    from ray_jobs.serve import parse

    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("ratchet serve: error: ")
    assert message in err, err


def test_thinking_model_answers_with_reasoning_content_switchable():
    from search.serve.protocol import ReasoningSplit

    class Thinker(EchoBackend):
        async def generate(self, prompts, params):
            return [[Completion("Work: 3+4=7. So: 7", "stop", 3, 9, "v7")] for _ in prompts]

    body = {"messages": [{"role": "user", "content": "3+4"}]}
    on = TestClient(build_app(Thinker(), model_name="t", reasoning=ReasoningSplit("Work:", "So:")))
    msg = on.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert (msg["content"], msg["reasoning_content"]) == ("7", "3+4=7.")
    off = TestClient(build_app(Thinker(), model_name="t"))
    msg = off.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
    assert msg["content"] == "Work: 3+4=7. So: 7" and "reasoning_content" not in msg
    # no response marker: nothing guessed, the whole output stays the content
    assert ReasoningSplit("Work:", "So:").split("just 7") == (None, "just 7")


def test_cli_parses_reasoning_markers():
    from ray_jobs.serve import parse

    settings, _, _ = parse(["model=models/tpo-arith-seed", "thought_marker=Work:", "response_marker=So:"])
    assert settings.reasoning.thought_marker == "Work:" and settings.reasoning.response_marker == "So:"
    assert parse(["model=models/tpo-arith-seed"])[0].reasoning is None
