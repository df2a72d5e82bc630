"""One DPO round of the TPO demo outside the loop: sample pairs from a checkpoint once, then try
DPO settings on them and measure held-out accuracy at temperature 0.8 (no Ray, no Redis; a
setting takes about 30 s on 2 cores). docs/results.md (TPO) lists what it measured.

    python scripts/tpo_dpo_sweep.py pairs --arm thought --pairs /tmp/pairs.json
    python scripts/tpo_dpo_sweep.py train --arm thought --pairs /tmp/pairs.json --div 1 --lr 5e-5 --sft 1
    python scripts/tpo_dpo_sweep.py acc --arm direct

Pairs are chosen and rejected as the loop chooses them (thinking.pairs), from k samples per
instruction; accuracy is the share of held-out instructions (seed 1000, as the demo's) whose
response's last number is the reference, one sample each for sampling seeds 0, 1, 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from common.logs import setup_logging  # noqa: E402
from thinking.arith import DEMO_DIRECT, DEMO_THOUGHT, instructions  # noqa: E402
from thinking.pairs import Group, PairsConfig, Sample, build_pairs, choose_rho, trl_rows  # noqa: E402
from thinking.prompts import DirectPrompt, ThoughtPrompt  # noqa: E402
from verifiers.judges.programmatic import final_number  # noqa: E402

PROMPTS = {"thought": ThoughtPrompt(DEMO_THOUGHT), "direct": DirectPrompt(DEMO_DIRECT)}


@torch.inference_mode()
def generate(path: str, prompts: list[str], n: int, temperature: float, seed: int,
             max_new_tokens: int = 48) -> list[list[str]]:
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    out: list[list[str]] = []
    for i in range(0, len(prompts), 128):
        enc = tok(prompts[i:i + 128], return_tensors="pt", padding=True)
        ids = model.generate(**enc, max_new_tokens=max_new_tokens, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id, do_sample=True, temperature=temperature, top_p=0.95,
                             num_return_sequences=n)
        texts = tok.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        out += [texts[j * n:(j + 1) * n] for j in range(len(texts) // n)]
    return out


def is_right(arm: str, text: str, reference: str) -> bool:
    parsed = PROMPTS[arm].parse(text)
    return parsed.ok and final_number(parsed.response) == reference


def accuracy(path: str, arm: str, rows: list[dict], seeds=(0, 1, 2)) -> list[float]:
    accs = []
    for seed in seeds:
        texts = generate(path, [PROMPTS[arm].build(r["instruction"]) for r in rows], 1, 0.8, seed)
        accs.append(sum(is_right(arm, t, r["reference"]) for [t], r in zip(texts, rows, strict=True)) / len(rows))
    return accs


def make_pairs(path: str, arm: str, rows: list[dict], k: int = 8, seed: int = 1) -> tuple[list[dict], dict]:
    texts = generate(path, [PROMPTS[arm].build(r["instruction"]) for r in rows], k, 0.8, seed)
    groups = []
    for r, outs in zip(rows, texts, strict=True):
        samples = []
        for t in outs:
            p = PROMPTS[arm].parse(t)
            samples.append(Sample(t, p.thought, p.response, p.ok, float(is_right(arm, t, r["reference"])) if p.ok else None))
        groups.append(Group(r["id"], PROMPTS[arm].build(r["instruction"]), samples))
    cfg = PairsConfig()
    return build_pairs(groups, choose_rho(groups, cfg), cfg)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["pairs", "acc", "train"])
    ap.add_argument("--model", default="models/tpo-arith-seed", help="the checkpoint pairs come from / DPO starts at")
    ap.add_argument("--arm", default="thought", choices=sorted(PROMPTS))
    ap.add_argument("--instructions", type=int, default=256, help="training instructions (seed 1)")
    ap.add_argument("--heldout", type=int, default=256)
    ap.add_argument("--pairs", default="/tmp/tpo-pairs.json")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--sft", type=float, default=0.0, help="weight of the NLL term on chosen (0: plain DPO)")
    ap.add_argument("--div", type=int, default=0, help="pairs.divergence_words (0: whole completions)")
    ap.add_argument("--loss", default="sigmoid", help="TRL loss_type (sigmoid, ipo, apo_zero, nca_pair, sft...)")
    ap.add_argument("--lora", action="store_true")
    a = ap.parse_args()
    setup_logging()
    held = instructions(a.heldout, 1000)
    if a.command == "pairs":
        pairs, counts = make_pairs(a.model, a.arm, instructions(a.instructions, 1))
        Path(a.pairs).write_text(json.dumps({"pairs": pairs, "counts": counts}))
        print(counts)
    elif a.command == "acc":
        accs = accuracy(a.model, a.arm, held)
        print(f"{a.model} {a.arm} accuracy {sum(accs) / len(accs):.3f} {accs}")
    else:
        from training.dpo import DPOJobConfig, train_dpo

        rows = trl_rows(json.loads(Path(a.pairs).read_text())["pairs"], a.div)
        loss = {"loss_type": [a.loss, "sft"], "loss_weights": [1.0, a.sft]} if a.sft else {"loss_type": [a.loss]}
        started = time.time()
        cfg = DPOJobConfig(model_path=a.model, output_dir=f"/tmp/tpo-dpo-sweep/{a.arm}-{os.getpid()}",
                           max_steps=a.steps, learning_rate=a.lr, beta=a.beta, per_device_train_batch_size=16,
                           max_length=160, disable_tqdm=True, logging_steps=max(1, a.steps // 4), seed=0,
                           completion_eos=not a.div, lora=a.lora, **loss)
        result = train_dpo(cfg, rows)
        accs = accuracy(result.checkpoint, a.arm, held)
        print(f"{a.arm} lr={a.lr} steps={a.steps} beta={a.beta} sft={a.sft} div={a.div} loss={a.loss} lora={a.lora} "
              f"rows={len(rows)}: accuracy {sum(accs) / len(accs):.3f} {accs} ({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
