"""Probes for a scaling config: pass@1 on its questions, and a run's curves scored another way.

`pass1` picks the question set and sampling settings: the search has something to select only
where pass@1 is neither near 0 nor near 1. One in-process engine (the config's `sampler`), the
config's questions and answer prompt, `--n` samples per question at each temperature; prints
pass@1 (the share of right samples), the questions with at least one right sample, and the mean
distinct answers per question. No Ray, no Redis.

`compare` sets two verifiers side by side on the same candidates (two runs of one model and
sample_seed): each one's within-question AUC, and the difference with its bootstrap CI.

`curves` recomputes a finished run's paired differences and own-verification figures from its
pool.npz with `--score verdicts|probability` (curves.options.score), without sampling anything.

    .venv-vllm/bin/python scripts/scaling_probe.py pass1 --config configs/scaling-smollm-vllm.yaml \\
        --temperatures 0.3 0.7 1.0 --n 8 dataset=sum1-small questions=48
    python scripts/scaling_probe.py curves runs/scaling-smollm-vllm/pool.npz --score probability
    python scripts/scaling_probe.py compare runs/zero-shot/pool.npz runs/trained/pool.npz   # same candidates
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.config import load_config  # noqa: E402
from common.sampling import SamplingParams  # noqa: E402
from search.engines import make_engine  # noqa: E402
from search.scaling.config import ScalingConfig  # noqa: E402
from search.scaling.curves import CurvesConfig, compute_curves  # noqa: E402
from search.scaling.experiment import load_questions  # noqa: E402
from search.scaling.pool import ScoredPool, answer_votes, question_aucs  # noqa: E402
from training import pretrained  # noqa: E402
from verifiers.math_answers import extract_answer, group_answers, is_equivalent  # noqa: E402
from verifiers.selfverify import answer_prompt  # noqa: E402


def curves(args: argparse.Namespace) -> None:
    pool = ScoredPool.load(args.pool)
    pool.score = pool.scores(args.score)
    config = Path(args.config or Path(args.pool).with_name("config.yaml"))
    # the run's own curve settings (k_tie, seeds, ...) where its config.yaml is there; only the score changes
    base = load_config(config, ScalingConfig).curves if config.exists() else CurvesConfig()
    result = compute_curves(pool, replace(base, options=replace(base.options, score=args.score)))
    q, n, v = pool.shape
    print(f"{args.pool}: {q} questions x {n} candidates x {v} verdicts, score={args.score}")
    for d in result.differences:
        print(f"  {d['strategy']} - {d['baseline']} at k={d['k']} (k_verif {d['k_verif']}): "
              f"{d['difference']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}]")
    for name in ("pass", "consistency", "weighted_best_of_n", "verification"):
        r = result.curve(name)[-1]
        print(f"  {name}@{r.k}: {r.accuracy:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}]")
    print("  own verification:", json.dumps({k: round(x, 3) if isinstance(x, float) else x
                                               for k, x in pool.own_verification().items()}))
    auc_intervals(pool, args.bootstrap)


def bootstrap_ci(n: int, resamples: int):
    """A formatter of a per-question array's mean with its 95% percentile bootstrap CI over its n questions
    (one fixed set of resamples, so every signal printed is resampled alike)."""
    idx = np.random.default_rng(0).integers(0, n, (resamples, n))

    def ci(x: np.ndarray) -> str:
        lo, hi = np.percentile(x[idx].mean(1), [2.5, 97.5])
        return f"{x.mean():+.3f} [{lo:+.3f}, {hi:+.3f}]"

    return ci


def auc_intervals(pool: ScoredPool, resamples: int) -> None:
    """Within-question AUC of each signal over the questions with right and wrong candidates, and each
    verdict signal minus the answer votes', with percentile bootstrap CIs over those questions."""
    c = pool.correct
    mixed = c.any(1) & ~c.all(1)
    if not mixed.any():
        print("  no question has both right and wrong candidates: no within-question AUC")
        return
    signals = {"verdicts": pool.scores("verdicts"), "votes": answer_votes(pool.answer_ids)}
    if pool.has_probs:
        signals["probability"] = pool.scores("probability")
    aucs = {k: question_aucs(v, c)[mixed] for k, v in signals.items()}
    ci = bootstrap_ci(int(mixed.sum()), resamples)

    for k, v in aucs.items():
        print(f"  within-question AUC, {k}: {ci(v)} ({mixed.sum()} questions)")
    for k in aucs.keys() - {"votes"}:
        print(f"  within-question AUC, {k} - votes: {ci(aucs[k] - aucs['votes'])}")


def compare(args: argparse.Namespace) -> None:
    """Two verifiers on the same candidates (two runs of one model and sample_seed): each one's
    within-question AUC by probability, the second minus the first and minus the votes, with
    bootstrap CIs over the questions that have right and wrong candidates."""
    a, b = ScoredPool.load(args.first), ScoredPool.load(args.second)
    if a.question_ids != b.question_ids or not (a.correct == b.correct).all() or not (
            a.answer_ids == b.answer_ids).all():
        raise SystemExit("the two pools do not hold the same candidates: run both with the same model, questions "
                         "and sample_seed")
    c = a.correct
    mixed = c.any(1) & ~c.all(1)
    aucs = {"first": question_aucs(a.scores(args.score), c)[mixed], "second": question_aucs(b.scores(args.score), c)[mixed],
            "votes": question_aucs(answer_votes(a.answer_ids), c)[mixed]}
    ci = bootstrap_ci(int(mixed.sum()), args.bootstrap)

    print(f"{mixed.sum()} of {len(c)} questions with right and wrong candidates; score={args.score}")
    print(f"  within-question AUC, first {args.first}: {ci(aucs['first'])}")
    print(f"  within-question AUC, second {args.second}: {ci(aucs['second'])}")
    print(f"  within-question AUC, answer votes: {ci(aucs['votes'])}")
    print(f"  second - first: {ci(aucs['second'] - aucs['first'])}")
    print(f"  second - votes: {ci(aucs['second'] - aucs['votes'])}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p1 = sub.add_parser("pass1", help="pass@1 of a config's model on its questions")
    p1.add_argument("--config", required=True)
    p1.add_argument("--temperatures", type=float, nargs="+", default=[0.7])
    p1.add_argument("--top-p", type=float, default=1.0)
    p1.add_argument("--n", type=int, default=8, help="samples per question at each temperature")
    p1.add_argument("overrides", nargs="*", help="dotted field=value overrides of the config")
    cv = sub.add_parser("curves", help="a run's curves from its pool.npz, scored by verdicts or probability")
    cv.add_argument("pool")
    cv.add_argument("--score", choices=["verdicts", "probability"], default="probability")
    cv.add_argument("--config", help="the run's config.yaml (default: beside the pool; else default settings)")
    cv.add_argument("--bootstrap", type=int, default=1000, help="resamples of the AUC intervals")
    cp = sub.add_parser("compare", help="two verifiers' within-question AUC on the same candidates, paired")
    cp.add_argument("first", help="pool.npz of one run (e.g. self-verification)")
    cp.add_argument("second", help="pool.npz of a run with the same model and sample_seed, another verifier")
    cp.add_argument("--score", choices=["verdicts", "probability"], default="probability")
    cp.add_argument("--bootstrap", type=int, default=1000)
    args = ap.parse_args(argv)
    if args.command == "curves":
        return curves(args)
    if args.command == "compare":
        return compare(args)
    cfg = load_config(args.config, ScalingConfig, args.overrides)
    questions = load_questions(cfg)
    engine = make_engine(cfg.sampler.engine, checkpoint=pretrained.resolve_checkpoint(cfg.model),
                         **cfg.sampler.engine_kwargs)
    prompts = [answer_prompt(q["question"], cfg.prompt_style) for q in questions]
    print(f"{cfg.dataset}: {len(questions)} questions x {args.n} samples, max_tokens {cfg.max_tokens}, "
          f"top_p {args.top_p}, seed {cfg.sample_seed}")
    for t in args.temperatures:
        start = time.time()
        rows = engine.generate(prompts, SamplingParams(n=args.n, temperature=t, top_p=args.top_p,
                                                       max_tokens=cfg.max_tokens, seed=cfg.sample_seed))
        right, solved, distinct = 0, 0, 0
        for q, row in zip(questions, rows, strict=True):
            answers = [extract_answer(c.text) for c in row]
            ok = [a is not None and is_equivalent(a, q["answer"]) for a in answers]
            right, solved = right + sum(ok), solved + any(ok)
            distinct += len({c for c in group_answers(answers) if c >= 0})
        print(f"temperature {t}: pass@1 {right / (len(questions) * args.n):.3f}, questions with a right sample "
              f"{solved}/{len(questions)}, distinct answers per question {distinct / len(questions):.2f} "
              f"({time.time() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
