"""The served search's accuracy, measured as a user gets it: `ratchet serve` with the trained
verifier beside SmolLM2 on vLLM, asked through the official `openai` client.

    .venv-vllm/bin/python scripts/serve_search.py                       # 48 held-out questions, k = 8
    .venv-vllm/bin/python scripts/serve_search.py --seeds 0 1 2         # three sampling seeds, pooled
    .venv-vllm/bin/python scripts/serve_search.py --strategies consistency weighted_best_of_n \
        --search '{"verdict": "reasoned", "verify": 2}' --out serve-search-reasoned   # written checks
    .venv-vllm/bin/python scripts/serve_search.py --questions 8 --strategies none weighted_best_of_n

The questions, prompts, sampling and verdict settings are the scaling config's
(configs/scaling-smollm-verifier.yaml: the 48 questions the adapter never saw), so each strategy's
served accuracy sits beside the offline job's figure on the same questions (docs/sampling.md).
`none` is one plain chat completion per question. Requests go out `--concurrency` at a time
(the pool batches them); each one's wall time is recorded. Writes runs/<--out>/summary.json and
prints a table: accuracy with a 95% bootstrap interval over questions, each strategy minus
consistency paired by question, and seconds per request.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from common.config import load_config
from drills.demo_real import ratchet_serve
from scaling.config import ScalingConfig
from scaling.curves import bootstrap_ci
from scaling.experiment import load_questions
from verifiers.math_answers import extract_answer, is_equivalent
from verifiers.selfverify import answer_prompt

ROOT = Path(__file__).resolve().parent.parent
STRATEGIES = ("none", "consistency", "verification", "weighted_best_of_n")
NAME = "smollm2"


def serve_overrides(cfg: ScalingConfig) -> list[str]:
    """`ratchet serve` of the config's model, verifier and sampler."""
    kwargs = json.dumps(cfg.sampler.engine_kwargs)
    return [f"model={cfg.model}", f"verifier={cfg.verifier}", f"sampler.engine={cfg.sampler.engine}",
            f"sampler.engine_kwargs={kwargs}", f"sampler.max_inflight_per_actor={cfg.sampler.max_inflight_per_actor}",
            "sampler.num_cpus_per_actor=0.5"]


def search_field(cfg: ScalingConfig, strategy: str, k: int, extra: dict[str, Any]) -> dict[str, Any] | None:
    if strategy == "none":
        return None
    field: dict[str, Any] = {"k": k, "strategy": strategy, "style": cfg.prompt_style, "verdict": cfg.verdict,
                             "verify_temperature": cfg.verify_temperature, "return_candidates": True}
    if strategy == "verification":  # the offline headline's Verification@k: the best score, no tie-break
        field["tie_break"] = False
    return field | (extra if strategy != "consistency" else {})


def ask(client: Any, cfg: ScalingConfig, question: dict[str, str], search: dict[str, Any] | None, seed: int
        ) -> dict[str, Any]:
    started = time.monotonic()
    reply = client.chat.completions.create(
        model=NAME, messages=answer_prompt(question["question"], cfg.prompt_style), temperature=cfg.temperature,
        max_tokens=cfg.max_tokens, seed=seed, extra_body={"search": search} if search else None)
    text = reply.choices[0].message.content or ""
    answer = extract_answer(text)
    return {"id": question["id"], "correct": answer is not None and is_equivalent(answer, question["answer"]),
            "answer": answer, "seconds": time.monotonic() - started,
            "completion_tokens": reply.usage.completion_tokens,
            "candidates": len((reply.model_extra or {}).get("search", {}).get("candidates", [])) or 1}


def bootstrap(values: np.ndarray, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean over questions (the curves' bootstrap)."""
    lo, hi = bootstrap_ci(values[None], resamples, 0.95, np.random.default_rng(seed))
    return float(lo[0]), float(hi[0])


def summarize(results: dict[int, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Per strategy: accuracy pooled over seeds (each question's mean over them), a bootstrap CI over
    questions, each seed's own accuracy, and the paired difference from consistency."""
    seeds = sorted(results)
    correct = {s: np.array([[r["correct"] for r in results[seed][s]] for seed in seeds], float)
               for s in results[seeds[0]]}  # [seeds, questions]
    out: dict[str, Any] = {}
    for strategy, c in correct.items():
        rows = [r for seed in seeds for r in results[seed][strategy]]
        seconds = np.array([r["seconds"] for r in rows])
        entry = {"accuracy": float(c.mean()), "ci": bootstrap(c.mean(0)), "per_seed": c.mean(1).tolist(),
                 "questions": c.shape[1], "seconds_mean": float(seconds.mean()),
                 "seconds_median": float(np.median(seconds)),
                 "completion_tokens_mean": float(np.mean([r["completion_tokens"] for r in rows]))}
        if "consistency" in correct and strategy != "consistency":
            diff = c - correct["consistency"]
            entry["minus_consistency"] = float(diff.mean())
            entry["minus_consistency_ci"] = bootstrap(diff.mean(0))
            entry["minus_consistency_per_seed"] = diff.mean(1).tolist()
        out[strategy] = entry
    return out


def table(summary: dict[str, Any], wall: dict[str, float]) -> str:
    lines = ["| strategy | accuracy [95% CI]; seeds [min, max] | minus consistency (paired); seeds [min, max] | "
             "s/request (mean, median) | tokens/request | wall s |", "|---|---|---|---|---|---|"]
    span = lambda xs: f"[{min(xs):+.3f}, {max(xs):+.3f}]"  # noqa: E731
    for s, e in summary.items():
        diff = (f"{e['minus_consistency']:+.3f} [{e['minus_consistency_ci'][0]:+.3f}, {e['minus_consistency_ci'][1]:+.3f}]"
                f"; seeds {span(e['minus_consistency_per_seed'])}" if "minus_consistency" in e else "")
        lines.append(f"| {s} | {e['accuracy']:.3f} [{e['ci'][0]:.3f}, {e['ci'][1]:.3f}]; seeds "
                     f"[{min(e['per_seed']):.3f}, {max(e['per_seed']):.3f}] | {diff} | "
                     f"{e['seconds_mean']:.1f}, {e['seconds_median']:.1f} | {e['completion_tokens_mean']:.0f} | "
                     f"{wall[s]:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/serve_search.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/scaling-smollm-verifier.yaml")
    ap.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    ap.add_argument("--k", type=int, default=8, help="candidates per search")
    ap.add_argument("--questions", type=int, default=None, help="the first N of the config's questions")
    ap.add_argument("--seeds", type=int, nargs="+", default=None,
                    help="sampling seeds, each a full pass (default: the config's sample_seed)")
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight at once")
    ap.add_argument("--search", type=json.loads, default={},
                    help='more search fields for the strategies that verify, e.g. \'{"verdict": "reasoned", "verify": 2}\'')
    ap.add_argument("--out", default="serve-search", help="runs/<out>/summary.json")
    args = ap.parse_args(argv)
    cfg = load_config(str(ROOT / args.config), ScalingConfig, [])
    questions = load_questions(cfg)[: args.questions]
    seeds = args.seeds or [cfg.sample_seed or 0]
    results: dict[int, dict[str, list[dict[str, Any]]]] = {seed: {} for seed in seeds}
    wall: dict[str, float] = dict.fromkeys(args.strategies, 0.0)
    with ratchet_serve(serve_overrides(cfg), NAME, timeout_s=900, request_timeout_s=3600) as client:
        served = [m.id for m in client.models.list().data]
        print(f"served: {served}", flush=True)
        for seed in seeds:
            for strategy in args.strategies:
                search = search_field(cfg, strategy, args.k, args.search)
                started = time.monotonic()
                with ThreadPoolExecutor(args.concurrency) as pool:
                    rows = list(pool.map(lambda q, s=search, sd=seed: ask(client, cfg, q, s, sd), questions))
                results[seed][strategy] = rows
                took = time.monotonic() - started
                wall[strategy] += took
                print(f"seed {seed} {strategy}: accuracy {np.mean([r['correct'] for r in rows]):.3f} on "
                      f"{len(questions)} questions in {took:.0f} s", flush=True)
    summary = summarize(results)
    out = ROOT / "runs" / args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({"config": args.config, "k": args.k, "seeds": seeds,
                                                  "search": args.search,
                                                  "concurrency": args.concurrency,
                                                  "served": served, "wall_s": wall, "strategies": summary,
                                                  "per_question": results}, indent=2) + "\n")
    print(table(summary, wall))
    print(f"written: {out / 'summary.json'}")
    return 0
