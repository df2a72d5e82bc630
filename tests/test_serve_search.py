"""The `search` extension over HTTP (search/serve/app.py): strategies as a request choice, a
verifier served beside the model, streaming, a deadline, and a search stopped when its client
goes away. In-process backends; the real model through the client is in test_vllm_serve_search.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from _asgi import post_then_disconnect
from fastapi.testclient import TestClient
from test_service_search import CANDIDATES, P_RIGHT, QUESTION, ConstrainedJudge, answer

from common.sampling import SamplingParams
from search.serve.app import build_app
from verifiers.selfverify import answer_prompt


class JudgeBackend(ConstrainedJudge):
    """A ConstrainedJudge as the app's backend."""

    context_length = 4096

    def __init__(self, candidates, p_right, version: str):
        super().__init__(candidates, p_right)
        self.version = version

    async def stream(self, prompts, params):
        for i, row in enumerate(await self.generate(prompts, params)):
            yield i, row


def chat(search: dict, **extra) -> dict:
    return {"messages": answer_prompt(QUESTION), "max_tokens": 64, "seed": 1, "search": search} | extra


@pytest.fixture
def served():
    model = JudgeBackend(CANDIDATES, {answer("8"): 0.9, answer("9"): 0.1}, "v3")  # likes its own 8s
    verifier = JudgeBackend(CANDIDATES, P_RIGHT, "verifier-v1")
    client = TestClient(build_app(model, model_name="smol", verifier=verifier, verifier_name="smol-verifier"))
    return client, model, verifier


def test_the_verifier_is_listed_and_gives_the_searchs_verdicts(served):
    client, model, verifier = served
    listed = client.get("/v1/models").json()["data"]
    assert [(m["id"], m["version"]) for m in listed] == [("smol", "v3"), ("smol-verifier", "verifier-v1")]
    out = client.post("/v1/chat/completions", json=chat({"k": 5, "return_candidates": True})).json()
    assert out["search"]["strategy"] == "weighted_best_of_n" and out["search"]["answer"] == "9"
    assert out["choices"][0]["message"]["content"] == CANDIDATES[out["search"]["index"]]
    assert [c["score"] for c in out["search"]["candidates"]] == pytest.approx([0.3, 0.8, 0.3, 0.8, 0.3])
    assert {kind for kind, _ in model.requests} == {"candidate"}
    assert {kind for kind, _ in verifier.requests} == {"verdict"}
    assert out["usage"]["completion_tokens"] == 5 * 5 + 5 * 2  # candidates and verdicts
    # a request that names the verifier samples from it
    direct = client.post("/v1/chat/completions", json={"model": "smol-verifier", "messages": answer_prompt(QUESTION)})
    assert direct.json()["model"] == "smol-verifier" and verifier.requests[-1] == ("candidate", 1)
    missing = client.post("/v1/chat/completions", json={"model": "other", "messages": answer_prompt(QUESTION)})
    assert missing.status_code == 404 and "smol-verifier" in missing.json()["error"]["message"]


@pytest.mark.parametrize("strategy,expected", [("consistency", "8"), ("best_of_n", "9"), ("verification", "9"),
                                               ("weighted_best_of_n", "9")])
def test_the_strategy_is_the_requests_choice_and_the_response_says_which(served, strategy, expected):
    client, _, _ = served
    out = client.post("/v1/chat/completions", json=chat({"k": 5, "strategy": strategy, "return_candidates": True}))
    assert out.status_code == 200, out.text
    assert (out.json()["search"]["strategy"], out.json()["search"]["answer"]) == (strategy, expected)


def test_a_search_streams_its_answer_as_one_chunk(served):
    client, _, _ = served
    with client.stream("POST", "/v1/chat/completions",
                       json=chat({"k": 5}, stream=True, stream_options={"include_usage": True})) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text in (answer("9"),)
    assert chunks[-1]["usage"]["completion_tokens"] == 5 * 5 + 5 * 2


def test_a_bad_search_field_is_a_400_naming_it(served):
    client, _, _ = served
    r = client.post("/v1/chat/completions", json=chat({"k": 4, "verify": 8}))
    assert r.status_code == 400 and r.json()["error"]["param"] == "search"
    assert "verdict=reasoned" in r.json()["error"]["message"]


class Stuck(JudgeBackend):
    """Candidates arrive; the verdicts never do. Records whether the verdict request was cancelled."""

    def __init__(self):
        super().__init__(CANDIDATES, P_RIGHT, "v1")
        self.verdicts_started, self.cancelled = asyncio.Event(), False

    async def generate(self, prompts, params: SamplingParams):
        if params.regex is None:
            return await super().generate(prompts, params)
        self.verdicts_started.set()
        try:
            await asyncio.Event().wait()  # never set: only a cancellation ends this
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def test_a_search_past_its_deadline_is_stopped_and_answered_504():
    backend = Stuck()
    client = TestClient(build_app(backend, model_name="smol"))
    r = client.post("/v1/chat/completions", json=chat({"k": 5, "deadline_s": 0.2}))
    assert r.status_code == 504 and r.json()["error"]["code"] == "search_deadline_exceeded"
    assert backend.cancelled


def test_a_client_that_disconnects_mid_search_stops_the_search():
    """Driven at the ASGI level: the client disconnects once the verdict requests are out."""
    backend = Stuck()

    async def drive() -> list[dict]:
        return await post_then_disconnect(build_app(backend, model_name="smol"), "/v1/chat/completions",
                                          chat({"k": 5}), backend.verdicts_started)

    sent = asyncio.run(drive())
    assert backend.cancelled
    assert sent[0]["status"] == 499


def test_serve_config_puts_the_verifier_beside_the_model():
    from search.serve.config import ServeConfig, settings_from

    cfg = ServeConfig(model="models/scaling-arith-seed", verifier="models/smollm2-verifier-lora/")
    s = settings_from(cfg, env={}, verifier="/home/merged/smollm2-verifier-lora-1234")
    assert (s.verifier, s.verifier_name) == ("/home/merged/smollm2-verifier-lora-1234", "smollm2-verifier-lora")
    named = settings_from(ServeConfig(model="m", verifier="v", verifier_name="judge"), env={})
    assert (named.verifier, named.verifier_name) == ("v", "judge")
    same = settings_from(ServeConfig(model="m", verifier="m"), env={})  # the model verifies itself: one pool
    assert (same.verifier, same.verifier_name) == (None, None)
    with pytest.raises(ValueError, match="verifier_name names the verifier"):
        ServeConfig(model="m", verifier_name="judge")
