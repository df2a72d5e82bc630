"""PoolConfig: the sampler pool's typed config (search/pool.py), checked when it is loaded.

Its engine_kwargs travel to every sampler actor as constructor arguments, which Ray keeps in
its cluster state: a secret there is refused; name it instead (`api_key_env`, `api_key_file`,
common/secrets.py) and the actor reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from common.placement import Demand, Strategy, check_placement
from common.redaction import is_secret_key
from common.secrets import literal_secrets
from search.engines import ENGINES, check_engine_kwargs, engine_class
from search.weight_sync import SyncPath, WeightSync, check_weight_sync, planned_path


@dataclass
class PoolConfig:
    engine: str = "transformers"  # a name in search.engines.ENGINES
    # passed to the engine (not the checkpoint); a key by reference only: api_key_env=VAR or api_key_file=PATH
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    num_actors: int = 1
    max_inflight_per_actor: int = 2  # requests sent to one actor before callers wait
    prompts_per_request: int = 8  # generate()/stream() split prompt lists into requests of this size
    num_cpus_per_actor: float = 1.0
    num_gpus_per_actor: float | None = None  # None: 1 when the cluster has GPUs, else 0
    max_request_retries: int = 3  # times a request is retried after its actor failed (each try on a fresh or other actor)
    request_timeout_s: float | None = 600.0  # a request's deadline: its actor is then taken for hung and replaced
    experiment: str | None = None  # model registry used by load(version)
    # How the actors take a version trained by the loop: memory (the training's state dict through
    # Ray's object store), disk (the published checkpoint), auto (the faster for the engine:
    # memory for transformers, disk for vllm; search/weight_sync.py has the figures)
    weight_sync: WeightSync = "auto"
    # The actors' scheduling niceness; None: Ray's default for workers (15, so drivers and its
    # daemons stay responsive). 0 competes with other processes as a bare engine in a driver
    # would; bench_sampling --also-niceness measures the difference (none beyond its noise on a
    # 2-core machine with one busy core). Applied by Ray when it starts the actor (the
    # RAY_worker_niceness of its runtime_env, as Ray Jobs does for a job's driver): no privilege needed.
    niceness: int | None = None
    # Placement (common/placement.py, Ray's names): SPREAD puts the actors on one node after
    # another, so a lost node takes a share of the pool, not all of it; DEFAULT lets Ray pack them
    scheduling_strategy: Strategy = "DEFAULT"
    resources: dict[str, float] = field(default_factory=dict)  # custom resources per actor: pins it to nodes that have them

    def __post_init__(self):
        check_placement("PoolConfig", self.scheduling_strategy, self.resources)
        if self.engine not in ENGINES:  # the name only: building a config (and --help) imports no engine
            engine_class(self.engine)  # raises, listing the known ones
        check_weight_sync(self.weight_sync, self.engine, "PoolConfig.weight_sync")
        for name in ("num_actors", "max_inflight_per_actor", "prompts_per_request"):
            if getattr(self, name) < 1:
                raise ValueError(f"PoolConfig.{name}={getattr(self, name)} must be >= 1")
        if self.max_request_retries < 0:
            raise ValueError(f"PoolConfig.max_request_retries={self.max_request_retries} must be >= 0")
        if self.niceness is not None and not 0 <= self.niceness <= 19:
            raise ValueError(f"PoolConfig.niceness={self.niceness} must be 0-19 (or null: Ray's default): "
                             "a negative one needs privileges Ray's workers do not have")
        if self.request_timeout_s is not None and self.request_timeout_s <= 0:
            raise ValueError(f"PoolConfig.request_timeout_s={self.request_timeout_s} must be > 0 (or null: no deadline)")
        if "checkpoint" in self.engine_kwargs:
            raise ValueError("PoolConfig.engine_kwargs must not hold 'checkpoint': pass it to SamplerPool(checkpoint=...)")
        for key in literal_secrets(self.engine_kwargs):  # actor arguments stay in Ray's cluster state (GCS)
            ref = f"{key}_env=VAR (or {key}_file=PATH, mode 0400)" if is_secret_key(key) else "api_key_env=VAR"
            raise ValueError(f"PoolConfig.engine_kwargs.{key} holds a secret, which Ray would keep in its cluster "
                             f"state with the actors' arguments: put it in an environment variable on every node "
                             f"(or a file) and set engine_kwargs.{ref}")
        if self.engine_kwargs:  # an actor given a wrong one crash-loops (this imports the engine's module)
            check_engine_kwargs(self.engine, self.engine_kwargs)

    @property
    def sync_path(self) -> SyncPath:
        """The path the pool's switch takes when a training hands its weights back (memory or
        disk, search/weight_sync.py): decided here once, so the loops ask whether a training
        should hand them back ("memory") and the pool switches by the same answer."""
        return planned_path(self.weight_sync, self.engine)


def pool_demand(field: str, pool: PoolConfig, gpus_exist: bool, count: int | None = None) -> Demand:
    """One sampler pool's actors, each as SamplerPool reserves it (a GPU each when the cluster
    has GPUs and num_gpus_per_actor is unset), for common.placement.check_capacity."""
    gpus = pool.num_gpus_per_actor if pool.num_gpus_per_actor is not None else (1 if gpus_exist else 0)
    return Demand(field, pool.num_actors if count is None else count,
                  {"CPU": pool.num_cpus_per_actor, "GPU": gpus, **pool.resources})
