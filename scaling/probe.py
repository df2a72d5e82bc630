"""Probes for a scaling config: pass@1 on its questions, and a run's curves scored another way.

`pass1` picks the question set and sampling settings: the search has something to select only
where pass@1 is neither near 0 nor near 1. One in-process engine (the config's `sampler`), the
config's questions and answer prompt, `--n` samples per question at each temperature; prints
pass@1 (the share of right samples), the questions with at least one right sample, and the mean
distinct answers per question. No Ray, no Redis.

`compare` sets two verifiers side by side on the same candidates (two runs of one model and
sample_seed): each one's within-question AUC, and the difference with its bootstrap CI.

`seeds` gathers runs of one config at several sample_seeds (the same questions, new candidates each): per
seed and averaged per question over the seeds, Verification@k and weighted Best-of-N minus Consistency@k at
the largest k and the within-question AUCs, with a bootstrap CI over questions and the spread across seeds;
`--against` pairs each run with another verifier's run at the same seed (the AUC difference, paired).

`curves` recomputes a finished run's paired differences and own-verification figures from its
pool.npz with `--score verdicts|probability` (curves.options.score), without sampling anything.

    .venv-vllm/bin/python scripts/scaling_probe.py pass1 --config configs/scaling-smollm-vllm.yaml \\
        --temperatures 0.3 0.7 1.0 --n 8 dataset=sum1-small questions=48
    python scripts/scaling_probe.py curves runs/scaling-smollm-vllm/pool.npz --score probability
    python scripts/scaling_probe.py compare runs/zero-shot/pool.npz runs/trained/pool.npz   # same candidates
    python scripts/scaling_probe.py seeds runs/trained-s*/pool.npz --against runs/zero-shot-s*/pool.npz
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from common.config import load_config
from common.sampling import SamplingParams
from scaling.config import ScalingConfig
from scaling.curves import CurvesConfig, bootstrap_ci, compute_curves, resample_counts
from scaling.experiment import load_questions
from search.engines import make_engine
from search.scored_pool import ScoredPool, answer_votes, question_aucs
from training import pretrained
from verifiers.math_answers import extract_answer, group_answers, is_equivalent
from verifiers.selfverify import answer_prompt


def curves(args: argparse.Namespace) -> None:
    pool = ScoredPool.load(args.pool)
    pool.score = pool.scores(args.score)
    # the run's own curve settings (k_tie, seeds, ...) where its config.yaml is there; only the score changes
    base = load_config(args.config, ScalingConfig).curves if args.config else curve_settings(args.pool)
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


def interval(n: int, resamples: int):
    """A formatter of a per-question array's mean with its 95% percentile bootstrap CI over its n questions
    (scaling.curves.bootstrap_ci on one fixed set of resamples, so every signal printed is resampled alike)."""
    counts = resample_counts(n, resamples, np.random.default_rng(0))

    def ci(x: np.ndarray) -> str:
        lo, hi = bootstrap_ci(x[None], counts, 0.95)
        return f"{x.mean():+.3f} [{lo[0]:+.3f}, {hi[0]:+.3f}]"

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
    ci = interval(int(mixed.sum()), resamples)

    for k, v in aucs.items():
        print(f"  within-question AUC, {k}: {ci(v)} ({mixed.sum()} questions)")
    for k in aucs.keys() - {"votes"}:
        print(f"  within-question AUC, {k} - votes: {ci(aucs[k] - aucs['votes'])}")


def compare(args: argparse.Namespace) -> None:
    """Two verifiers on the same candidates (two runs of one model and sample_seed): each one's
    within-question AUC by probability, the second minus the first and minus the votes, with
    bootstrap CIs over the questions that have right and wrong candidates."""
    a, b = ScoredPool.load(args.first), ScoredPool.load(args.second)
    if not same_candidates(a, b):
        raise SystemExit("the two pools do not hold the same candidates: run both with the same model, questions "
                         "and sample_seed")
    c = a.correct
    mixed = c.any(1) & ~c.all(1)
    aucs = {"first": question_aucs(a.scores(args.score), c)[mixed], "second": question_aucs(b.scores(args.score), c)[mixed],
            "votes": question_aucs(answer_votes(a.answer_ids), c)[mixed]}
    ci = interval(int(mixed.sum()), args.bootstrap)

    print(f"{mixed.sum()} of {len(c)} questions with right and wrong candidates; score={args.score}")
    print(f"  within-question AUC, first {args.first}: {ci(aucs['first'])}")
    print(f"  within-question AUC, second {args.second}: {ci(aucs['second'])}")
    print(f"  within-question AUC, answer votes: {ci(aucs['votes'])}")
    print(f"  second - first: {ci(aucs['second'] - aucs['first'])}")
    print(f"  second - votes: {ci(aucs['second'] - aucs['votes'])}")


def same_candidates(a: ScoredPool, b: ScoredPool) -> bool:
    return a.question_ids == b.question_ids and (a.correct == b.correct).all() and (a.answer_ids == b.answer_ids).all()


def curve_settings(pool_path: str) -> CurvesConfig:
    """A run's curve settings, from the config.yaml beside its pool.npz (else the defaults)."""
    config = Path(pool_path).with_name("config.yaml")
    return load_config(config, ScalingConfig).curves if config.exists() else CurvesConfig()


def largest_k_gains(pool: ScoredPool, cfg: CurvesConfig) -> dict[str, np.ndarray]:
    """Per question at the largest k: each paired difference of the run's report (its own draws)."""
    result = compute_curves(pool, cfg)
    k = max(result.k_values)
    return {f"{a} - {b}": x for (a, b, kk), x in result.per_question.items() if kk == k}


def seeds(args: argparse.Namespace) -> None:
    """The runs of one config at several sample_seeds, per seed and averaged over them per question."""
    if args.against and len(args.against) != len(args.pools):
        raise SystemExit(f"--against needs one pool per run ({len(args.pools)}), got {len(args.against)}")
    per_seed: dict[str, list[np.ndarray]] = {}  # signal -> one [Q] array per seed (NaN where undefined)
    questions = None
    for i, path in enumerate(args.pools):
        pool = ScoredPool.load(path)
        if questions is None:
            questions = pool.question_ids
        elif pool.question_ids != questions:
            raise SystemExit(f"{path} holds other questions than {args.pools[0]}: one config, several sample_seeds")
        cfg = curve_settings(path)
        pool.score = pool.scores(cfg.options.score)
        signals = largest_k_gains(pool, cfg)
        c = pool.correct
        mixed = c.any(1) & ~c.all(1)
        nan = np.full(len(c), np.nan)
        signals["AUC, verifier"] = np.where(mixed, question_aucs(pool.score, c), nan)
        signals["AUC, answer votes"] = np.where(mixed, question_aucs(answer_votes(pool.answer_ids), c), nan)
        signals["AUC, verifier - votes"] = signals["AUC, verifier"] - signals["AUC, answer votes"]
        if args.against:
            other = ScoredPool.load(args.against[i])
            if not same_candidates(pool, other):
                raise SystemExit(f"{path} and {args.against[i]} do not hold the same candidates")
            other_cfg = curve_settings(args.against[i])
            other.score = other.scores(other_cfg.options.score)
            # the same candidates and draws: Consistency@k is the same on both sides, so this is the paired
            # difference of the two verifiers' strategies
            for name, x in largest_k_gains(other, other_cfg).items():
                signals[f"{name}, minus against's"] = signals[name] - x
            signals["AUC, verifier - against"] = signals["AUC, verifier"] - np.where(
                mixed, question_aucs(other.score, c), nan)
        print(f"{path}: {pool.shape[0]} questions x {pool.shape[1]} candidates, score={cfg.options.score}, "
              f"pass@1 {c.mean():.3f}, {int(mixed.sum())} with right and wrong candidates")
        for name, x in signals.items():
            per_seed.setdefault(name, []).append(x)
            print(f"  {name}: {np.nanmean(x):+.3f}")
    print(f"Averaged per question over {len(args.pools)} seeds, 95% bootstrap CI over questions; "
          "[min, max] of the seeds' means:")
    for name, xs in per_seed.items():
        stacked = np.stack(xs)
        keep = ~np.isnan(stacked).all(0)
        mean = np.nanmean(stacked[:, keep], 0)
        ci = interval(len(mean), args.bootstrap)
        means = [np.nanmean(x) for x in xs]
        print(f"  {name}: {ci(mean)} ({keep.sum()} questions); seeds [{min(means):+.3f}, {max(means):+.3f}]")


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
    sd = sub.add_parser("seeds", help="runs of one config at several sample_seeds, per seed and averaged")
    sd.add_argument("pools", nargs="+", help="pool.npz of each run (config.yaml beside it gives the curve settings)")
    sd.add_argument("--against", nargs="*", default=[], help="another verifier's pool.npz at the same seeds, in order")
    sd.add_argument("--bootstrap", type=int, default=1000)
    args = ap.parse_args(argv)
    if args.command == "seeds":
        return seeds(args)
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

