"""The OpenAI-compatible endpoint's HTTP behaviour on an in-process backend. `ratchet serve`'s
command line is tests/test_serve_cli.py; the real service on Ray Serve is tests/test_serve_service.py."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from common.sampling import Completion, ContextLengthError, SamplingParams
from search.serve.app import build_app
from search.serve.limits import ServeLimits

KEY = "test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


# --- HTTP behaviour, no Ray ------------------------------------------------------------

class EchoBackend:
    """Answers each prompt with its own text; prompts containing 'LONG' exceed the context,
    'BOOM' fails inside the backend. Remembers the last SamplingParams it was given."""

    version = "v7"
    context_length = 100

    def __init__(self):
        self.params: SamplingParams | None = None
        self.prompts: list | None = None

    async def generate(self, prompts, params: SamplingParams):
        self.params, self.prompts = params, list(prompts)
        rows = []
        for i, p in enumerate(prompts):
            text = p if isinstance(p, str) else p[-1]["content"]
            if "LONG" in text:
                raise ContextLengthError(f"prompt {i} has 5000 tokens ... maximum context length of 2048 tokens")
            if "BOOM" in text:
                raise RuntimeError("secret internal detail at /srv/ratchet/engine.py line 7")
            rows.append([Completion(text[: params.max_tokens], "length", 3, params.max_tokens, "v7")
                         for _ in range(params.n)])
        return rows

    async def stream(self, prompts, params: SamplingParams):
        for i, p in enumerate(prompts):  # one prompt at a time, as the pool's requests finish
            yield i, (await self.generate([p], params))[0]


LIMITS = ServeLimits(max_n=4, max_prompts=3, max_stop=2, max_stop_chars=5, max_logprobs=3, max_search_k=4,
                     max_search_verify=2, max_search_k_tie=2, max_body_bytes=2000)


@pytest.fixture
def backend():
    return EchoBackend()


@pytest.fixture
def client(backend):
    return TestClient(build_app(backend, model_name="tiny", api_key=KEY, chat_max_tokens=5, limits=LIMITS),
                      raise_server_exceptions=False)


def test_requests_without_the_bearer_token_get_401(client):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        r = client.post("/v1/completions", json={"prompt": "x"}, headers=headers)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert client.get("/v1/models").status_code == 401
    assert client.get("/v1/models", headers=AUTH).json()["data"][0] == {
        "id": "tiny", "object": "model", "created": pytest.approx(0, abs=1e10), "owned_by": "ratchet",
        "version": "v7"}


def test_the_token_is_checked_before_the_body_is_parsed(client):
    r = client.post("/v1/completions", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 401  # not a 400 about the JSON: the body was never read
    assert client.post("/v1/completions", content=b"{not json", headers=AUTH | {"Content-Type": "application/json"}
                       ).status_code == 400


def test_docs_and_openapi_need_the_token_and_health_does_not(client):
    for path in ("/docs", "/openapi.json", "/redoc"):
        assert client.get(path).status_code == 401, path
    assert client.get("/openapi.json", headers=AUTH).json()["info"]["title"] == "ratchet"
    assert client.get("/docs", headers=AUTH).status_code == 200
    assert client.get("/health").json() == {"status": "ok"}


def test_unknown_routes_get_openai_shaped_404(client):
    r = client.post("/v1/embeddings", json={"input": "x"}, headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found" and "/v1/embeddings" in r.text
    r = client.get("/v1/completions", headers=AUTH)
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"


def test_no_token_configured_means_open_access():
    open_client = TestClient(build_app(EchoBackend(), model_name="tiny"))
    assert open_client.post("/v1/completions", json={"prompt": "abc"}).status_code == 200


@pytest.mark.parametrize("body,needle", [
    ({"prompt": "x", "n": 0}, "SamplingParams.n=0"),
    ({"prompt": "x", "temperature": -1}, "SamplingParams.temperature=-1"),
    ({"prompt": "x", "top_p": 2}, "SamplingParams.top_p=2"),
    ({"prompt": "x", "max_tokens": 0}, "SamplingParams.max_tokens=0"),
    ({"prompt": "x", "n": "many"}, "invalid request: n:"),
    ({"n": 1}, "invalid request: prompt:"),
    ({"prompt": []}, "prompt is an empty list"),
    ({"prompt": "x", "structured_outputs": {"regex": "(unclosed"}}, "SamplingParams.regex="),
])
def test_invalid_parameters_get_400_with_a_message(client, body, needle):
    r = client.post("/v1/completions", json=body, headers=AUTH)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("route,extra,param", [
    ("completions", {"logit_bias": {"50256": -100}}, "logit_bias"),
    ("completions", {"presence_penalty": 0.5}, "presence_penalty"),
    ("completions", {"frequency_penalty": 1.0}, "frequency_penalty"),
    ("completions", {"echo": True}, "echo"),
    ("completions", {"suffix": "}"}, "suffix"),
    ("completions", {"best_of": 3}, "best_of"),
    ("completions", {"guided_regex": "a+"}, "guided_regex"),  # vLLM's older spelling: unknown here
    ("completions", {"stream_options": {"include_usage": True}}, "stream_options"),  # without stream
    ("completions", {"structured_outputs": {"json": {"type": "object"}}}, "structured_outputs.json"),
    ("chat/completions", {"response_format": {"type": "json_object"}}, "response_format"),
    ("chat/completions", {"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ("chat/completions", {"tool_choice": "required"}, "tool_choice"),
    ("chat/completions", {"top_logprobs": 2}, "top_logprobs"),  # without logprobs
    ("chat/completions", {"stream": True, "stream_options": {"continuous_usage_stats": True}},
     "stream_options.continuous_usage_stats"),
])
def test_fields_that_would_be_ignored_are_refused_naming_the_field(client, route, extra, param):
    body = (CHAT if route.startswith("chat") else {"prompt": "x"}) | extra
    r = client.post(f"/v1/{route}", json=body, headers=AUTH)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error" and param in error["message"]


def test_fields_at_their_no_op_values_are_accepted(client):
    neutral = {"presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "tools": [], "tool_choice": "none",
               "response_format": {"type": "text"}, "user": "u-1", "parallel_tool_calls": True}
    assert client.post("/v1/chat/completions", json=CHAT | neutral, headers=AUTH).status_code == 200
    assert client.post("/v1/completions", json={"prompt": "x", "echo": False, "best_of": 2, "n": 2},
                       headers=AUTH).status_code == 200


def test_structured_outputs_and_logprobs_reach_the_sampling_params(client, backend):
    client.post("/v1/completions", json={"prompt": "x", "structured_outputs": {"regex": "( [0-4]){2}"},
                                         "logprobs": 2}, headers=AUTH)
    assert (backend.params.regex, backend.params.logprobs) == ("( [0-4]){2}", 2)
    client.post("/v1/chat/completions", json=CHAT | {"structured_outputs": {"choice": ["yes", "n.o"]},
                                                     "logprobs": True}, headers=AUTH)
    assert (backend.params.regex, backend.params.logprobs) == (r"(yes|n\.o)", 0)
    client.post("/v1/chat/completions", json=CHAT | {"logprobs": True, "top_logprobs": 3}, headers=AUTH)
    assert backend.params.logprobs == 3
    client.post("/v1/chat/completions", json=CHAT, headers=AUTH)
    assert (backend.params.regex, backend.params.logprobs) == (None, None)


def test_chat_content_parts_are_joined_and_other_parts_refused(client):
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}, {"type": "text", "text": "c"}]}]}
    r = client.post("/v1/chat/completions", json=parts, headers=AUTH)
    assert r.json()["choices"][0]["message"]["content"] == "abc"
    image = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}
    r = client.post("/v1/chat/completions", json=image, headers=AUTH)
    assert r.status_code == 400 and "text content parts" in r.json()["error"]["message"]


@pytest.mark.parametrize("route,extra,param,code", [
    ("completions", {"n": 5}, "n", "integer_above_max_value"),
    ("completions", {"prompt": ["a", "b", "c", "d"]}, "prompt", "array_above_max_length"),
    ("completions", {"max_tokens": 101}, "max_tokens", "integer_above_max_value"),  # the model's context is 100
    ("chat/completions", {"max_completion_tokens": 101}, "max_completion_tokens", "integer_above_max_value"),
    ("completions", {"stop": ["a", "b", "c"]}, "stop", "array_above_max_length"),
    ("completions", {"stop": "toolong"}, "stop", "string_above_max_length"),
    ("completions", {"logprobs": 4}, "logprobs", "integer_above_max_value"),
    ("chat/completions", {"logprobs": True, "top_logprobs": 4}, "top_logprobs", "integer_above_max_value"),
    ("chat/completions", {"search": {"k": 5}}, "search.k", "integer_above_max_value"),
    ("chat/completions", {"search": {"verify": 3}}, "search.verify", "integer_above_max_value"),
    ("chat/completions", {"search": {"k_tie": 3}}, "search.k_tie", "integer_above_max_value"),
    ("chat/completions", {"search": {"verify_max_tokens": 101}}, "search.verify_max_tokens", "integer_above_max_value"),
])
def test_each_limit_is_a_400_naming_the_field(client, route, extra, param, code):
    body = (CHAT if route.startswith("chat") else {"prompt": "x"}) | extra
    r = client.post(f"/v1/{route}", json=body, headers=AUTH)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == (param, code) and "limit" in error["message"]


def test_a_body_over_the_limit_is_413_before_it_is_parsed(client):
    big = b'{"prompt": "' + b"x" * 3000 + b'"}'
    r = client.post("/v1/completions", content=big, headers=AUTH | {"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["param"] == "body" and "2000" in r.json()["error"]["message"]

    def chunked():  # no Content-Length: counted as it arrives
        yield b'{"prompt": "'
        for _ in range(30):
            yield b"x" * 100
        yield b'"}'

    r = client.post("/v1/completions", content=chunked(), headers=AUTH | {"Content-Type": "application/json"})
    assert r.status_code == 413
    assert client.post("/v1/completions", json={"prompt": "x" * 100}, headers=AUTH).status_code == 200


def test_500_bodies_do_not_echo_the_exception(client):
    r = client.post("/v1/completions", json={"prompt": "BOOM"}, headers=AUTH)
    assert r.status_code == 500
    error = r.json()["error"]
    assert error["type"] == "server_error" and "incident" in error["message"]
    assert "secret" not in r.text and "/srv" not in r.text and "RuntimeError" not in r.text


def test_unknown_model_gets_404(client):
    r = client.post("/v1/completions", json={"prompt": "x", "model": "gpt-9"}, headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_vllms_continue_final_message_prefills_the_final_assistant_message(client, backend):
    """The openai engine's prefilled chats (scaling's constrained verdicts, TPO's thought marker) send
    vLLM's continue_final_message with add_generation_prompt=false; ratchet serve refused it as an
    unknown field, after a whole run of candidates had been sampled (issue #47)."""
    from common.sampling import PREFILL, is_prefilled

    turns = [{"role": "user", "content": "3+4?"}, {"role": "assistant", "content": "Verdict:"}]
    body = {"messages": turns, "continue_final_message": True, "add_generation_prompt": False}
    r = client.post("/v1/chat/completions", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    assert is_prefilled(backend.prompts[0]) and backend.prompts[0][0] == turns[0]  # only the last one is marked
    r = client.post("/v1/chat/completions", json={"messages": turns}, headers=AUTH)  # a closed turn: not continued
    assert r.status_code == 200 and not any(PREFILL in m for m in backend.prompts[0])
    refused = [({"messages": turns, "continue_final_message": True}, "add_generation_prompt=true"),  # vLLM refuses it too
               ({"messages": turns[:1], "continue_final_message": True, "add_generation_prompt": False},
                "must be the assistant's"),
               ({"messages": turns, "add_generation_prompt": False}, "only with continue_final_message"),
               (body | {"search": {"k": 2}}, "continue_final_message")]
    for request, needle in refused:
        r = client.post("/v1/chat/completions", json=request, headers=AUTH)
        assert r.status_code == 400 and needle in r.json()["error"]["message"], r.text


def test_a_model_answers_to_its_aliases_and_lists_them():
    """A pinned model (`ratchet serve model=pretrained:<name>`) answers to <name>, `pretrained:<name>`
    and its converted directory's name; before, only the directory's hashed name was served."""
    from search.serve.config import ServeConfig, settings_from

    settings = settings_from(ServeConfig(model="pretrained:smollm2-135m-instruct"), env={},
                             checkpoint="/home/u/.ratchet/pretrained/smollm2-135m-instruct-3f9a1c")
    assert settings.served_name == "smollm2-135m-instruct"
    assert settings.aliases == ("pretrained:smollm2-135m-instruct", "smollm2-135m-instruct-3f9a1c")
    named = settings_from(ServeConfig(model="pretrained:smollm2-135m-instruct", model_name="smollm2"), env={},
                          checkpoint="/x/smollm2-135m-instruct-3f9a1c")
    assert (named.served_name, named.aliases) == ("smollm2", ())  # a name given is the only one
    plain = settings_from(ServeConfig(model="models/tpo-arith-seed"), env={})
    assert (plain.served_name, plain.aliases) == ("tpo-arith-seed", ())

    app = TestClient(build_app(EchoBackend(), model_name=settings.served_name, aliases=settings.aliases))
    assert [m["id"] for m in app.get("/v1/models").json()["data"]] == ["smollm2-135m-instruct", *settings.aliases]
    for name in ["smollm2-135m-instruct", *settings.aliases]:
        assert app.post("/v1/completions", json={"prompt": "x", "model": name}).status_code == 200
    r = app.post("/v1/completions", json={"prompt": "x", "model": "smollm2"})
    assert r.status_code == 404 and "pretrained:smollm2-135m-instruct" in r.json()["error"]["message"]


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


def _events(response) -> list:
    lines = [line for line in response.text.split("\n") if line]
    assert all(line.startswith("data: ") for line in lines), lines
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:]) for line in lines]


def test_streams_are_server_sent_openai_chunks_with_indexes_and_usage(client):
    r = client.post("/v1/completions", headers=AUTH, json={"prompt": ["ab", "cd"], "n": 2, "max_tokens": 4,
                                                           "stream": True, "stream_options": {"include_usage": True}})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _events(r)
    assert events[-1] == "[DONE]"
    chunks, usage = events[:-2], events[-2]
    assert {(c["choices"][0]["index"], c["choices"][0]["text"]) for c in chunks} == {
        (0, "ab"), (1, "ab"), (2, "cd"), (3, "cd")}
    assert all(c["object"] == "text_completion" and c["usage"] is None for c in chunks)
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 6, "completion_tokens": 16,
                                                         "total_tokens": 22}
    chat = _events(client.post("/v1/chat/completions", headers=AUTH, json=CHAT | {"n": 2, "stream": True}))
    assert chat[-1] == "[DONE]" and all("usage" not in c for c in chat[:-1])
    deltas = [(c["choices"][0]["index"], c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) for c in chat[:-1]]
    assert deltas == [(0, {"role": "assistant", "content": "hi"}, None), (0, {}, "length"),
                      (1, {"role": "assistant", "content": "hi"}, None), (1, {}, "length")]


def test_a_stream_that_fails_before_its_first_chunk_is_an_http_error_and_later_an_error_event(client):
    r = client.post("/v1/completions", json={"prompt": ["LONG", "ok"], "stream": True}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    events = _events(client.post("/v1/completions", json={"prompt": ["ok", "BOOM"], "stream": True}, headers=AUTH))
    assert events[0]["choices"][0]["text"] == "ok"
    assert events[-1]["error"]["type"] == "server_error" and "secret" not in json.dumps(events)


def test_thinking_model_answers_with_reasoning_content_switchable():
    from search.serve.protocol import ReasoningSplit

    class Thinker(EchoBackend):
        context_length = None  # no cap: chat's default max_tokens (256) stands
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
