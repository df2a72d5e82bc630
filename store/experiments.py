"""Experiment registry: which experiments exist, their resolved configs, identity and status.

The record holds the config with its secrets redacted and the hash of the resolved config
(its identity): a rerun with another config is refused unless the caller branches
explicitly (`allow_change`), and every such change is recorded. "running" is only believed
while the experiment's lease lives (its driver renews it): without one it reads "killed".
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import redis

from common.config import ConfigError
from common.redaction import redact_secrets
from store import keys
from store.lease import lease_key
from store.records import dumps, loads

Status = Literal["created", "running", "done", "failed", "killed"]
STATUSES: tuple[str, ...] = ("created", "running", "done", "failed", "killed")
SHOWN_CHANGES = 8  # changed fields a refusal names with their values; the rest are counted
SHOWN_VALUE_CHARS = 40
MISSING = object()  # a field one of two configs does not have


class ConfigChanged(ConfigError):
    """A rerun's resolved config differs from the experiment's (or its workload does); the
    message names the changed fields with old -> new values and the two ways forward."""


@dataclass
class Experiment:
    name: str
    workload: str  # soar | scaling | tpo | ...
    config: dict[str, Any] = field(default_factory=dict)  # the resolved config, secrets redacted
    status: Status = "created"
    created: float = 0.0
    updated: float = 0.0
    error: str = ""  # why a failed run failed ("ExceptionType: message")
    config_hash: str = ""  # identity of the resolved config (common.config.config_hash); "" = unknown
    host: str = ""  # the last driver's host and pid
    pid: int = 0
    started: float = 0.0  # when the last driver started
    config_changes: list[dict[str, Any]] = field(default_factory=list)  # reruns allowed to change the config
    headline: str = ""  # the last finished run's one-line result (the job's headline)
    summary: dict[str, Any] = field(default_factory=dict)  # the last finished run's summary, secrets redacted
    finished: float = 0.0  # when the last run finished (0: never)


def changed_fields(old: Any, new: Any, path: str = "") -> list[str]:
    """Dotted paths of the fields that differ between two plain configs."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            out += changed_fields(old.get(k), new.get(k), f"{path}{k}.")
        return out
    return [] if _plain(old) == _plain(new) else [path.rstrip(".") or "(root)"]


def value_at(config: Any, dotted: str) -> Any:
    """The value at a dotted path of a plain config; `MISSING` where the path is absent."""
    for part in dotted.split(".") if dotted != "(root)" else []:
        if not isinstance(config, dict) or part not in config:
            return MISSING
        config = config[part]
    return config


def shown(value: Any, limit: int = SHOWN_VALUE_CHARS) -> str:
    """A config value as one short token: JSON (null, "text", [1, 2]), cut at `limit` characters."""
    if value is MISSING:
        return "(absent)"
    text = json.dumps(_plain(value), default=str)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def describe_changes(old: dict[str, Any], new: dict[str, Any], fields: list[str]) -> str:
    """`search.batch 2 -> 4, iterations 1 -> 3` for the first SHOWN_CHANGES fields; both configs
    are the redacted ones (a secret shows as "***" on both sides, and never changes the hash)."""
    parts = [f"{f} {shown(value_at(old, f))} -> {shown(value_at(new, f))}" for f in fields[:SHOWN_CHANGES]]
    if len(fields) > SHOWN_CHANGES:
        parts.append(f"and {len(fields) - SHOWN_CHANGES} more")
    return ", ".join(parts)


def _plain(value: Any) -> Any:
    """As the value comes back from the stored JSON: a tuple is a list there."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class ExperimentRegistry:
    def __init__(self, client: redis.Redis):
        self.client = client

    def create(self, name: str, workload: str, config: dict[str, Any], exist_ok: bool = False,
               config_hash: str = "", allow_change: bool = False) -> Experiment:
        """Register a new experiment; with exist_ok, return the existing one (resume).

        With a `config_hash`, resuming an experiment created with another config raises
        ConfigChanged unless `allow_change`, in which case the change is recorded and the
        record takes the new config.
        """
        keys.check_name(name)
        now = time.time()
        config = redact_secrets(config)
        exp = Experiment(name, workload, config, "created", now, now, config_hash=config_hash)
        if self.client.hsetnx(keys.experiments(), name, dumps(asdict(exp))):
            return exp
        existing = self.get(name)
        if not exist_ok:
            raise ValueError(f"experiment {name!r} already exists; pick another name or resume it")
        self._refuse_change(existing, workload, config, config_hash, allow_change)
        if config_hash and existing.config_hash != config_hash:
            fields = changed_fields(existing.config, config)
            if existing.config_hash or fields:
                values = {f: [None if v is MISSING else v for v in (value_at(existing.config, f), value_at(config, f))]
                          for f in fields}  # old, new: both redacted (`ratchet runs show` prints them)
                existing.config_changes.append({"at": now, "from": existing.config_hash, "to": config_hash,
                                                "fields": fields, "values": values})
            existing.config, existing.config_hash, existing.updated = config, config_hash, now
            self.client.hset(keys.experiments(), name, dumps(asdict(existing)))
        return existing

    def check_rerun(self, name: str, workload: str, config: dict[str, Any], config_hash: str,
                    allow_change: bool = False) -> None:
        """Refuse, without writing anything, what `create(..., exist_ok=True)` would refuse: the
        job runner asks before Ray starts, so a changed config costs a second, not Ray's start."""
        raw = self.client.hget(keys.experiments(), keys.check_name(name))
        if raw is not None:
            self._refuse_change(Experiment(**loads(raw)), workload, redact_secrets(config), config_hash, allow_change)

    def _refuse_change(self, existing: Experiment, workload: str, config: dict[str, Any], config_hash: str,
                       allow_change: bool) -> None:
        """ConfigChanged when `existing` is another workload's, or was run with another config
        (`config` redacted) and the caller did not allow the change. One line: the changed fields
        with old -> new values, then the two ways forward."""
        name = existing.name
        if existing.workload != workload:
            raise ConfigChanged(f"experiment={name!r} is a {existing.workload!r} experiment, not {workload!r}: "
                                f"choose another name (experiment={self._free_name(name)})")
        if not config_hash or existing.config_hash == config_hash or allow_change:
            return
        fields = changed_fields(existing.config, config)
        if not (existing.config_hash or fields):  # a record from before run identities, with the same config
            return
        changes = (describe_changes(existing.config, config, fields) if fields
                   else f"no field of the recorded config (hash {existing.config_hash} -> {config_hash})")
        raise ConfigChanged(
            f"experiment={name!r} was run with another config (changed: {changes}); its archive and models "
            f"belong to the old one. Run the new config under a new name (experiment={self._free_name(name)}), "
            "or pass --allow-config-change to continue this experiment with it (its archive and models "
            "carry on; the change is recorded)")

    def _free_name(self, name: str) -> str:
        """`name-2` (or the first free `name-N`): a suggestion for a new experiment name."""
        taken = set(self.names())
        return next(f"{name}-{i}" for i in range(2, len(taken) + 3) if f"{name}-{i}" not in taken)

    def get(self, name: str) -> Experiment:
        raw = self.client.hget(keys.experiments(), keys.check_name(name))
        if raw is None:
            raise KeyError(f"no experiment named {name!r}; known: {sorted(self.names())}")
        return self._live(Experiment(**loads(raw)))

    def _live(self, exp: Experiment) -> Experiment:
        """A "running" experiment whose driver no longer renews its lease was killed.

        Only for runs whose driver declared itself (host, pid: the job runner, which holds the
        lease); a caller that sets "running" without a lease gets it back as it wrote it."""
        if exp.status == "running" and exp.pid and not self.client.exists(lease_key(exp.name)):
            exp.status = "killed"
            exp.error = exp.error or "the driver stopped renewing its lease (killed, or cut off from Redis)"
        return exp

    def names(self) -> list[str]:
        return [n.decode() for n in self.client.hkeys(keys.experiments())]

    def list(self) -> list[Experiment]:
        return sorted(
            (self._live(Experiment(**loads(v))) for v in self.client.hvals(keys.experiments())),
            key=lambda e: e.created,
        )

    def set_result(self, name: str, summary: dict[str, Any], headline: str = "") -> Experiment:
        """Keep a finished run's summary and headline in the record (`ratchet runs` shows them)."""
        raw = self.client.hget(keys.experiments(), keys.check_name(name))
        if raw is None:
            raise KeyError(f"no experiment named {name!r}; known: {sorted(self.names())}")
        exp = Experiment(**loads(raw))
        exp.summary, exp.headline = redact_secrets(summary), redact_secrets(headline)
        exp.finished = exp.updated = time.time()
        self.client.hset(keys.experiments(), name, dumps(asdict(exp)))
        return exp

    def set_status(self, name: str, status: Status, error: str = "", **driver: Any) -> Experiment:
        """Set the status (and, for a new run, its driver: host, pid, started)."""
        if status not in STATUSES:
            raise ValueError(f"status {status!r} is not one of {STATUSES}")
        raw = self.client.hget(keys.experiments(), keys.check_name(name))
        if raw is None:
            raise KeyError(f"no experiment named {name!r}; known: {sorted(self.names())}")
        exp = Experiment(**loads(raw))
        exp.status, exp.updated, exp.error = status, time.time(), error
        for k, v in driver.items():
            if k not in ("host", "pid", "started"):
                raise ValueError(f"set_status: unknown driver field {k!r} (host, pid, started)")
            setattr(exp, k, v)
        self.client.hset(keys.experiments(), name, dumps(asdict(exp)))
        return exp
