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
