"""The checks a multi-node run needs before anything starts: one Redis, storage every node reads.

On one machine every process finds the machine's local Redis. On a cluster each node would
start its own, and an experiment's state would split across them without a word; a relative
storage path would likewise name a different directory on each node. So a run on more than
one alive node refuses unless RATCHET_REDIS_URL (or RATCHET_REDIS_URL_FILE) is set and every
path that other nodes read is absolute.

    check_cluster(ray.nodes(), os.environ, {"storage_path": "/shared/ratchet"})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common.config import ConfigError
from store.connection import ENV_URL, ENV_URL_FILE

README_SECTION = "docs/deploy.md"


class ClusterError(ConfigError):
    """The run's settings cannot work on this cluster; the message says what to set."""


def alive_nodes(nodes: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The nodes of `ray.nodes()` that are alive (dead ones stay listed for a while)."""
    return [n for n in nodes if n.get("Alive", n.get("alive", False))]


def check_cluster(nodes: Sequence[Mapping[str, Any]], env: Mapping[str, str],
                                shared_paths: Mapping[str, str]) -> None:
    """Refuse a multi-node run that would split its state or lose its files.

    `nodes`: `ray.nodes()`; `env`: the driver's environment (the job's runtime_env env_vars
    are in it, and workers get the same); `shared_paths`: config field -> the path every node
    must read (an empty value means the field's default, a directory on the driver's machine).
    """
    count = len(alive_nodes(nodes))
    if count <= 1:
        return
    if not (env.get(ENV_URL) or env.get(ENV_URL_FILE)):
        raise ClusterError(
            f"this Ray cluster has {count} alive nodes but neither {ENV_URL} nor {ENV_URL_FILE} is set: "
            f"each node would start its own Redis and the experiment's state would split; set one of them "
            f"in the job's runtime_env env_vars ({README_SECTION})")
    for name, path in shared_paths.items():
        if not path or not path.startswith("/"):
            shown = repr(path) if path else "'' (a default on the driver's machine)"
            raise ClusterError(
                f"{name}={shown} on a {count}-node cluster: other nodes cannot read it; set {name} to an "
                f"absolute path on a filesystem every node mounts, e.g. {name}=/shared/ratchet")
