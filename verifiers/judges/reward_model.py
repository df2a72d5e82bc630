"""A reward-model judge: any Hugging Face sequence-classification checkpoint scoring (instruction, response).

The pair is rendered as a two-message chat through the checkpoint's chat template when it
has one (how reward models such as ArmoRM are trained), else as "instruction\\n\\nresponse".
The score is the first logit. TRL's RewardTrainer produces such checkpoints.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from verifiers.judges.base import JudgeItem, Verdict, check_verdicts

PLAIN = "{instruction}\n\n{response}"  # how (instruction, response) is rendered without a chat template


def check_classifier(checkpoint: str) -> None:
    """Raise, naming the field, unless `checkpoint` is a sequence-classification model dir."""
    config = Path(checkpoint) / "config.json"
    if not config.exists():
        raise ValueError(f"judge.checkpoint={checkpoint!r}: no config.json there; point it at a Hugging Face "
                         "sequence-classification checkpoint (e.g. one saved by TRL's RewardTrainer)")
    archs = json.loads(config.read_text()).get("architectures") or []
    if not any(a.endswith("ForSequenceClassification") for a in archs):
        raise ValueError(f"judge.checkpoint={checkpoint!r} is not a sequence classifier (architectures: {archs}); "
                         "a reward model judge needs an *ForSequenceClassification checkpoint, such as one "
                         "trained with TRL's RewardTrainer")


def render(tokenizer, item: JudgeItem) -> str:
    """The text a reward model scores (train reward models on the same rendering)."""
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": item.instruction}, {"role": "assistant", "content": item.response}],
            tokenize=False)
    return PLAIN.format(instruction=item.instruction, response=item.response)


class RewardModelJudge:
    name = "reward_model"
    check_checkpoint = staticmethod(check_classifier)  # thinking.judging asks it at --dry-run

    def __init__(self, checkpoint: str, batch_size: int = 16, max_length: int = 1024):
        check_classifier(checkpoint)

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.batch_size, self.max_length = batch_size, max_length

    def render(self, item: JudgeItem) -> str:
        return render(self.tokenizer, item)

    def score_sync(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        out: list[Verdict] = []
        for start in range(0, len(items), self.batch_size):
            batch = [self.render(i) for i in items[start:start + self.batch_size]]
            enc = self.tokenizer(batch, return_tensors="pt", padding=True, truncation=True,
                                 max_length=self.max_length)
            with self.torch.no_grad():
                logits = self.model(**enc).logits[:, 0].float().tolist()
            out += [Verdict.of(x) for x in logits]
        return out

    async def score(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return check_verdicts(await asyncio.to_thread(self.score_sync, list(items)), items, self.name)
