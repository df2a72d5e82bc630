"""Every Redis key ratchet uses, in one place. Experiment data lives under `ratchet:x:<name>:`."""

from __future__ import annotations

import re

PREFIX = "ratchet"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_name(name: str, what: str = "experiment") -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"{what} name {name!r} is invalid: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def experiments() -> str:
    return f"{PREFIX}:experiments"


def exp(name: str, *parts: str) -> str:
    return ":".join([PREFIX, "x", check_name(name), *parts])


def exec_cache(task_fingerprint: str) -> str:
    # shared by all experiments: a result depends only on the task and the code
    return f"{PREFIX}:exec:{task_fingerprint}"


def tpo(name: str, *parts: str) -> str:
    """TPO phases of one experiment: tpo:<arm>:it<N>:samples|judged|pairs, tpo:measure:<version>:..."""
    return exp(name, "tpo", *parts)


def scaling(name: str, part: str) -> str:
    # a scaling experiment's stored samples: a hash per phase (candidates, verdicts,
    # comparisons; fields are question ids) and its sampling plan
    return exp(name, "scaling", part)


# Names *inside* an experiment's candidate archive (counter fields and mark hashes; the
# archive prefixes them with the experiment's key). SOAR's search budgets are per iteration.
def search_counter(iteration: int, what: str, task_id: str) -> str:
    """A task's per-iteration budget counter or mark: sampled, refined, no_code, correct, seen."""
    return f"it{iteration}:{what}:{task_id}"


def refine_count(iteration: int, task_id: str, code_hash: str) -> str:
    """How often a parent program was refined (REX's N) in one iteration's search: a new
    model's search starts every parent afresh."""
    return f"it{iteration}:nref:{task_id}:{code_hash}"
