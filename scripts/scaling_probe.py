"""pass@1 of a scaling config's model on its own questions, at several sampling settings.

Picks the question set and sampling settings for a scaling config: the search has something to
select only where pass@1 is neither near 0 nor near 1. One in-process engine (the config's
`sampler`), the config's questions and answer prompt, `--n` samples per question at each
temperature; prints pass@1 (the share of right samples), the questions with at least one right
sample, and the mean distinct answers per question. No Ray, no Redis.

    .venv-vllm/bin/python scripts/scaling_probe.py --config configs/scaling-smollm-vllm.yaml \\
        --temperatures 0.3 0.7 1.0 --n 8 dataset=arith1 questions=64
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.config import load_config  # noqa: E402
from common.sampling import SamplingParams  # noqa: E402
from search.engines import make_engine  # noqa: E402
from search.scaling.config import ScalingConfig  # noqa: E402
from search.scaling.experiment import load_questions  # noqa: E402
from training import pretrained  # noqa: E402
from verifiers.math_answers import extract_answer, group_answers, is_equivalent  # noqa: E402
from verifiers.selfverify import answer_prompt  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.7])
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--n", type=int, default=8, help="samples per question at each temperature")
    ap.add_argument("overrides", nargs="*", help="dotted field=value overrides of the config")
    args = ap.parse_args(argv)
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
