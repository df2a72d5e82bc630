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
   same run (`<workload>-lost`) during which a worker node is removed (SIGKILL of its raylet
   and all it started) at each planned fail point (PLANNED; common/failpoints.py): a sampler
   actor that finished a batch once the run has done a share of the reference's work, and
   (SOAR and TPO) the training task just after it saved its first checkpoint. The process
   waits at the point until its node is gone, so the loss lands by construction; a point no
   process reached fails the demo. A fresh worker node joins after each loss, as a cluster
   manager would replace a machine. The final state is compared as drills/chaos.py compares
   it: counts, program sets, budgets, pairs, published versions, statuses; a lost training
   must have resumed from its checkpoint (`resumed_from_step` >= 1).
4. Secrets (drills/secret_scan.py): the Redis password is looked for in the GCS server's
   memory, in Ray's record of each job (entrypoint, runtime env, metadata) and in the jobs'
   logs; it must be in none.
   An engine's API key likewise: sampler actors on both workers read it from a file named in
   engine_kwargs and send it to a local endpoint; the GCS holds the file's path, not the key.

Prints one JSON report (also written to --out/cluster.json) and `cluster-demo: PASS`, or each
reason it fails (verdict) and `cluster-demo: FAIL`, exit 1.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

from common.failpoints import FailPoints
from drills.chaos_jobs import JOBS, compare, differences, progress, snapshot, summary
from drills.local_cluster import LocalCluster
from drills.secret_scan import ON_TWO_WORKERS, api_key_check, password_check
from store import Store

# a fault planned at a share of the reference's work (its progress count) is made when the run
# has done that share: while it works, on any machine; the others wait at their fail points
SHARES = {"sampler_batch": 0.3, "redis": 0.6}
HEAD_SHARE = 0.5
MAX_RERUNS = 2  # reruns of a faulted run whose driver a fault stopped (a user's rerun)
POLL_S = 0.2
# the faults of each `<workload>-lost` run: a worker node lost at a fail point (common/failpoints.py)
# where a sampler finished a batch or the training saved its first checkpoint; redis-server killed
PLANNED = {"soar": ["sampler_batch", "training_checkpoint", "redis"], "scaling": ["sampler_batch", "redis"],
           "tpo": ["sampler_batch", "training_checkpoint", "redis"]}
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


def lose_node(cluster: LocalCluster, hit: dict[str, Any], points: FailPoints, why: str) -> dict[str, Any]:
    """Remove the worker node of the process stopped at a fail point; a fresh worker joins after."""
    loss = {"point": hit["point"], "when": why, "pid": hit["pid"]} | {k: hit[k] for k in ("step", "prompts") if k in hit}
    node = cluster.node_of(hit["pid"])
    if node is None or node is cluster.ray.head_node:
        points.release(hit["point"])  # not a worker's process: let it go on, and say the loss was not made
        return loss | {"made": False, "why": f"pid {hit['pid']} is not on a worker node"}
    started = time.monotonic()
    name = cluster.remove(node)
    cluster.add_worker()
    return loss | {"lost": name, "made": True, "remove_s": round(time.monotonic() - started, 1)}


def run_lost(cluster: LocalCluster, workload: str, total: int) -> dict[str, Any]:
    """The run during which each of the workload's PLANNED faults is made at its moment: a
    worker node lost with a sampler stopped at its fail point once the run has done its SHARES
    of the reference's work, the training's node lost at its fail point (armed from the start:
    just after its first checkpoint), redis-server killed and restarted at its share. A fault
    not made by the time the job ended is reported so, and the demo fails on it."""
    experiment = f"{workload}-lost"
    points = FailPoints(cluster.base / "failpoints" / experiment)
    job = cluster.submit(entrypoint(cluster, workload, experiment), f"{experiment}-{int(time.time())}",
                         env_vars=points.env)
    at = {p: max(1, int(SHARES[p] * total)) for p in PLANNED[workload] if p in SHARES}
    when = {p: f"progress {at[p]}/{total}" if p in at else "training, after its first checkpoint"
            for p in PLANNED[workload]}
    pending, armed, losses = list(PLANNED[workload]), set(), []
    for point in pending:
        if point not in at:
            points.arm(point)
            armed.add(point)
    while pending and cluster.status(job) in ("PENDING", "RUNNING"):
        seen = _progress(cluster, workload, experiment)
        for point in list(pending):
            if point == "redis":
                if seen >= at[point]:
                    away = cluster.kill_redis()
                    losses.append({"point": point, "when": when[point], "made": True, "away_s": round(away, 2)})
                    pending.remove(point)
                continue
            if point not in armed and seen >= at[point]:
                points.arm(point)
                armed.add(point)
            if (hit := points.hit(point)) is not None:
                losses.append(lose_node(cluster, hit, points, when[point]))
                pending.remove(point)
        time.sleep(POLL_S)  # polling what the job writes: a count, a fail point's hit
    losses += [{"point": p, "when": when[p], "made": False, "why": "the job ended before it"} for p in pending]
    status, logs, reruns = cluster.wait(job), [], []
    while status == "FAILED" and len(reruns) < MAX_RERUNS:
        # a driver stopped by a fault (WriteUnconfirmed at a write Redis's restart cut off): rerun
        # the same line, as the error tells a user to, once the lost driver's lease is free
        logs.append(cluster.logs(job))
        reruns.append({"failed": job, "why": last_error(logs[-1]), "lease_wait_s": round(lease_free(cluster, experiment), 1)})
        job = cluster.submit(entrypoint(cluster, workload, experiment), f"{experiment}-rerun{len(reruns)}-{int(time.time())}")
        status = cluster.wait(job)
    return {"job": job, "status": status, "losses": losses, "reruns": reruns, "logs": "".join(logs) + cluster.logs(job)}


def last_error(logs: str) -> str | None:
    """The exception a failed driver ended on (a traceback's last line, `module.Error: why`)."""
    said = [line for line in logs.splitlines() if re.match(r"[\w.]+(Error|Exception|Unconfirmed|Lost|Stopped): ", line)]
    return said[-1].strip()[:300] if said else None


def lease_free(cluster: LocalCluster, experiment: str) -> float:
    """Wait until the lost driver's lease on `experiment` has expired (a resubmission before
    that is refused, naming the holder); returns the seconds waited."""
    started = time.monotonic()
    while Store.connect(cluster.redis.url).leases(experiment).holder() is not None:
        time.sleep(POLL_S)  # the lease's TTL runs out in Redis
    return time.monotonic() - started


def run_head_lost(cluster: LocalCluster, workload: str, total: int) -> dict[str, Any]:
    """The head machine lost once the run has done HEAD_SHARE of the reference's work: every Ray
    process goes (GCS, job server, the driver, the workers), a new head and workers start, and
    the same `ray job submit` line is sent again. The run resumes from Redis, where its durable
    state lives; Ray held none of it."""
    experiment = f"{workload}-head"
    argv = entrypoint(cluster, workload, experiment)
    job = cluster.submit(argv, f"{experiment}-{int(time.time())}")
    at = max(1, int(HEAD_SHARE * total))
    while cluster.status(job) in ("PENDING", "RUNNING") and _progress(cluster, workload, experiment) < at:
        time.sleep(POLL_S)  # polling a count the job writes
    fault: dict[str, Any] = {"point": "head", "when": f"progress {at}/{total}"}
    if cluster.status(job) != "RUNNING":
        return {"job": job, "status": cluster.wait(job), "losses": [fault | {"made": False, "why": "the job ended before it"}],
                "logs": cluster.logs(job)}
    seen, started = _progress(cluster, workload, experiment), time.monotonic()
    cluster.lose_head()
    fault |= {"made": True, "progress_at_loss": seen, "new_head_s": round(time.monotonic() - started, 1),
              "lease_wait_s": round(lease_free(cluster, experiment), 1)}
    first = job
    job = cluster.submit(argv, f"{experiment}-again-{int(time.time())}")
    status = cluster.wait(job)
    return {"job": job, "lost_job": first, "status": status, "losses": [fault], "logs": cluster.logs(job)}


def outcome(cluster: LocalCluster, workload: str, run: str, result: dict[str, Any], out: Path,
            logs: list[str]) -> dict[str, Any]:
    """A faulted run's report: its faults, its final state against the reference's, what
    each node served, and (a lost training) the step it resumed from."""
    experiment = f"{workload}-{run}"
    (out / f"{experiment}.log").write_text(result.pop("logs"))
    logs.append((out / f"{experiment}.log").read_text())
    store, runs = Store.connect(cluster.redis.url), cluster.storage / "runs"
    ref = snapshot(store, workload, f"{workload}-ref", runs)
    done = result["status"] == "SUCCEEDED"
    faulted = snapshot(store, workload, experiment, runs) if done else {}
    entry = {"run": run, **result, "checks": compare(ref, faulted) if done else {"done": False},
             "reference": summary(ref), run: summary(faulted) if done else None,
             "nodes_served": json.loads((runs / experiment / "summary.json").read_text()).get("nodes") if done else None}
    if "training_checkpoint" in {x["point"] for x in result["losses"]}:
        entry["training_resumed"] = resumed(store, experiment)
    if done and not all(entry["checks"].values()) and "detail" in ref:
        entry["differences"] = differences(ref, faulted)
    return entry


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


def verdict(report: dict[str, Any], workloads: list[str], head_loss: bool = False) -> list[str]:
    """Why the demo fails (empty: PASS): a planned fault not made, a training lost without
    resuming from its checkpoint, a final state unlike the reference's, a secret found, or the
    too-big job not refused. A drill whose fault did not happen proves nothing, so it fails."""
    failures = []
    for w in workloads:
        runs = [(report[w], PLANNED[w])]
        if head_loss:
            runs.append((report[w].get("head_lost") or {"run": "head", "losses": [], "checks": {}}, ["head"]))
        for entry, planned in runs:
            name = f"{w}-{entry.get('run', 'lost')}"
            made = {x["point"] for x in entry["losses"] if x["made"]}
            failures += [f"{name}: the planned fault at {x['point']} was not made ({x.get('why')})"
                         for x in entry["losses"] if not x["made"]]
            failures += [f"{name}: no fault planned at {p} was tried" for p in planned
                         if p not in {x["point"] for x in entry["losses"]}]
            if "training_checkpoint" in made and not any((v.get("resumed_from_step") or 0) >= 1
                                                          for v in entry.get("training_resumed") or []):
                failures.append(f"{name}: the training lost with its node did not resume from its checkpoint")
            if not all(entry["checks"].values()):
                failures.append(f"{name}: the final state differs from the uninterrupted run's: "
                                f"{sorted(k for k, v in entry['checks'].items() if not v)}")
    failures += [f"secrets: {k} failed" for k, v in report["secrets"].items() if not v]
    if not report["refusal"]["ok"]:
        failures.append("the job asking for more than the cluster has was not refused before it started")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(JOBS), choices=sorted(JOBS))
    parser.add_argument("--out", default="runs/cluster-demo", help="job logs and cluster.json")
    parser.add_argument("--no-head-loss", action="store_true",
                        help="leave out the runs that lose the head node (one per workload, after the rest)")
    parser.add_argument("--no-pip", action="store_true",
                        help="drop the runtime env's pip line (for nodes that have the packages: saves ~30 s a node)")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    report: dict[str, Any] = {}
    jobs, logs, totals = [], [], {}
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
            jobs.append(lost["job"])
            report[workload] = {"reference_s": round(ref_s, 1), "lost_s": round(time.monotonic() - t1, 1),
                                "progress": total, **outcome(cluster, workload, "lost", lost, out, logs)}
            totals[workload] = total
            print(json.dumps({workload: report[workload]}, indent=1, default=str), flush=True)
        report["secrets"] = password_check(cluster, jobs, logs)
        import ray  # only now: removing a node the demo's own driver were connected to is refused

        ray.init(address=cluster.gcs_address, log_to_driver=False)
        try:
            key = api_key_check(cluster.base / "etc", [cluster.gcs_pid()], **ON_TWO_WORKERS)
        finally:
            ray.shutdown()
        report["secrets"] |= {k: v for k, v in key.items() if k not in ("completions", "requests")}
        print(json.dumps({"secrets": report["secrets"]}), flush=True)
        for workload in args.workloads if not args.no_head_loss else []:  # last: a new head forgets the jobs
            t2 = time.monotonic()
            head = run_head_lost(cluster, workload, totals[workload])
            report[workload]["head_lost"] = {"s": round(time.monotonic() - t2, 1),
                                             **outcome(cluster, workload, "head", head, out, [])}
            print(json.dumps({workload: {"head_lost": report[workload]["head_lost"]}}, indent=1, default=str),
                  flush=True)
    report["total_s"] = round(time.monotonic() - started, 1)
    (out / "cluster.json").write_text(json.dumps(report, indent=1, default=str))
    failures = verdict(report, args.workloads, head_loss=not args.no_head_loss)
    for w in args.workloads:
        for r in (report[w], report[w].get("head_lost")):
            if r is None:
                continue
            made = [x for x in r["losses"] if x["made"]]
            print(f"{w}-{r['run']}: {len(made)} of {len(r['losses'])} planned faults made "
                  f"({', '.join(x['point'] + ' -> ' + x.get('lost', 'done') for x in made) or 'none'}); final "
                  f"state {'equal to' if all(r['checks'].values()) else 'DIFFERENT from'} the uninterrupted run's",
                  flush=True)
    for failure in failures:
        print(f"cluster-demo: {failure}", flush=True)
    ok = not failures
    print(f"cluster-demo: {'PASS' if ok else 'FAIL'} in {report['total_s']}s -> {out / 'cluster.json'}", flush=True)
    return 0 if ok else 1

