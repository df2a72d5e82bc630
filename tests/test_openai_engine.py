"""The openai engine against real servers (issue #47): what `probe_server` hears from a real
`ratchet serve` and from a plain OpenAI-style server, the dry run's engine checks (one line on
stderr, exit 2, before anything starts), and scaling and SOAR sampling through
`sampler.engine=openai` from a real `ratchet serve` on the test session's Ray."""

from __future__ import annotations

import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from test_cli import one_line_error, run_cli

from common.config import load_config
from common.ports import free_port
from evolution.config import SoarConfig
from jobs import runner, serving
from ray_jobs import scaling, serve, soar, tpo
from scaling.config import ScalingConfig
from search.engines.openai_engine import EXTENSIONS, probe_server
from search.pool import PoolConfig

ARITH = "models/scaling-arith-seed"  # served as "scaling-arith-seed" (its directory's name)
SOAR_SEED = "models/soar-demo-seed"
SOAR_TASKS = ["3c9b0459", "6150a2bd"]  # demo tasks with 3x3 grids: short prompts
CHAT_VERDICTS = ["prompt_style=full", "verdict=constrained"]  # structured_outputs and continue_final_message


@pytest.fixture(scope="module")
def served(ray_local):
    """served(path): `ratchet serve model=path` (parsed as the command line is) on the session's
    Ray, on one port; another path replaces the application. Returns the base URL."""
    from ray import serve as ray_serve

    port, current = free_port(), {}

    def serve_model(path: str) -> str:
        if current.get("path") != path:
            if current:
                ray_serve.delete(serving.APP_NAME)
            settings, _, _ = serve.parse([f"model={path}", "sampler.num_cpus_per_actor=0.5",
                                          "sampler.engine_kwargs={num_threads: 1}"])
            current.update(path=path, url=serving.run(settings, port=port, blocking=False))
        return current["url"]

    yield serve_model
    ray_serve.shutdown()


@pytest.fixture(scope="module")
def plain_server():
    """A stand-in for OpenAI's own API: it serves 'gpt-x' and answers vLLM's extensions as OpenAI
    does (400, 'Unrecognized request argument supplied: <field>')."""
    known = {"model", "messages", "prompt", "max_tokens", "temperature", "top_p", "n", "stop", "seed", "logprobs",
             "top_logprobs", "stream"}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server's name)
            self._answer(200, {"object": "list", "data": [{"id": "gpt-x", "object": "model", "owned_by": "x"}]})

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            unknown = [k for k in body if k not in known]
            if unknown:
                self._answer(400, {"error": {"message": f"Unrecognized request argument supplied: {unknown[0]}",
                                             "type": "invalid_request_error", "param": None, "code": None}})
                return
            self._answer(200, {"id": "x", "object": "text_completion", "created": 0, "model": "gpt-x",
                               "choices": [{"index": 0, "text": "1", "finish_reason": "length", "logprobs": None}]})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


def openai_sampler(url: str, **kwargs) -> str:
    return "sampler.engine_kwargs={" + ", ".join(f"{k}: '{v}'" for k, v in {"base_url": url, **kwargs}.items()) + "}"


# --- what a server serves and takes --------------------------------------------------------------
def test_ratchet_serve_takes_every_extension_the_openai_engine_sends(served):
    url = served(ARITH)
    for chat in (True, False):
        probe = probe_server(url, model="scaling-arith-seed", needs=EXTENSIONS, chat=chat)
        assert (probe.models, probe.refused) == (["scaling-arith-seed"], {})


def test_a_plain_openai_server_is_heard_refusing_vllms_extensions(plain_server):
    probe = probe_server(plain_server, needs=EXTENSIONS, chat=True)
    assert probe.models == ["gpt-x"]
    assert probe.refused == {e: f"400: Unrecognized request argument supplied: {e}" for e in EXTENSIONS}


def test_the_configured_served_name_is_sent_whatever_checkpoint_the_pool_loads(served):
    """SOAR's pool loads its local checkpoint into every engine; the engine sends engine_kwargs.model.
    A checkpoint it did not start with (a version the job trained) is refused: the server lacks it."""
    from common.sampling import SamplingParams
    from search.engines.openai_engine import OpenAIEngine

    engine = OpenAIEngine(served(ARITH), model="scaling-arith-seed")
    engine.load(str(Path(ARITH).resolve()), version="v0")  # the local copy
    [[completion]] = engine.generate(["Q: 1+1\nA:"], SamplingParams(max_tokens=2, temperature=0))
    assert engine.version == "v0" and completion.completion_tokens >= 1  # not a 404 for the path
    with pytest.raises(ValueError, match="cannot switch to v1 .* serves 'scaling-arith-seed'"):
        engine.load("/runs/x/checkpoints/it1", version="v1")


def test_a_model_the_server_lacks_is_the_requests_fault_not_retried(served):
    """A 404 is the same on every actor and try: a ValueError (the pool's caller's mistake), where it
    was an engine failure retried on four actors, whose advice was to raise max_request_retries."""
    from common.sampling import SamplingParams
    from search.engines.openai_engine import OpenAIEngine

    engine = OpenAIEngine(served(ARITH), model="models/scaling-arith-seed")
    with pytest.raises(ValueError, match=r"rejected the request \(404\): the model 'models/scaling-arith-seed' "
                                         "does not exist; this server serves 'scaling-arith-seed'"):
        engine.generate(["Q: 1+1\nA:"], SamplingParams(max_tokens=2))


# --- the dry run refuses what cannot start: one line, exit 2 ---------------------------------------
@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm imports in this interpreter")
@pytest.mark.parametrize("job, config, prog", [
    (scaling, "configs/scaling-smollm-vllm.yaml", "python -m ray_jobs.scaling"),
    (soar, "configs/soar-smollm-vllm.yaml", "python -m ray_jobs.soar"),
])
def test_vllm_from_an_interpreter_without_it_is_refused_naming_the_one_with_it(job, config, prog, capsys):
    """The run used to start, and four actors died in C++ stack dumps (issue #47)."""
    code, _, err = run_cli(job, ["--config", config, "--dry-run"], capsys)
    assert ("sampler.engine=vllm: the vllm package is not installed in this interpreter" in
            one_line_error(code, err, prog))
    assert f".venv-vllm/bin/python -m {job.__name__}" in err and "make setup-vllm" in err


def test_ratchet_serve_refuses_an_engine_it_cannot_import(capsys):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm imports in this interpreter")
    code, _, err = run_cli(serve.parse, [f"model={ARITH}", "sampler.engine=vllm", "--dry-run"], capsys)
    assert ".venv-vllm/bin/python -m ray_jobs.serve" in one_line_error(code, err, "ratchet serve")


@pytest.mark.parametrize("job, argv, message", [
    (scaling, ["--config", "configs/scaling-demo.yaml", "sampler.engine=openai", "sampler.engine_kwargs={}"],
     "sampler.engine_kwargs.base_url is missing: the openai engine needs it; set "
     "sampler.engine_kwargs.base_url=http://HOST:PORT/v1"),
    (tpo, ["--config", "configs/tpo-demo.yaml", "sampler.engine=openai", "sampler.engine_kwargs={}"],
     "sampler.engine=openai: TPO samples the checkpoints its DPO trains, which a server does not serve"),
    (soar, ["--config", "configs/soar-demo.yaml", "sampler.engine=openai",
            "sampler.engine_kwargs={base_url: 'http://127.0.0.1:9/v1'}"],
     "sampler.engine_kwargs.model is missing: with sampler.engine=openai SOAR samples the server's model"),
    (soar, ["--config", "configs/soar-demo.yaml", "sampler.engine=openai", "controls.seed_only=false",
            "mix.enabled=false", "iterations=2", "sampler.engine_kwargs={base_url: 'http://127.0.0.1:9/v1', model: m}"],
     "sampler.engine=openai samples only what the server serves, but iterations>1 samples models this job trains"),
])
def test_an_openai_sampler_that_cannot_work_is_refused_at_the_dry_run(job, argv, message, capsys):
    code, _, err = run_cli(job, [*argv, "--dry-run"], capsys)
    assert message in one_line_error(code, err, f"python -m {job.__name__}")


def test_an_endpoint_nobody_answers_is_refused_at_the_dry_run(capsys):
    url = f"http://127.0.0.1:{free_port()}/v1"
    code, _, err = run_cli(scaling, ["--config", "configs/scaling-demo.yaml", "sampler.engine=openai",
                                     openai_sampler(url), "--dry-run"], capsys)
    assert (f"sampler.engine_kwargs.base_url='{url}': no server answers there (ConnectError"
            in one_line_error(code, err, "python -m ray_jobs.scaling"))
    assert err.rstrip().endswith("start the server (ratchet serve model=..., vllm serve ...) or correct the URL")


def test_a_model_the_server_does_not_serve_is_refused_naming_the_served_ones(served, capsys):
    """model=pretrained:... was sent as the hashed directory's path, a 404 from every request."""
    url = served(ARITH)
    base = ["--config", "configs/scaling-demo.yaml", "sampler.engine=openai"]
    code, _, err = run_cli(scaling, [*base, openai_sampler(url), "model=pretrained:smollm2-135m-instruct",
                                     "--dry-run"], capsys)
    assert (f"model='pretrained:smollm2-135m-instruct': the server at {url} does not serve it; it serves "
            "['scaling-arith-seed']: set model to one of them" in one_line_error(code, err, "python -m ray_jobs.scaling"))
    code, _, err = run_cli(scaling, [*base, openai_sampler(url, model="smollm2"), "--dry-run"], capsys)
    assert "sampler.engine_kwargs.model='smollm2': the server at" in one_line_error(code, err,
                                                                                   "python -m ray_jobs.scaling")
    code, out, _ = run_cli(scaling, [*base, openai_sampler(url), "model=scaling-arith-seed", *CHAT_VERDICTS,
                                     "--dry-run"], capsys)
    assert code == 0 and "nothing started (--dry-run)" in out


def test_an_extension_the_server_refuses_is_refused_before_sampling(plain_server, capsys):
    """verdict=constrained sends vLLM's extensions; a server without them used to fail the run
    after every candidate had been sampled."""
    code, _, err = run_cli(scaling, ["--config", "configs/scaling-demo.yaml", "sampler.engine=openai", "model=gpt-x",
                                     openai_sampler(plain_server), *CHAT_VERDICTS, "--dry-run"], capsys)
    assert ("the server refused vLLM's structured_outputs extension (400: Unrecognized request argument supplied: "
            "structured_outputs), which verdict=constrained sends (the verdict under a regex); serve the model with "
            "ratchet serve or vllm serve (both take it), or set verdict=parsed"
            in one_line_error(code, err, "python -m ray_jobs.scaling"))
    code, out, _ = run_cli(scaling, ["--config", "configs/scaling-demo.yaml", "sampler.engine=openai", "model=gpt-x",
                                     openai_sampler(plain_server), "verdict=parsed", "--dry-run"], capsys)
    assert code == 0 and "nothing started (--dry-run)" in out  # free-text verdicts need no extension


# --- the workloads through a real ratchet serve ---------------------------------------------------
def test_scaling_samples_and_verifies_through_ratchet_serve(served, store, experiment_name, tmp_path):
    """Chat prompts and constrained verdicts (structured_outputs + continue_final_message) through
    `sampler.engine=openai`: ratchet serve refused continue_final_message once every candidate
    had been sampled."""
    cfg = ScalingConfig(
        experiment=experiment_name, runs_dir=str(tmp_path), questions=2, model="scaling-arith-seed",
        sampler=PoolConfig(engine="openai", engine_kwargs={"base_url": served(ARITH)}, num_cpus_per_actor=0.25),
        prompt_style="full", verdict="constrained", k_inf=2, k_verif=2, k_tie=1, temperature=1.0, max_tokens=12,
        verify_max_tokens=8, batch_questions=2,
    )
    cfg.curves.seeds, cfg.curves.bootstrap = 2, 20
    summary = scaling.run(cfg)
    assert summary["model"] == "scaling-arith-seed"
    assert summary["unparsable"]["verdicts"] == 0  # every verdict came back under the regex
    candidates = [json.loads(line) for line in (tmp_path / experiment_name / "candidates.jsonl").read_text().splitlines()]
    assert len(candidates) == 2 * 2
    assert store.experiments.get(experiment_name).status == "done"


def test_scaling_in_process_samples_through_ratchet_serve(served, store, experiment_name, tmp_path):
    """in_process=true built the engine with checkpoint= in its constructor, which the openai
    engine does not take (TypeError); it is built as the pool's actors build it, then loaded."""
    cfg = ScalingConfig(
        experiment=experiment_name, runs_dir=str(tmp_path), questions=2, model="scaling-arith-seed",
        sampler=PoolConfig(engine="openai", engine_kwargs={"base_url": served(ARITH)}), in_process=True,
        prompt_style="compact", verdict="parsed", k_inf=2, k_verif=1, k_tie=0, temperature=1.0, max_tokens=8,
        verify_max_tokens=4, batch_questions=2,
    )
    cfg.curves.seeds, cfg.curves.bootstrap = 2, 20
    summary = scaling.run(cfg)
    assert summary["model"] == "scaling-arith-seed"
    assert store.experiments.get(experiment_name).status == "done"


def test_soar_searches_through_ratchet_serve_by_the_served_name(served, store, experiment_name, tmp_path):
    """SOAR sent its local checkpoint path as the model name (a 404); it sends
    sampler.engine_kwargs.model, and model.checkpoint stays its local copy."""
    url = served(SOAR_SEED)
    overrides = [
        f"experiment={experiment_name}", f"runs_dir={tmp_path}", f"model.checkpoint={SOAR_SEED}",
        f"tasks.ids=[{','.join(SOAR_TASKS)}]", "tasks.heldout_ids=[]", "search.samples_per_task=4",
        "search.refinements_per_task=2", "search.batch=4", "search.max_tokens=32", "curve_budgets=[1,4]",
        "render_tasks=0", "controls.measure_models=false", "controls.random_prior=false", "controls.seed_only=false",
        "sampler.engine=openai", openai_sampler(url, model=Path(SOAR_SEED).name), "sampler.num_cpus_per_actor=0.25",
    ]
    summary = runner.execute(soar.JOB, load_config("configs/soar-demo.yaml", SoarConfig, overrides))
    [entry] = summary["iterations"]
    assert entry["programs"] == len(SOAR_TASKS) * (4 + 2) and entry["model_version"] == "v0"
    assert store.experiments.get(experiment_name).status == "done"
