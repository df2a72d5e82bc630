"""Run by tests/test_cluster.py in a process of its own (a test session's Ray is local and
single-node; this one joins a cluster of three nodes): a sampler pool SPREAD over two worker
nodes, what the node ledger records, and the capacity check against the live nodes.

    python tests/_cluster_probe.py http://127.0.0.1:PORT/v1     # prints one JSON line
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from local_cluster import LocalCluster  # noqa: E402  (sets the loopback environment before Ray loads)


def main(base_url: str) -> dict:
    with LocalCluster(Path(tempfile.mkdtemp(prefix="rcp-", dir="/tmp")), workers=2, worker_cpus=2) as cluster:
        import ray

        from common.placement import LEDGER, CapacityError, Demand, check_capacity
        from common.sampling import SamplingParams
        from search.pool import PoolConfig, SamplerPool

        ray.init(address=cluster.gcs_address)
        try:
            out: dict = {"node_ips": sorted({n["NodeManagerAddress"] for n in ray.nodes()})}
            pool = SamplerPool(PoolConfig(engine="openai", num_actors=2, num_cpus_per_actor=0.5,
                                          scheduling_strategy="SPREAD", prompts_per_request=1,
                                          engine_kwargs={"base_url": base_url, "model": "m"}))
            try:
                rows = asyncio.run(pool.generate([f"{i}+1=" for i in range(8)], SamplingParams(n=1, max_tokens=2)))
            finally:
                pool.shutdown()
            out["completions"] = sum(len(r) for r in rows)
            report = LEDGER.report(ray.nodes())
            out["served"] = {",".join(v["resources"]): v["sampler"]["items"] for v in report.values()}
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
    print(json.dumps(main(sys.argv[1])))
