"""The cluster recipe run as written, on a multi-node Ray cluster on this machine, with a
worker node lost mid-run: `make cluster-demo`.

    python scripts/cluster_demo.py                         # soar, scaling and tpo
    python scripts/cluster_demo.py --workloads scaling     # one workload (the slow test's)

1. A head (0 CPUs: the job server and the drivers) and two worker nodes (raylets with 4
   logical CPUs and a resource each, `w1`, `w2`), a redis-server on 127.0.0.1 over TCP with a
   password, its URL in a 0600 file named by RATCHET_REDIS_URL_FILE, a storage dir for
   checkpoints and runs (drills/local_cluster.py).
2. Each workload is submitted as the README's recipe writes it: `ray job submit --address
   http://HEAD:8265 --working-dir . --runtime-env ... -- python -m ray_jobs.<job> ...`, the
   runtime env being deploy/runtime_env.yaml with this cluster's URL file (its `pip` line
   too: a virtualenv per node over the installed packages), with the small config of the
   chaos run (drills/chaos_jobs.py) and sampler and verifier actors SPREAD over the nodes.
3. First a job asking for more than the cluster has (20 sampler actors): it must fail before
   it starts, saying so. Then per workload, an uninterrupted run (`<workload>-ref`), and the
   same run (`<workload>-lost`) during which a worker node hosting a sampler is removed
   (SIGKILL of its raylet and all it started) once the run has done a share of the
   reference's work, and (SOAR and TPO) the node running the training task is removed once
   that training saved a checkpoint. A fresh worker node joins after each loss, as a cluster
   manager would replace a machine. The final state is compared as drills/chaos.py compares
   it: counts, program sets, budgets, pairs, published versions, statuses.
4. Secrets (drills/secret_scan.py): the Redis password is looked for in the GCS server's
   memory, in Ray's record of each job (entrypoint, runtime env, metadata) and in the jobs'
   logs; it must be in none.
   An engine's API key likewise: sampler actors on both workers read it from a file named in
   engine_kwargs and send it to a local endpoint; the GCS holds the file's path, not the key.

Prints one JSON report (also written to --out/cluster.json) and `cluster-demo: PASS`; exit 1
on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from common.procs import pids_titled
from drills.chaos_jobs import JOBS, compare, differences, progress, snapshot, summary
from drills.local_cluster import LocalCluster
from drills.secret_scan import ON_TWO_WORKERS, api_key_check, password_check
from store import Store

SEARCH_SHARE = 0.3  # the search-time loss lands when the run has done this share of the reference's work
POLL_S = 0.2
TRAIN_TITLES = {"soar": "ray::train_sft", "tpo": "ray::train_dpo"}
# on top of the chaos run's small configs: actors spread over the nodes, storage every node reads,
# and a training checkpoint every 2 steps, so a lost training node leaves one to resume from
PLACEMENT = {
    "soar": ["sampler.num_actors=2", "sampler.scheduling_strategy=SPREAD", "verifier.actors=2",
             "verifier.scheduling_strategy=SPREAD", "learn.save_steps=2"],
    "scaling": ["sampler.num_actors=2", "sampler.scheduling_strategy=SPREAD"],
    "tpo": ["sampler.num_actors=2", "sampler.scheduling_strategy=SPREAD", "train.save_steps=2"],
}


def entrypoint(cluster: LocalCluster, workload: str, experiment: str) -> list[str]:
    module, config, overrides = JOBS[workload]
    storage = {"soar": [f"storage_path={cluster.storage}/checkpoints"], "tpo": [f"storage={cluster.storage}/checkpoints"],
               "scaling": []}[workload]
    return ["python", "-m", module, "--config", config, f"experiment={experiment}",
            f"runs_dir={cluster.storage}/runs", *storage, *overrides, *PLACEMENT[workload]]


def _progress(cluster: LocalCluster, workload: str, experiment: str) -> int:
    try:
        return progress(Store.connect(cluster.redis.url), workload, experiment)
    except Exception:  # the experiment's keys are not there yet
        return 0


def lose_node(cluster: LocalCluster, title: str, why: str) -> dict[str, Any]:
    """Remove the worker node running a process titled `title`; a fresh worker joins after."""
    for pid in pids_titled(title):
        node = cluster.node_of(pid)
        if node is not None and node is not cluster.ray.head_node:
            started = time.monotonic()
            name = cluster.remove(node)
            cluster.add_worker()
            return {"lost": name, "ran": title, "when": why, "made": True,
                    "remove_s": round(time.monotonic() - started, 1)}
    return {"ran": title, "when": why, "made": False, "why": f"no {title} process on a worker node"}


def training_checkpointed(cluster: LocalCluster, experiment: str) -> bool:
    """A training of `experiment` has saved a checkpoint in its work dir (training/common.py)."""
    return any((cluster.storage / "checkpoints" / experiment / "checkpoints").glob(".*.work/checkpoint-*"))


def run_lost(cluster: LocalCluster, workload: str, total: int) -> dict[str, Any]:
    experiment = f"{workload}-lost"
    job = cluster.submit(entrypoint(cluster, workload, experiment), f"{experiment}-{int(time.time())}")
    losses = []
    at = max(1, int(SEARCH_SHARE * total))
    while cluster.status(job) in ("PENDING", "RUNNING") and _progress(cluster, workload, experiment) < at:
        time.sleep(POLL_S)  # polling a count the job writes: the moment is chosen by progress
    if cluster.status(job) == "RUNNING":
        losses.append(lose_node(cluster, "ray::SamplerWorker", f"search, progress {at}/{total}"))
    if workload in TRAIN_TITLES:
        while cluster.status(job) in ("PENDING", "RUNNING") and not training_checkpointed(cluster, experiment):
            time.sleep(POLL_S)
        if cluster.status(job) == "RUNNING":
            losses.append(lose_node(cluster, TRAIN_TITLES[workload], "training, after its first checkpoint"))
    status = cluster.wait(job)
    return {"job": job, "status": status, "losses": losses, "logs": cluster.logs(job)}


def resumed(store: Store, experiment: str) -> list[dict[str, Any]]:
    """Per published version: the step its training resumed from (absent: it ran through)."""
    return [{"version": m.version, "resumed_from_step": m.metrics.get("resumed_from_step")}
            for m in store.models(experiment).list()]


def refusal_check(cluster: LocalCluster) -> dict[str, Any]:
    """A job asking for more than the cluster has fails before it starts, saying so."""
    entry = entrypoint(cluster, "scaling", "too-big")
    job = cluster.submit([*entry, "sampler.num_actors=20"], f"too-big-{int(time.time())}")
    status = cluster.wait(job)
    said = [line for line in cluster.logs(job).splitlines() if "error: the job asks for" in line]
    return {"status": status, "said": said[0].split("error: ", 1)[1] if said else None,
            "ok": status == "FAILED" and bool(said) and _progress(cluster, "scaling", "too-big") == 0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(JOBS), choices=sorted(JOBS))
    parser.add_argument("--out", default="runs/cluster-demo", help="job logs and cluster.json")
    parser.add_argument("--no-pip", action="store_true",
                        help="drop the runtime env's pip line (for nodes that have the packages: saves ~30 s a node)")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    report: dict[str, Any] = {}
    jobs, logs = [], []
    with LocalCluster(Path(tempfile.mkdtemp(prefix="rcd-", dir="/tmp")), pip=not args.no_pip) as cluster:
        report["cluster"] = {"nodes": {n: cluster.names[n] for n in cluster.names}.__len__(),
                             "job_server": cluster.job_address, "redis": f"127.0.0.1:{cluster.redis.port}",
                             "up_s": round(time.monotonic() - started, 1)}
        print(json.dumps({"cluster": report["cluster"]}), flush=True)
        report["refusal"] = refusal_check(cluster)
        print(json.dumps({"refusal": report["refusal"]}), flush=True)
        for workload in args.workloads:
            t0 = time.monotonic()
            ref_job = cluster.submit(entrypoint(cluster, workload, f"{workload}-ref"),
                                     f"{workload}-ref-{int(time.time())}")
            ref_status = cluster.wait(ref_job)
            ref_logs = cluster.logs(ref_job)
            (out / f"{workload}-ref.log").write_text(ref_logs)
            jobs.append(ref_job)
            logs.append(ref_logs)
            if ref_status != "SUCCEEDED":
                raise SystemExit(f"the uninterrupted {workload} job {ref_status}; see {out / f'{workload}-ref.log'}")
            store = Store.connect(cluster.redis.url)
            total = progress(store, workload, f"{workload}-ref")
            ref_s = time.monotonic() - t0
            t1 = time.monotonic()
            lost = run_lost(cluster, workload, total)
            (out / f"{workload}-lost.log").write_text(lost.pop("logs"))
            jobs.append(lost["job"])
            logs.append((out / f"{workload}-lost.log").read_text())
            runs = cluster.storage / "runs"
            ref = snapshot(store, workload, f"{workload}-ref", runs)
            chaos = snapshot(store, workload, f"{workload}-lost", runs) if lost["status"] == "SUCCEEDED" else {}
            nodes = json.loads((runs / f"{workload}-lost" / "summary.json").read_text()).get("nodes") \
                if lost["status"] == "SUCCEEDED" else None
            entry = {"reference_s": round(ref_s, 1), "lost_s": round(time.monotonic() - t1, 1), "progress": total,
                     **lost, "checks": compare(ref, chaos) if chaos else {"done": False},
                     "reference": summary(ref), "lost": summary(chaos) if chaos else None,
                     "nodes_served": nodes}
            if workload in TRAIN_TITLES:
                entry["training_resumed"] = resumed(store, f"{workload}-lost")
            if chaos and not all(entry["checks"].values()) and "detail" in ref:
                entry["differences"] = differences(ref, chaos)
            report[workload] = entry
            print(json.dumps({workload: entry}, indent=1, default=str), flush=True)
        report["secrets"] = password_check(cluster, jobs, logs)
        import ray  # only now: removing a node the demo's own driver were connected to is refused

        ray.init(address=cluster.gcs_address, log_to_driver=False)
        try:
            key = api_key_check(cluster.base / "etc", [cluster.gcs_pid()], **ON_TWO_WORKERS)
        finally:
            ray.shutdown()
        report["secrets"] |= {k: v for k, v in key.items() if k not in ("completions", "requests")}
        print(json.dumps({"secrets": report["secrets"]}), flush=True)
    report["total_s"] = round(time.monotonic() - started, 1)
    (out / "cluster.json").write_text(json.dumps(report, indent=1, default=str))
    ok = (all(all(report[w]["checks"].values()) for w in args.workloads) and all(report["secrets"].values())
          and report["refusal"]["ok"])
    for w in args.workloads:
        r = report[w]
        print(f"{w}: nodes lost {[x.get('lost') for x in r['losses'] if x['made']]}; counts reference "
              f"{json.dumps(r['reference'].get('counts'), default=str)[:200]} vs node lost "
              f"{json.dumps((r['lost'] or {}).get('counts'), default=str)[:200]}: "
              f"{'equal' if all(r['checks'].values()) else 'DIFFERENT'}", flush=True)
    print(f"cluster-demo: {'PASS' if ok else 'MISMATCH'} in {report['total_s']}s -> {out / 'cluster.json'}", flush=True)
    return 0 if ok else 1

