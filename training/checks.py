"""What a job checks of training's inputs before anything starts, and what a training task
asks of the cluster.

    need_checkpoint("model.checkpoint", cfg.model.checkpoint)   # a dir, or pretrained:<name>
    need_corpus("model.seed.corpus", cfg.model.seed.corpus)     # module:function, or a .jsonl
    training_demand("learn.num_cpus", cfg.learn.num_cpus, gpus_exist)  # common.placement.Demand
"""

from __future__ import annotations

from common.checks import need_path
from common.config import ConfigError
from common.placement import Demand
from common.plugins import load_function
from training import pretrained


def need_checkpoint(field: str, path: str) -> None:
    """A checkpoint dir, or `pretrained:<name>` of a pinned registry model (fetched when the job starts)."""
    if path.startswith(pretrained.PREFIX):
        name = path[len(pretrained.PREFIX):]
        if name not in pretrained.known():
            raise ConfigError(f"{field}={path!r}: no pinned model {name!r} in models/pretrained/; "
                              f"known: {pretrained.known()}")
        return
    need_path(field, path, "checkpoint directory")


def need_corpus(field: str, source: str) -> None:
    """A seed corpus (training.corpora.load_corpus): a .jsonl file, or a `module:function` that imports."""
    if source.endswith(".jsonl"):
        need_path(field, source, "file")
    else:
        load_function(field, source, "training.corpora:digit_map")


def training_demand(field: str, cpus: float, gpus_exist: bool) -> Demand:
    """The training task (training.common.gpu_options: one GPU when the cluster has one), which
    runs while the sampler actors stay up."""
    return Demand(field, 1, {"CPU": cpus, "GPU": 1 if gpus_exist else 0})
