"""Engines: the sampling contract, the transformers engine on tiny models, the openai engine's
retries (on a mock transport; tests/test_serve_service.py runs it against the real service). The vLLM
engine's tests are in tests/test_vllm_*.py."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from _models import GREEDY, build_models, expected

from common.sampling import ContextLengthError, SamplingParams, render_prompt, truncate_at_stop
from search.engines import ENGINES, make_engine
from search.engines.openai_engine import OpenAIEngine

PROMPTS = ["map 3 1 4 =>", "map 1 2 3 4 5 6 =>", "map 8 =>", "map 0 9 =>"]


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    return build_models(tmp_path_factory)


@pytest.fixture(scope="module")
def engine(models):
    return make_engine("transformers", checkpoint=models["trained"], version="v0", num_threads=1)


# --- the contract -----------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("n", 0), ("temperature", -0.1), ("top_p", 0.0), ("top_p", 1.5), ("top_k", -2),
    ("min_p", 1.5), ("max_tokens", 0), ("stop", [""]), ("seed", 1.5),
])
def test_sampling_params_reject_invalid_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=f"SamplingParams.{field}="):
        SamplingParams(**{field: value})


def test_sampling_params_normalise_vllm_spellings_and_round_trip():
    p = SamplingParams(top_k=-1, stop="\n")
    assert p.top_k == 0 and p.stop == ("\n",)
    assert SamplingParams.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    with pytest.raises(ValueError, match="unknown sampling parameter"):
        SamplingParams.from_dict({"best_of": 2})


def test_unknown_engine_lists_the_known_ones():
    with pytest.raises(ValueError, match="openai.*transformers.*vllm"):
        make_engine("tgi")
    assert set(ENGINES) == {"transformers", "vllm", "openai"}


def test_chat_prompts_use_the_template_or_a_plain_transcript(engine):
    messages = [{"role": "user", "content": "map 1 =>"}]
    assert render_prompt(engine.tokenizer, messages) == "<|user|>\nmap 1 =>\n<|assistant|>\n"

    class NoTemplate:
        chat_template = None

    assert render_prompt(NoTemplate(), messages) == "user: map 1 =>\nassistant:"
    with pytest.raises(ValueError, match="string or a list"):
        render_prompt(NoTemplate(), [{"role": "user"}])


def test_truncate_at_stop_cuts_at_the_earliest_stop_string():
    assert truncate_at_stop("a1b2c", ["2", "1"]) == ("a", True)
    assert truncate_at_stop("abc", ["x"]) == ("abc", False)


# --- transformers ---------------------------------------------------------------------

def test_batched_greedy_matches_one_by_one_and_the_learned_answers(engine):
    batched = engine.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=8, n=2))
    alone = [engine.generate([p], GREEDY)[0][0] for p in PROMPTS]
    assert [[c.text for c in row] for row in batched] == [[c.text] * 2 for c in alone]
    assert [c.text for c in alone] == [expected(p) for p in PROMPTS]
    for p, row in zip(PROMPTS, batched, strict=True):
        c = row[0]
        assert c.finish_reason == "stop" and c.model_version == "v0"
        assert c.prompt_tokens == len(engine.tokenizer(p)["input_ids"])
        assert c.completion_tokens == 3  # space, digit, EOS


def test_sampling_is_reproducible_with_a_seed(models):
    engine = make_engine("transformers", checkpoint=models["untrained"], num_threads=1)
    params = SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=7)
    first = engine.generate(PROMPTS[:2], params)
    assert engine.generate(PROMPTS[:2], params) == first
    other = engine.generate(PROMPTS[:2], SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=8))
    assert [[c.text for c in r] for r in other] != [[c.text for c in r] for r in first]
    assert all(len(row) == 3 for row in first)


def test_length_and_stop_strings_set_the_finish_reason(models):
    engine = make_engine("transformers", checkpoint=models["untrained"], num_threads=1)
    rows = engine.generate(PROMPTS, SamplingParams(n=4, temperature=1.0, max_tokens=6, seed=0))
    full = [c for row in rows for c in row if c.finish_reason == "length"]
    assert full and all(c.completion_tokens == 6 for c in full)
    # Stop at the first character each sample produced: always found, then excluded from the text.
    stop = sorted({c.text[0] for c in full})
    stopped = engine.generate(PROMPTS, SamplingParams(n=4, temperature=1.0, max_tokens=6, seed=0, stop=stop))
    for row, srow in zip(rows, stopped, strict=True):
        for c, s in zip(row, srow, strict=True):
            if c.finish_reason == "length":
                assert s.finish_reason == "stop" and not any(x in s.text for x in stop)
                assert c.text.startswith(s.text) and s.completion_tokens <= c.completion_tokens


def test_chat_prompts_generate_with_the_template(engine):
    rows = engine.generate([[{"role": "user", "content": "map 1 =>"}]], SamplingParams(n=2, max_tokens=4, seed=0))
    assert len(rows) == 1 and len(rows[0]) == 2
    expected_ids = engine.tokenizer("<|user|>\nmap 1 =>\n<|assistant|>\n", add_special_tokens=False)["input_ids"]
    assert rows[0][0].prompt_tokens == len(expected_ids)


def test_a_prompt_longer_than_the_context_fails_with_a_clear_error(engine):
    with pytest.raises(ContextLengthError, match="prompt 1 has .* maximum context length of 2048"):
        engine.generate(["map 1 =>", "map " * 1000], GREEDY)
    assert engine.generate(["map 1 =>"], GREEDY)[0][0].text == expected("map 1 =>")


def test_load_switches_checkpoint_and_version_tag(models):
    engine = make_engine("transformers", checkpoint=models["untrained"], version="v0", num_threads=1)
    engine.load(models["trained"], version="v1")
    c = engine.generate(["map 5 =>"], GREEDY)[0][0]
    assert (c.text, c.model_version) == (expected("map 5 =>"), "v1")
    engine.load(models["trained"])  # without a version: tagged with the checkpoint's dir name
    assert engine.version == models["trained"].rstrip("/").rsplit("/", 1)[-1]
    with pytest.raises(FileNotFoundError, match="not a directory"):
        engine.load("/nonexistent/ckpt")


def test_in_memory_weights_switch_the_model_without_a_checkpoint(models):
    """load_weights: the trained model's state dict into an engine serving the untrained one
    gives the trained answers (as load(checkpoint) would); bad weights change nothing."""
    from safetensors.torch import load_file

    engine = make_engine("transformers", checkpoint=models["untrained"], version="v0", num_threads=1)
    before = engine.generate(["map 5 =>"], GREEDY)[0][0].text
    trained = {}
    for f in sorted(Path(models["trained"]).glob("*.safetensors")):
        trained |= load_file(str(f))
    wrong = {k: v[:1] for k, v in trained.items()}
    with pytest.raises(ValueError, match="wrong shape.*Still serving 'v0'"):
        engine.load_weights(wrong, version="bad")
    assert engine.version == "v0" and engine.generate(["map 5 =>"], GREEDY)[0][0].text == before
    engine.load_weights(trained, version="v1", checkpoint=models["trained"])
    c = engine.generate(["map 5 =>"], GREEDY)[0][0]
    assert (c.text, c.model_version) == (expected("map 5 =>"), "v1") and c.text != before


# --- openai (retries and usage on a mock transport) ----------------------------------

def _completion_body(n: int, prompts: int) -> dict:
    return {
        "id": "x", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{"index": i, "text": f"t{i}", "finish_reason": "length", "logprobs": None}
                    for i in range(n * prompts)],
        "usage": {"prompt_tokens": 10 * prompts, "completion_tokens": 7 * n * prompts, "total_tokens": 0},
    }


def _mock_engine(script: list, **kwargs) -> tuple[OpenAIEngine, list[dict]]:
    """An engine whose server answers with the scripted statuses (or (status, headers)), then
    successes. Errors say Retry-After 1 ms unless scripted otherwise, so the SDK's retries are quick."""
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        status, headers = (script.pop(0) if script else 200), {"retry-after-ms": "1"}
        if isinstance(status, tuple):
            status, headers = status
        if status == 200:
            return httpx.Response(200, json=_completion_body(body["n"], len(body["prompt"])))
        message = "maximum context length exceeded" if status == 400 else "busy"
        return httpx.Response(status, headers=headers, json={"error": {"message": message, "type": "x"}})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    engine = OpenAIEngine("http://mock/v1", model="m", http_client=client, **kwargs)
    return engine, seen


def test_openai_engine_retries_429_and_5xx_then_returns_counted_results():
    engine, seen = _mock_engine([429, 503, 500])
    rows = engine.generate(["a", "b"], SamplingParams(n=2, max_tokens=7, top_k=5, seed=3))
    assert len(seen) == 4 and seen[-1]["n"] == 2 and seen[-1]["top_k"] == 5 and seen[-1]["seed"] == 3
    assert [[c.text for c in row] for row in rows] == [["t0", "t1"], ["t2", "t3"]]
    assert all(c.completion_tokens == 7 and c.prompt_tokens == 10 and c.model_version == "m"
               for row in rows for c in row)


def test_openai_engine_gives_up_after_max_retries():
    import openai

    engine, seen = _mock_engine([500, 500, 500], max_retries=2)
    with pytest.raises(openai.InternalServerError):
        engine.generate(["a"], SamplingParams())
    assert len(seen) == 3


def test_openai_engine_retries_follow_the_servers_retry_headers():
    """The SDK's retries (not a hand-written loop): a Retry-After beyond its two-minute cap,
    or x-should-retry: false, means the server asks not to be retried now."""
    import openai

    engine, seen = _mock_engine([(429, {"retry-after": "3600"})])
    with pytest.raises(openai.RateLimitError):
        engine.generate(["a"], SamplingParams())
    assert len(seen) == 1
    engine, seen = _mock_engine([(503, {"x-should-retry": "false"})])
    with pytest.raises(openai.InternalServerError):
        engine.generate(["a"], SamplingParams())
    assert len(seen) == 1
    engine, seen = _mock_engine([(409, {"retry-after-ms": "1"})])  # lock timeouts are retried too
    assert engine.generate(["a"], SamplingParams())[0][0].text == "t0" and len(seen) == 2


def test_openai_engine_maps_context_errors_and_does_not_retry_400():
    engine, seen = _mock_engine([400])
    with pytest.raises(ContextLengthError, match="maximum context length"):
        engine.generate(["a"], SamplingParams())
    assert len(seen) == 1


def test_openai_engine_batches_text_prompts_per_request():
    engine, seen = _mock_engine([], prompts_per_request=2)
    rows = engine.generate(["a", "b", "c"], SamplingParams(n=1))
    assert [len(b["prompt"]) for b in seen] == [2, 1] and len(rows) == 3


def test_sampling_params_regex_must_compile():
    with pytest.raises(ValueError, match="SamplingParams.regex="):
        SamplingParams(regex="(unclosed")
    assert SamplingParams(regex="( [5-9]){1,3}").regex == "( [5-9]){1,3}"


def test_regex_constrains_every_transformers_sample(engine):
    """Structured output as vLLM does it: every completion matches, and ends when it must."""
    import regex

    pattern = "( [0-4]){2,3}"  # the trained model answers one digit, here 9 and 6
    params = SamplingParams(n=16, temperature=1.0, max_tokens=12, seed=0, regex=pattern)
    rows = engine.generate(["map 3 1 4 =>", "map 0 2 =>"], params)
    texts = [c.text for row in rows for c in row]
    assert all(regex.fullmatch(pattern, t) for t in texts), texts
    assert all(c.finish_reason == "stop" for row in rows for c in row)
    # unconstrained, the trained model answers " 9": the mask did the work
    free = engine.generate(["map 3 1 4 =>"], SamplingParams(n=16, temperature=1.0, max_tokens=12, seed=0))
    assert not all(regex.fullmatch(pattern, c.text) for c in free[0])


def test_openai_engine_sends_the_regex_as_vllm_structured_outputs():
    args = OpenAIEngine(base_url="http://127.0.0.1:1/v1", model="m")._request_args(SamplingParams(regex="a+"))
    assert args["extra_body"] == {"structured_outputs": {"regex": "a+"}}


def test_logprobs_are_the_models_own_for_each_completion_token(engine):
    """Raw log-probabilities (before temperature and masks, as vLLM's default): one entry per
    completion token, the sampled token's plus the k most likely, on both generate paths."""
    import math

    greedy = engine.generate(PROMPTS[:2], SamplingParams(temperature=0, max_tokens=8, logprobs=3))
    shared = engine.generate(PROMPTS[:1], SamplingParams(n=2, temperature=0.01, max_tokens=8, seed=0, logprobs=3))
    for c in [row[0] for row in greedy] + shared[0]:
        assert len(c.logprobs) == c.completion_tokens
        assert "".join(e["token"] for e in c.logprobs).startswith(c.text)
        for e in c.logprobs:
            assert e["logprob"] <= 0 and len(e["top_logprobs"]) == 3
            assert e["top_logprobs"][0]["token"] == e["token"]  # greedy: the sampled token is the most likely
            assert e["bytes"] == list(e["token"].encode())
            probs = [math.exp(t["logprob"]) for t in e["top_logprobs"]]
            assert probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-5
    # raw logprobs do not depend on the temperature: the shared-prefill samples score as greedy does
    assert [e["token"] for e in shared[0][0].logprobs] == [e["token"] for e in greedy[0][0].logprobs]
    assert [e["logprob"] for e in shared[0][0].logprobs] == pytest.approx([e["logprob"] for e in greedy[0][0].logprobs],
                                                                          abs=1e-4)
    regex_lp = engine.generate(PROMPTS[:1], SamplingParams(temperature=0, max_tokens=8, logprobs=0, regex="( [0-4])"))
    assert regex_lp[0][0].logprobs[1]["top_logprobs"] == []  # 0: the sampled token's alone
    assert engine.generate(PROMPTS[:1], GREEDY)[0][0].logprobs is None  # off unless asked for


def test_samples_sharing_a_prefill_continue_the_prompt_correctly(engine):
    """n > 1 samples reuse one prompt prefill; near-zero temperature they must equal greedy."""
    cold = SamplingParams(n=3, temperature=0.01, max_tokens=8, seed=0)
    rows = engine.generate(PROMPTS, cold)
    assert [[c.text for c in row] for row in rows] == [[expected(p)] * 3 for p in PROMPTS]
    assert all(c.prompt_tokens == rows[i][0].prompt_tokens for i, row in enumerate(rows) for c in row)


def test_openai_engine_closes_its_client_before_each_blocking_calls_loop_ends(caplog):
    """generate() runs each call in a new event loop; a client left open past its loop was
    closed later from another loop ('Task exception was never retrieved: Event loop is closed'
    in every actor log that used the openai engine, and its sockets held until then)."""
    import gc
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers: the client's pool holds the connection

        def do_POST(self):  # noqa: N802 (http.server's name)
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            data = json.dumps(_completion_body(body["n"], len(body["prompt"]))).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        engine = OpenAIEngine(f"http://127.0.0.1:{server.server_port}/v1", model="m")
        with caplog.at_level("ERROR", logger="asyncio"):
            for _ in range(3):
                assert engine.generate(["a"], SamplingParams())[0][0].text == "t0"
            gc.collect()
        assert not [r for r in caplog.records if r.name == "asyncio"], [r.getMessage() for r in caplog.records]
    finally:
        server.shutdown()
        server.server_close()
