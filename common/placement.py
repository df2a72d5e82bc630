"""Where a pool's actors run, what a job asks of the cluster, and which node served how much.

Placement uses Ray's own words: `scheduling_strategy` is "DEFAULT" (Ray packs actors where
it finds room) or "SPREAD" (one node after another, so losing a node loses a share of each
pool, not a whole pool); `resources` are custom resources each actor needs, which pins a
pool to the nodes started with them (`ray start --resources '{"verifier_node": 8}'`):
samplers on GPU nodes, verifiers on CPU nodes.

    options = actor_options(strategy="SPREAD", resources={"verifier_node": 1})
    check_capacity(ray.nodes(), [Demand("sampler", 2, {"CPU": 0.5}), Demand("verifier", 1, {"CPU": 1})])

A job whose actors cannot all be placed would wait forever inside Ray (an infeasible actor
only logs a warning); `check_capacity` refuses it before anything starts, naming the field.

The ledger counts, in the driver, what each node's actors answered: the pools add to it as
requests return, and the job runner writes it into summary.json (`nodes`). It is module
state because pools are built deep inside the workloads (scaling's in its experiment), and
one driver process runs one job.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from common.config import ConfigError

Strategy = Literal["DEFAULT", "SPREAD"]
STRATEGIES = ("DEFAULT", "SPREAD")
# Ray's own resources, which every node reports; anything else is a custom resource
BUILTIN = ("CPU", "GPU", "memory", "object_store_memory")


class CapacityError(ConfigError):
    """The job asks for more than the cluster has; the message names the field and the fix."""


def check_placement(owner: str, strategy: str, resources: Mapping[str, float]) -> None:
    """Config-time check (no I/O) of a pool's placement fields; raises ValueError naming them."""
    if strategy not in STRATEGIES:
        raise ValueError(f"{owner}.scheduling_strategy={strategy!r} must be one of {list(STRATEGIES)} (Ray's names)")
    for name, amount in resources.items():
        if name in BUILTIN:
            raise ValueError(f"{owner}.resources.{name}: {name} has its own field (num_cpus/num_gpus); "
                             "resources holds custom resources only")
        if not isinstance(amount, int | float) or amount <= 0:
            raise ValueError(f"{owner}.resources.{name}={amount!r} must be a number > 0")


def actor_options(*, strategy: str, resources: Mapping[str, float]) -> dict[str, Any]:
    """Ray actor options for the placement fields (merged into the pool's own)."""
    options: dict[str, Any] = {"scheduling_strategy": strategy}
    if resources:
        options["resources"] = dict(resources)
    return options


@dataclass(frozen=True)
class Demand:
    """What one kind of actor (or task) asks of the cluster: `count` of them, each `per_unit`."""

    field: str  # the config field that sets it, named in the refusal (e.g. "sampler.num_actors")
    count: int
    per_unit: Mapping[str, float]
    # demands of different phases never run together (SOAR trains, then measures a mix); None: always up
    phase: str | None = None


def _alive(nodes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [n for n in nodes if n.get("Alive", n.get("alive", False))]


def _fmt(resources: Mapping[str, float], zeros: bool = False) -> str:
    return ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items()) if v or zeros) or "nothing"


def check_capacity(nodes: Sequence[Mapping[str, Any]], demands: Sequence[Demand]) -> None:
    """Refuse a job whose actors and tasks cannot all run at once on the alive nodes: one
    unit that fits on no single node, or more in total than the nodes have together (the
    demands with no phase plus those of any one phase)."""
    alive = _alive(nodes)
    if not alive:
        return
    for d in demands:
        wanted = {k: v for k, v in d.per_unit.items() if v}
        if wanted and not any(all(n["Resources"].get(k, 0) >= v for k, v in wanted.items()) for n in alive):
            have = "; ".join(_fmt({k: n["Resources"].get(k, 0) for k in wanted}, zeros=True) for n in alive)
            raise CapacityError(
                f"{d.field}: each one needs {_fmt(wanted)}, which no alive node has (nodes: {have}); lower it, "
                "or start nodes with those resources (`ray start --num-cpus/--num-gpus/--resources`)")
    total: dict[str, float] = defaultdict(float)
    for n in alive:
        for k, v in n["Resources"].items():
            total[k] += v
    always = [d for d in demands if d.phase is None]
    phases = sorted({d.phase for d in demands if d.phase is not None}) or [None]
    for phase in phases:
        together = always + [d for d in demands if phase is not None and d.phase == phase]
        asked: dict[str, float] = defaultdict(float)
        for d in together:
            for k, v in d.per_unit.items():
                asked[k] += d.count * v
        short = {k: v for k, v in asked.items() if v > total.get(k, 0) + 1e-9}
        if short:
            parts = "; ".join(f"{d.field}: {d.count} x {_fmt(d.per_unit)}" for d in together if d.count)
            raise CapacityError(
                f"the job asks for {_fmt(short)} at once ({parts}) but the cluster's {len(alive)} alive node(s) "
                f"have {_fmt({k: total.get(k, 0) for k in short}, zeros=True)}; lower those fields or add nodes")


@dataclass
class NodeLedger:
    """Per role and node: requests answered and items (prompts, programs) in them."""

    served: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    # node -> its custom resources, noted when it first serves: Ray lists a dead node without them
    names: dict[str, list[str]] = field(default_factory=dict)

    def add(self, role: str, node: str | None, items: int) -> None:
        row = self.served.setdefault(role, {}).setdefault(node or "unknown", {"requests": 0, "items": 0})
        row["requests"] += 1
        row["items"] += items
        if node and node not in self.names:
            self.names[node] = custom_resources(_ray_node(node))

    def report(self, nodes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """summary.json's `nodes`: per node (its id), whether it is alive now, its custom
        resources (the names a cluster gives its nodes), and what each role served on it."""
        info = {n["NodeID"]: n for n in nodes}
        out: dict[str, Any] = {}
        for role, per_node in sorted(self.served.items()):
            for node, row in sorted(per_node.items()):
                n = info.get(node, {})
                entry = out.setdefault(node, {
                    "alive": bool(n.get("Alive", False)),
                    "resources": custom_resources(n) or self.names.get(node, []),
                })
                entry[role] = dict(row)
        return out

    def clear(self) -> None:
        self.served.clear()
        self.names.clear()


def custom_resources(node: Mapping[str, Any]) -> list[str]:
    """A `ray.nodes()` entry's custom resource names (how a cluster names its kinds of node)."""
    return sorted(k for k in node.get("Resources", {}) if k not in BUILTIN and not k.startswith("node:"))


def _ray_node(node: str) -> Mapping[str, Any]:
    """`ray.nodes()`'s entry for `node` ({} outside Ray or when it is not listed)."""
    import ray

    if not ray.is_initialized():
        return {}
    return next((n for n in ray.nodes() if n["NodeID"] == node), {})


LEDGER = NodeLedger()  # this driver's (see the module docstring)


def node_id() -> str | None:
    """The Ray node this process runs on (None outside Ray); what an actor reports to the ledger."""
    import ray

    if not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_node_id()
