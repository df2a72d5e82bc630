"""A LoRA verifier taught on the model's own candidates: the scaling workload's trained checker.

    recipe = smollm2_verifier()                  # the recipe of models/smollm2-verifier-lora
    rows = sample_candidates(recipe, generate)   # the base model's own answers, labelled right/wrong
    data = verdict_rows(rows, tokenizer)         # TRL prompt/completion: the verdict prompt -> " 1" | " 0"

SmolLM2-135M-Instruct says "correct" to 0.87 of its right answers and 0.83 of its wrong ones:
zero-shot, its verdicts rank one question's candidates at within-question AUC 0.63 where the
votes of their answers reach 0.81 (docs/real-model.md). Here it learns to check from its own
mistakes: for training questions (the generator's, with every question of the scaling demo's
held-out set removed by text) it answers `candidates` times, each answer is labelled by the
question's reference answer, and a LoRA adapter is trained with TRL's SFT on exactly the
prompt the scaling workload sends in `verdict: constrained` mode (the verification prompt,
prefilled up to `Verdict:`), the completion being the label, " 1" or " 0". The adapter then
sits in models/ (training/embedded.py builds and checks it) and `ScalingConfig.verifier`
points at it: candidates still come from the base model, verdicts from base + adapter.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import random
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.sampling import (
    Completion,
    Generate,
    Prompt,
    SamplingParams,
    render_prompt,
    threaded_generate,
)
from scaling.arith_problems import generated_problems
from search.requests import generate_each
from verifiers.math_answers import extract_answer, is_equivalent
from verifiers.selfverify import Style, View, answer_prompt, verify_prompt
from verifiers.verdicts import CHOICES, verdict_prompt

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerifierRecipe:
    """Everything that makes the adapter (its hash is the embedded model's recipe hash)."""

    base: str = "pretrained:smollm2-135m-instruct"  # the model that answers and, with the adapter, checks
    dataset: str = "sum1-small"  # generated set of the training questions (scaling.arith_problems)
    train_seed: int = 7  # generator seed of the training questions
    train_draws: int = 4000  # draws from the generator; their distinct questions, less the held-out ones
    heldout_seed: int = 1000  # the scaling config's arith_seed
    heldout_questions: int = 48  # the first N of the held-out seed (the demo's questions) are never trained on
    style: Style = "full"
    view: View = "solution"  # what the verifier sees of a candidate (the scaling config's verify_view)
    candidates: int = 16  # answers sampled per training question
    temperature: float = 0.7  # the scaling config's candidate temperature
    max_tokens: int = 192
    sample_seed: int = 0
    engine: str = "vllm"  # sampling the training candidates (the build runs in .venv-vllm)
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    balance: bool = True  # as many right as wrong rows per question where both exist (the rest dropped)
    lora_r: int = 8
    lora_alpha: int = 16
    learning_rate: float = 3e-4
    epochs: float = 1.0  # ~12 s a step of 8 rows on 2 cores: one epoch of ~800 rows is ~20 min
    batch_size: int = 8
    max_length: int = 640  # tokens of prompt + verdict; longer rows are left out
    seed: int = 0  # data order and LoRA init

    def hashable(self) -> dict[str, Any]:
        """The fields, less those added later while at the value every earlier recipe had (an unchanged
        recipe keeps its hash)."""
        return {k: (dict(sorted(v.items())) if isinstance(v, dict) else v) for k, v in self.__dict__.items()
                if not (k in ADDED_LATER and v == ADDED_LATER[k])}


# Recipe fields added after adapters were shipped, with the value the earlier recipes had.
ADDED_LATER: dict[str, Any] = {"view": "solution"}


def smollm2_verifier() -> VerifierRecipe:
    """The recipe of models/smollm2-verifier-lora (configs/scaling-smollm-verifier.yaml's verifier)."""
    return VerifierRecipe(engine_kwargs={"dtype": "bfloat16", "max_model_len": 2048, "enforce_eager": True,
                                         "cpu_kv_cache_gib": 1})


def heldout_texts(recipe: VerifierRecipe) -> set[str]:
    return {r["question"] for r in generated_problems(recipe.dataset, recipe.heldout_questions,
                                                      seed=recipe.heldout_seed)}


def training_questions(recipe: VerifierRecipe) -> list[dict[str, str]]:
    """The generator's distinct questions at train_seed, in first-drawn order, less every held-out text."""
    held, seen, out = heldout_texts(recipe), set(), []
    for r in generated_problems(recipe.dataset, recipe.train_draws, seed=recipe.train_seed):
        if r["question"] not in held and r["question"] not in seen:
            seen.add(r["question"])
            out.append({"question": r["question"], "answer": r["answer"]})
    if not out:
        raise ValueError(f"no training questions left: {recipe.dataset} at seed {recipe.train_seed} has none outside "
                         f"the first {recipe.heldout_questions} held-out questions")
    return out


async def sample_candidates(recipe: VerifierRecipe, generate: Generate,
                            questions: Sequence[dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """recipe.candidates answers per training question, each {question, answer, response, correct}."""
    questions = list(questions if questions is not None else training_questions(recipe))
    params = SamplingParams(n=1, temperature=recipe.temperature, max_tokens=recipe.max_tokens,
                            seed=recipe.sample_seed)
    prompts: list[Prompt] = [answer_prompt(q["question"], recipe.style) for q in questions]
    rows: list[list[Completion]] = await generate_each(generate, prompts, [recipe.candidates] * len(prompts), params)
    out = []
    for q, row in zip(questions, rows, strict=True):
        for c in row:
            given = extract_answer(c.text)
            out.append({"question": q["question"], "answer": q["answer"], "response": c.text,
                        "correct": given is not None and is_equivalent(given, q["answer"])})
    return out


def balanced(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """Per question, as many wrong rows as right ones (and the reverse) where it has both; a question
    with only one kind keeps one row, so the model still sees it without it dominating."""
    rng = random.Random(seed)
    by_q: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_q.setdefault(r["question"], []).append(r)
    out = []
    for group in by_q.values():
        right = [r for r in group if r["correct"]]
        wrong = [r for r in group if not r["correct"]]
        keep = min(len(right), len(wrong))
        if keep == 0:
            out.append(rng.choice(group))
            continue
        out += rng.sample(right, keep) + rng.sample(wrong, keep)
    rng.shuffle(out)
    return out


def verdict_rows(rows: list[dict[str, Any]], tokenizer: Any, style: Style = "full",
                 view: View = "solution") -> list[dict[str, str]]:
    """TRL prompt/completion rows: the text the engine renders for a constrained verdict (the
    verification prompt through the chat template, prefilled up to `Verdict:`), and the label as
    the verdict token (" 1" right, " 0" wrong)."""
    yes, no = CHOICES["verify"]
    return [{"prompt": render_prompt(tokenizer, verdict_prompt(verify_prompt(r["question"], r["response"], style, view))),
             "completion": f" {yes if r['correct'] else no}"} for r in rows]


def run_sampling(recipe: VerifierRecipe, checkpoint: str) -> list[dict[str, Any]]:
    """sample_candidates on one in-process engine of recipe.engine over `checkpoint`."""
    from search.engines import make_engine

    engine = make_engine(recipe.engine, checkpoint=checkpoint, **recipe.engine_kwargs)
    try:
        return asyncio.run(sample_candidates(recipe, threaded_generate(engine)))
    finally:
        close = getattr(engine, "close", None) or getattr(engine, "shutdown", None)
        if close:
            close()


def training_rows(recipe: VerifierRecipe, candidates: list[dict[str, Any]], tokenizer: Any) -> list[dict[str, str]]:
    """The SFT rows of `candidates` (balanced if the recipe says so), those over max_length left out."""
    chosen = balanced(candidates, recipe.seed) if recipe.balance else list(candidates)
    rows = verdict_rows(chosen, tokenizer, recipe.style, recipe.view)
    return [r for r in rows if len(tokenizer(r["prompt"] + r["completion"])["input_ids"]) <= recipe.max_length]


def train_adapter(recipe: VerifierRecipe, candidates: list[dict[str, Any]], base_checkpoint: str,
                  output_dir: str, cpu_threads: int = 0) -> Any:
    """LoRA SFT of the base on the verdict rows; returns training.common.TrainResult, whose
    checkpoint (merged) holds the adapter itself in adapter/."""
    from transformers import AutoTokenizer

    from training.sft import SFTJobConfig, train_sft

    tokenizer = AutoTokenizer.from_pretrained(base_checkpoint)
    rows = training_rows(recipe, candidates, tokenizer)
    cfg = SFTJobConfig(
        model_path=base_checkpoint, output_dir=output_dir, lora=True, lora_r=recipe.lora_r,
        lora_alpha=recipe.lora_alpha, save_adapter=True, learning_rate=recipe.learning_rate,
        num_train_epochs=recipe.epochs, per_device_train_batch_size=recipe.batch_size, seed=recipe.seed,
        max_length=recipe.max_length, cpu_threads=cpu_threads, lr_scheduler_type="cosine", warmup_steps=0.05,
        save_steps=25, disable_tqdm=True,
    )
    return train_sft(cfg, rows)


TRAINING_QUESTIONS = "ratchet_training_questions.json"  # beside an embedded adapter: what it was taught on


def check_heldout(verifier: str, questions: Sequence[str]) -> None:
    """Refuse an experiment whose questions the verifier was trained on (its adapter dir lists them):
    its curves would measure memory, not checking."""
    listed = Path(verifier) / TRAINING_QUESTIONS
    if not listed.exists():
        return
    seen = set(json.loads(listed.read_text()))
    overlap = sorted({q for q in questions if q in seen})
    if overlap:
        raise ValueError(f"verifier {verifier} was trained on {len(overlap)} of this experiment's questions "
                         f"(e.g. {overlap[0]!r}); evaluate it on held-out questions (its {TRAINING_QUESTIONS})")


CANDIDATES = "ratchet_candidates.jsonl.gz"  # the labelled answers it was trained on (provenance)


def build_embedded(recipe: VerifierRecipe, out: Path) -> dict[str, Any]:
    """training/embedded.py's builder: sample the base's answers, train the adapter, write into `out`
    the adapter (its base named as the recipe names it), the training questions and the candidates."""
    from training import pretrained
    from training.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
    from training.common import ADAPTER_DIR

    base = pretrained.resolve_checkpoint(recipe.base)
    started = time.time()
    candidates = run_sampling(recipe, base)
    sample_s = round(time.time() - started, 1)
    right = sum(c["correct"] for c in candidates)
    log.info("%d training candidates sampled in %.0f s: %d right, %d wrong", len(candidates), sample_s, right,
             len(candidates) - right)
    with tempfile.TemporaryDirectory(prefix="ratchet-adapter-") as tmp:
        result = train_adapter(recipe, candidates, base, str(Path(tmp) / "trained"))
        adapter = Path(result.checkpoint) / ADAPTER_DIR
        config = json.loads((adapter / ADAPTER_CONFIG).read_text())
        config["base_model_name_or_path"] = recipe.base  # portable: the base as configs name it
        (out / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        shutil.copyfile(adapter / ADAPTER_WEIGHTS, out / ADAPTER_WEIGHTS)
    questions = sorted({c["question"] for c in candidates})
    (out / TRAINING_QUESTIONS).write_text(json.dumps(questions, indent=0) + "\n")
    with gzip.GzipFile(out / CANDIDATES, "wb", mtime=0) as f:
        f.write("".join(json.dumps(c, sort_keys=True) + "\n" for c in candidates).encode())
    return {"base": recipe.base, "training_questions": len(questions), "candidates": len(candidates),
            "right": right, "sample_s": sample_s, "train": result.metrics}
