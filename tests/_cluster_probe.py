"""Run by tests/test_cluster.py in a process of its own (a test session's Ray is local and
single-node; this one joins a cluster of three nodes): sampler actors SPREAD over two worker
nodes with an API key read from a file, what the node ledger records, and the capacity check
against the live nodes.

    python tests/_cluster_probe.py            # prints one JSON line
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from drills.local_cluster import LocalCluster  # noqa: E402
from drills.secret_scan import ON_TWO_WORKERS, api_key_check  # noqa: E402


def main() -> dict:
    with LocalCluster(Path(tempfile.mkdtemp(prefix="rcp-", dir="/tmp")), workers=2, worker_cpus=2) as cluster:
        import ray

        from common.placement import LEDGER, CapacityError, Demand, check_capacity

        ray.init(address=cluster.gcs_address)
        try:
            out: dict = {"node_ips": sorted({n["NodeManagerAddress"] for n in ray.nodes()})}
            out["api_key"] = api_key_check(cluster.base / "etc", [cluster.gcs_pid()], **ON_TWO_WORKERS)
            out["served"] = {",".join(v["resources"]): v["sampler"]["items"] for v in LEDGER.report(ray.nodes()).values()}
            refusals = {}
            for name, demands in {"total": [Demand("sampler.num_actors", 5, {"CPU": 1.0})],
                                  "per_node": [Demand("sampler.num_cpus_per_actor", 1, {"CPU": 3.0})],
                                  "custom": [Demand("sampler.resources", 1, {"gpu_node": 1.0})],
                                  "fits": [Demand("sampler.num_actors", 4, {"CPU": 1.0})]}.items():
                try:
                    check_capacity(ray.nodes(), demands)
                    refusals[name] = None
                except CapacityError as e:
                    refusals[name] = str(e)
            out["refusals"] = refusals
        finally:
            ray.shutdown()
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
