"""Controls for SOAR: the random-program prior as a sampler.

A tiny model can look good simply because random DSL programs already solve easy tasks.
This sampler ignores the model entirely and draws programs from the prior that built the
seed corpus (evolution.programs.random_program, colour arguments from the task's grids),
so it runs through the very same search, sandbox, vote and metrics as a model does, with
the same budget. Any claim that a model learned must beat it.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence

from common.sampling import Completion, Prompt, SamplingParams, user_text
from evolution.driver import Sampler
from evolution.programs import colours, random_program, render
from evolution.prompts import compact_task, completion_from_program
from verifiers.arc.grids import ArcTask

RANDOM_PRIOR = "random-prior"  # the model_version its programs carry


def random_prior_sampler(tasks: Mapping[str, ArcTask], max_steps: int = 2) -> Sampler:
    """A Sampler for compact prompts (sampling or refinement) of the given tasks."""
    by_text = {compact_task(t.without_answers()): t for t in tasks.values()}

    def task_of(body: str) -> ArcTask:
        for text, task in by_text.items():
            if body.startswith(text):
                return task
        raise ValueError("random prior: the prompt is not a compact prompt of any of its tasks")

    async def sample(prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        rows = []
        for prompt in prompts:
            body = user_text(prompt) or ""  # a chat model's prompt (prompt_format chat): its user message
            task = task_of(body)
            grids_in = [ex.input for ex in task.train + task.test]
            grids_out = [ex.output for ex in task.train]
            digest = hashlib.sha256(f"{params.seed}:{body}".encode()).digest()
            rng = random.Random(int.from_bytes(digest[:8], "little"))  # reproducible per seed and prompt
            rows.append([
                Completion(completion_from_program(render(random_program(rng, colours(grids_in),
                                                                         colours(grids_out), max_steps)), "compact"),
                           "stop", 0, 0, RANDOM_PRIOR)
                for _ in range(params.n)
            ])
        return rows

    return sample
