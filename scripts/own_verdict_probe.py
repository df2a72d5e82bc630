"""Can the scaling seed learn to verify its own answers? A verifier trained on its own samples.

The scaling demo's self-verifier is at chance. This probe trains it on the distribution the search
shows it: the seed's own candidates (temperature 1.0) on problems the demo never asks, labelled by
the gold answer, as verdict-only rows (`Q: ...\\nA: <candidate>\\nCheck: Verdict: 0|1`), then
measures p(Verdict: 1) on held-out candidates: pooled and within-question AUC (search.scored_pool)
and Verification@16 against Consistency@16 with the curves code, each candidate's k_verif verdicts
drawn from that probability. No Ray, no Redis; on 2 cores a pool of 24,000 candidates takes about
1.5 min and 3,000 training steps about 8 min. docs/results.md (Scaling curves) lists what it measured.

    python scripts/own_verdict_probe.py pool --model models/scaling-arith-seed --questions 3000 --k 8 \\
        --seed 7 --out /tmp/ov/train.jsonl
    python scripts/own_verdict_probe.py pool --model models/scaling-arith-seed --questions 200 --k 16 \\
        --seed 1000 --out /tmp/ov/heldout.jsonl            # seed 1000: the demo's own questions
    python scripts/own_verdict_probe.py train --model models/scaling-arith-seed --pool /tmp/ov/train.jsonl \\
        --out /tmp/ov/verifier --steps 3000 --lr 1e-3 --replay 0.5
    python scripts/own_verdict_probe.py measure --model /tmp/ov/verifier --pool /tmp/ov/heldout.jsonl
    python scripts/own_verdict_probe.py train --model models/scaling-arith-seed --synthetic 32000 \
        --out /tmp/ov/synthetic --steps 3000 --lr 1e-3      # constructed candidates instead
    python scripts/own_verdict_probe.py measure --model /tmp/ov/synthetic --synthetic 1300   # on its training rows

`--replay` adds that share (of the verdict rows) of the seed corpus's own answer rows: without it
the generator forgets how to answer (pass@1 0.37 -> 0.03 after 1,500 steps).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from common.logs import setup_logging  # noqa: E402
from scaling.arith_problems import make_problems, seed_corpus  # noqa: E402
from scaling.curves import CurvesConfig, compute_curves  # noqa: E402
from search.scored_pool import ScoredPool, auc  # noqa: E402
from training.sft import SFTJobConfig, train_sft  # noqa: E402
from verifiers.math_answers import extract_answer, group_answers, is_equivalent  # noqa: E402
from verifiers.selfverify import answer_prompt, verify_prompt  # noqa: E402

VERDICTS = (" Verdict: 0", " Verdict: 1")


def _load(path: str):
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    return tok, AutoModelForCausalLM.from_pretrained(path).eval()


@torch.inference_mode()
def sample_pool(model: str, questions: int, k: int, seed: int, temperature: float = 1.0,
                batch: int = 512) -> list[dict]:
    """k candidates per generated problem (seed `seed`), each with its answer and whether it is right."""
    tok, m = _load(model)
    torch.manual_seed(seed)
    problems = make_problems(questions, seed=seed)
    prompts = [answer_prompt(p["question"], "compact") for p in problems for _ in range(k)]
    texts: list[str] = []
    for i in range(0, len(prompts), batch):
        enc = tok(prompts[i:i + batch], return_tensors="pt", padding=True)
        out = m.generate(**enc, do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                         max_new_tokens=48, pad_token_id=tok.pad_token_id)
        texts += tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    rows = []
    for j, text in enumerate(texts):
        p = problems[j // k]
        answer = extract_answer(text)
        rows.append({"qid": p["id"], "question": p["question"], "gold": p["answer"], "candidate": text.strip(),
                     "answer": answer, "correct": answer is not None and is_equivalent(answer, p["answer"])})
    return rows


def balanced(pool: list[dict], seed: int = 0) -> list[dict]:
    """As many right as wrong candidates of each question (questions with only one kind dropped),
    so that which question it is tells nothing about the verdict: only the candidate does.
    Not scaling/verifier_adapter.py's `balanced`, which keeps one row of a one-kind question and
    groups by question text (this probe's pools by generated id)."""
    rng = random.Random(seed)
    by_question: dict[str, tuple[list, list]] = {}
    for r in pool:
        by_question.setdefault(r["qid"], ([], []))[int(r["correct"])].append(r)
    out = []
    for wrong, right in by_question.values():
        n = min(len(wrong), len(right))
        out += rng.sample(wrong, n) + rng.sample(right, n)
    return out


def verdict_rows(pool: list[dict], replay: float, seed: int = 0) -> list[dict[str, str]]:
    """Verdict-only rows on the pool's candidates, plus `replay` x as many seed-corpus answer rows.
    The seed's own format (compact prompt, no chat template, " Verdict: 0|1"), not the chat-templated,
    prefilled one of scaling/verifier_adapter.py's `verdict_rows` for a pretrained model."""
    rows = [{"prompt": verify_prompt(r["question"], r["candidate"], "compact"),
             "completion": VERDICTS[int(r["correct"])]} for r in pool]
    if replay:
        answers = [r for r in seed_corpus(n=int(4 * replay * len(rows)) + 100, seed=seed + 1)
                   if r["prompt"].endswith("\nA:")]
        rows += answers[:int(replay * len(rows))]
    random.Random(seed).shuffle(rows)
    return rows


@torch.inference_mode()
def p_verdict_one(model: str, pool: list[dict], batch: int = 256) -> np.ndarray:
    """p(" Verdict: 1") / (p(" Verdict: 0") + p(" Verdict: 1")) for each candidate's check prompt."""
    tok, m = _load(model)
    prompts = [verify_prompt(r["question"], r["candidate"], "compact") for r in pool]
    logp = np.zeros((len(prompts), 2))
    for i in range(0, len(prompts), batch):
        chunk = prompts[i:i + batch]
        n_prompt = [len(tok(p)["input_ids"]) for p in chunk]
        for v, suffix in enumerate(VERDICTS):
            enc = tok([p + suffix for p in chunk], return_tensors="pt", padding=True)
            lp = m(**enc).logits.log_softmax(-1)
            ids, width = enc["input_ids"], enc["input_ids"].shape[1]
            for r in range(len(chunk)):
                start = width - int(enc["attention_mask"][r].sum()) + n_prompt[r]  # left padding
                t = torch.arange(start, width)
                logp[i + r, v] = float(lp[r, t - 1, ids[r, t]].sum())
    return 1 / (1 + np.exp(logp[:, 0] - logp[:, 1]))


def scored_pool(pool: list[dict], p_one: np.ndarray, k_verif: int, seed: int = 0) -> ScoredPool:
    """The pool as the scaling job stores it, each candidate's k_verif verdicts drawn from p_one."""
    rng = np.random.default_rng(seed)
    by_question: dict[str, list[int]] = {}
    for i, r in enumerate(pool):
        by_question.setdefault(r["qid"], []).append(i)
    records = []
    for qid, idx in by_question.items():
        gold = pool[idx[0]]["gold"]
        classes = group_answers([pool[i]["answer"] for i in idx])
        reps = {c: pool[i]["answer"] for i, c in zip(idx, classes, strict=True) if c >= 0}
        records.append({"id": qid, "answer_correct": [is_equivalent(reps[c], gold) for c in range(len(reps))],
                        "candidates": [{"answer_id": c, "correct": pool[i]["correct"],
                                        "verdicts": rng.binomial(1, p_one[i], k_verif).tolist()}
                                       for i, c in zip(idx, classes, strict=True)]})
    return ScoredPool.from_records(records)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python scripts/own_verdict_probe.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pool", help="sample own candidates and label them")
    p.add_argument("--model", required=True)
    p.add_argument("--questions", type=int, default=200)
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--seed", type=int, default=1000, help="problem and sampling seed (the demo's questions: 1000)")
    p.add_argument("--out", required=True)
    t = sub.add_parser("train", help="fine-tune on verdict rows of a pool")
    t.add_argument("--model", required=True)
    t.add_argument("--pool", default="", help="own candidates to train on (pool's output)")
    t.add_argument("--synthetic", type=int, default=0, metavar="N",
                   help="instead: N rows of seed_corpus(check='verdict') (constructed slips, answer and "
                        "compare rows included)")
    t.add_argument("--out", required=True)
    t.add_argument("--steps", type=int, default=3000)
    t.add_argument("--lr", type=float, default=1e-3)
    t.add_argument("--replay", type=float, default=0.5, help="seed-corpus answer rows per verdict row")
    t.add_argument("--balance", action="store_true", help="as many right as wrong candidates per question")
    s = sub.add_parser("measure", help="AUCs and Verification@k vs Consistency@k on a held-out pool")
    s.add_argument("--model", required=True)
    s.add_argument("--pool", default="", help="a held-out pool (pool's output)")
    s.add_argument("--synthetic", type=int, default=0, metavar="N",
                   help="instead: the check rows among the first N of seed_corpus(check='verdict'), the "
                        "rows `train --synthetic` starts with (does the verdict fit its own training rows?)")
    s.add_argument("--k-verif", type=int, default=8)
    args = parser.parse_args(argv)
    if args.cmd != "pool" and bool(args.pool) == bool(args.synthetic):
        parser.error(f"{args.cmd}: give --pool or --synthetic")
    setup_logging()
    if args.cmd == "pool":
        rows = sample_pool(args.model, args.questions, args.k, args.seed)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{len(rows)} candidates, pass@1 {np.mean([r['correct'] for r in rows]):.3f} -> {args.out}")
    elif args.cmd == "train":
        if args.synthetic:
            data = seed_corpus(n=args.synthetic, seed=3, check="verdict")
        else:
            pool = [json.loads(line) for line in open(args.pool)]
            data = verdict_rows(balanced(pool) if args.balance else pool, args.replay)
        print(f"{len(data)} rows")
        cfg = SFTJobConfig(model_path=args.model, output_dir=args.out, max_steps=args.steps,
                           learning_rate=args.lr, per_device_train_batch_size=32, max_length=288,
                           lr_scheduler_type="cosine", warmup_steps=50, seed=0,
                           logging_steps=max(1, args.steps // 10), save_steps=10**6)
        print(json.dumps(train_sft(cfg, data).metrics))
    elif args.synthetic:
        rows = [r for r in seed_corpus(n=args.synthetic, seed=3, check="verdict") if r["prompt"].endswith("\nCheck:")]
        pool = []
        for r in rows:  # "Q: <question>\nA: <candidate>\nCheck:" (verify_prompt, compact)
            question, candidate = r["prompt"][len("Q: "):-len("\nCheck:")].split("\nA: ", 1)
            pool.append({"question": question, "candidate": candidate})
        right = np.array([r["completion"].endswith("1") for r in rows])
        p_one = p_verdict_one(args.model, pool)
        print(f"{len(rows)} training check rows: p(Verdict: 1) AUC {auc(p_one, right):.3f}, mean "
              f"{p_one[right].mean():.3f} on right candidates, {p_one[~right].mean():.3f} on wrong ones")
    else:
        pool = [json.loads(line) for line in open(args.pool)]
        scored = scored_pool(pool, p_verdict_one(args.model, pool), args.k_verif)
        own = scored.own_verification()
        k = scored.shape[1]
        names = ["pass", "consistency", "verification"]  # no comparisons were sampled: no tie-break
        curves = compute_curves(scored, CurvesConfig(strategies=names, seeds=20, bootstrap=1000)).summary()
        final = {s: curves["curves"][s][-1]["accuracy"] for s in names}
        diff = next(d for d in curves["differences"] if d["k"] == k and d["strategy"] == "verification"
                    and d["baseline"] == "consistency" and d["k_verif"] == args.k_verif)
        print(f"candidates' pass@1 {np.mean([r['correct'] for r in pool]):.3f}; p(Verdict: 1) AUC pooled "
              f"{own['pooled_auc']:.3f}, within question {own['within_question_auc']:.3f} (answer votes "
              f"{own['answer_frequency_auc']:.3f}, {own['mixed_questions']} questions)")
        print(f"k={k}, k_verif={args.k_verif}: pass@k {final['pass']:.3f}, Consistency {final['consistency']:.3f}, "
              f"Verification {final['verification']:.3f}; Verification - Consistency {diff['difference']:+.3f} "
              f"[{diff['ci_low']:+.3f}, {diff['ci_high']:+.3f}]")


if __name__ == "__main__":
    main()
