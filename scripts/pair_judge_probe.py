"""How a model judges pairs (verifiers/judges/pairwise.py's prompt, its verdict constrained to A or B):

    .venv-vllm/bin/python scripts/pair_judge_probe.py [CHECKPOINT]

Eight sums, a right and a wrong response in both orders, greedy; prints its picks and how many
are right. SmolLM2-135M-Instruct (2026-12-03): "A" 16 times in 16, right 8 of 16.
"""

import collections
import sys

from common.sampling import SamplingParams
from search.engines import make_engine
from training.pretrained import resolve_checkpoint
from verifiers.judges.pairwise import CHOICE_REGEX, PAIR_PROMPT

if __name__ == "__main__":
    eng = make_engine("vllm", checkpoint=resolve_checkpoint(sys.argv[1] if len(sys.argv) > 1 else "pretrained:smollm2-135m-instruct"), dtype="bfloat16",
                      max_model_len=2048, enforce_eager=True, cpu_kv_cache_gib=1)
    qs = [(f"{a}+{b}", a + b) for a, b in [(3, 4), (7, 8), (12, 5), (9, 9), (6, 7), (15, 4), (8, 3), (11, 11)]]
    prompts, truth = [], []
    for q, ans in qs:
        right, wrong = f"The answer is {ans}.", f"The answer is {ans + 3}."
        for a, b, t in [(right, wrong, "A"), (wrong, right, "B")]:
            prompts.append([{"role": "user", "content": PAIR_PROMPT.format(instruction=q, a=a, b=b)}])
            truth.append(t)
    rows = eng.generate(prompts, SamplingParams(n=1, temperature=0.0, max_tokens=1, regex=CHOICE_REGEX))
    picks = [r[0].text.strip() for r in rows]
    print("picks", collections.Counter(picks), "right", sum(p == t for p, t in zip(picks, truth, strict=True)), "of", len(picks))
    eng.close()
