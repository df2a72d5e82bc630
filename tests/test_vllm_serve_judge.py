"""TPO's served judge against a real `vllm serve` (vLLM's CPU build, SmolLM2): the pairwise judge's
regex reaches the server as vLLM's `structured_outputs`, so every verdict is one letter (issue #49).

Runs in the vLLM virtualenv (make test-vllm); skipped where vllm does not import.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import httpx
import pytest

pytest.importorskip("vllm")

from common.ports import free_port  # noqa: E402
from search.engines.openai_engine import OpenAIEngine  # noqa: E402
from verifiers.judges import JudgeItem  # noqa: E402
from verifiers.judges.pairwise import CHOICE_REGEX, PairwiseJudge  # noqa: E402

STARTUP_S = 600  # a cold CPU start compiles kernels: minutes on 2 cores


@pytest.fixture(scope="module")
def served() -> str:
    """`vllm serve` of SmolLM2-135M-Instruct on a free local port; its /v1 URL."""
    from training.pretrained import resolve_checkpoint

    checkpoint, port = resolve_checkpoint("pretrained:smollm2-135m-instruct"), free_port()
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", checkpoint,
           "--served-model-name", "judge", "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", "1024", "--enforce-eager"]
    server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        with httpx.Client(timeout=5) as client:
            for _ in range(STARTUP_S):  # /health answers once the engine is up; the process may also die
                if server.poll() is not None:
                    pytest.fail(f"vllm serve exited {server.returncode}: {server.stderr.read()[-3000:]}")
                try:
                    if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                server_wait(server, 1.0)
            else:
                pytest.fail(f"vllm serve did not answer /health within {STARTUP_S} s")
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def server_wait(server: subprocess.Popen, seconds: float) -> None:
    """Wait for the server process to exit, at most `seconds` (between two /health polls)."""
    try:
        server.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass


def test_a_pairwise_judge_over_vllm_serve_gets_a_letter_for_every_comparison(served):
    engine = OpenAIEngine(served, model="judge")
    judge = PairwiseJudge(engine.agenerate, regex=CHOICE_REGEX, chat=True)
    items = [JudgeItem("What is 2+3?", r, group="g") for r in ("5", "The answer is 6.", "2+3 = 5")]
    verdicts = asyncio.run(judge.score(items))
    assert [(v.ok, v.detail["unparsable"], v.detail["comparisons"]) for v in verdicts] == [(True, 0, 4)] * 3
