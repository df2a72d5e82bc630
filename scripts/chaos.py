"""Chaos run: kill the driver, a sampler actor, a verifier actor, a sandbox worker and
redis-server at random points of a small job, restart, and compare with an uninterrupted run.

    python scripts/chaos.py                          # make chaos: soar and scaling, seed 0
    python scripts/chaos.py --workloads scaling --seed 3

Everything runs on a redis-server of the script's own, and each driver starts its local Ray
under a temp dir of the script's (RAY_TMPDIR): only those processes are ever signalled, and
a killed driver's Ray goes with it, as it does for a user running the job on one machine. Per workload, a reference run goes through uninterrupted
(experiment `<workload>-ref`); then the chaos run (`<workload>-chaos`) is started, and at a
random moment within the reference's wall time one kill point is hit (each point once, in
random order); a driver that ended (killed, or failed on the fault) is started again, as a
user would, until it finishes. Then the final archives and registries are compared: counts
per task (distinct programs, samples drawn: a duplicate would show there), the sets of
programs, budgets, published versions. Prints one JSON report; exit status 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from store import Store, keys  # noqa: E402
from store.server import ensure_local_server, stop_local_server  # noqa: E402

SOAR_TASKS = ["3c9b0459", "6150a2bd"]
JOBS = {  # workload -> (module, config, overrides for a small run)
    "soar": ("ray_jobs.soar", "configs/soar-demo.yaml", [
        f"tasks.ids=[{','.join(SOAR_TASKS)}]", "tasks.heldout_ids=[]", "iterations=2",
        "search.samples_per_task=16", "search.refinements_per_task=8", "search.batch=4",
        "search.stop_after_correct=99", "search.tasks_in_flight=2", "sampler.prompts_per_request=4",
        "learn.max_steps=6", "learn.batch_size=4", "controls.measure_models=false",
        "controls.random_prior=false", "controls.seed_only=false", "curve_budgets=[1,8,24]", "render_tasks=0",
        "filters.refine_ignores=[error,invalid_grid]"]),
    "scaling": ("ray_jobs.scaling", "configs/scaling-demo.yaml", [
        "model=models/tpo-arith-seed", "questions=8", "k_inf=4", "k_verif=2", "k_tie=2", "batch_questions=2",
        "benchmark_triples=4", "curves.seeds=2", "curves.bootstrap=20", "num_actors=1", "max_tokens=16",
        "verify_max_tokens=16"]),
}
POINTS = {"soar": ["driver", "sampler", "verifier", "sandbox", "redis"],
          "scaling": ["driver", "sampler", "redis"]}
FIND_WAIT_S = 60  # how long a kill point's process is looked for before the kill counts as not made
LEASE_TTL_S = 10  # short, so a killed driver's lease frees soon; a restart waits it out
ACTOR_TITLES = {"sampler": "ray::SamplerWorker", "verifier": "ray::ArcVerifierActorImpl"}


def _cmdline(pid: int) -> bytes:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def _ppid(pid: int) -> int:
    with contextlib.suppress(OSError, IndexError, ValueError):
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return 0


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _descends(pid: int, roots: set[int]) -> bool:
    for _ in range(64):
        if pid in roots:
            return True
        pid = _ppid(pid)
        if pid <= 1:
            return False
    return False


class Cluster:
    """A redis-server of this script's own, and a temp dir for the jobs' Ray: each driver starts
    its local Ray under it (RAY_TMPDIR), so its processes are found, and only they are signalled."""

    def __init__(self, base: Path):
        self.base = base
        self.ray_tmp = tempfile.mkdtemp(prefix="chaos-", dir="/tmp")  # short: Ray's socket paths are limited
        self.redis_dir = base / "redis"
        self.redis = ensure_local_server(self.redis_dir)
        self.env = os.environ | {"RATCHET_REDIS_URL": self.redis.url, "RAY_TMPDIR": self.ray_tmp,
                                 "RATCHET_LEASE_TTL_S": str(LEASE_TTL_S), "PYTHONPATH": str(ROOT)}
        self.env.pop("RAY_ADDRESS", None)

    def ray_roots(self) -> set[int]:
        return {p for p in _pids() if self.ray_tmp.encode() in _cmdline(p)}

    def find(self, point: str) -> int | None:
        """A live process of this cluster for the kill point (None when none runs now)."""
        if point == "redis":
            return int((self.redis_dir / "redis.pid").read_text())
        roots = self.ray_roots()
        if point in ACTOR_TITLES:
            title = ACTOR_TITLES[point].encode()
            hits = [p for p in _pids() if _cmdline(p).startswith(title) and _descends(p, roots)]
        else:  # sandbox: a verifier actor's zygote
            hits = [p for p in _pids() if b"zygote.py" in _cmdline(p) and _descends(p, roots)]
        return random.choice(hits) if hits else None

    def kill(self, point: str, pid: int) -> None:
        if point == "redis":  # SIGKILL, then the supervisor's part: start it again (same socket, password)
            stop_local_server(self.redis_dir, kill=True)
            self.redis = ensure_local_server(self.redis_dir)
        else:
            os.kill(pid, signal.SIGKILL)

    def reap_ray(self) -> None:
        """Kill what is left of a driver's local Ray after it ended (never `ray stop`: it
        kills every Ray of the user on the machine)."""
        roots = self.ray_roots()
        for pid in [p for p in _pids() if _descends(p, roots)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        self.reap_ray()
        stop_local_server(self.redis_dir)
        shutil.rmtree(self.ray_tmp, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)


def start_job(cluster: Cluster, workload: str, experiment: str, runs: Path, log) -> subprocess.Popen:
    module, config, overrides = JOBS[workload]
    argv = [sys.executable, "-m", module, "--config", config, f"experiment={experiment}", f"runs_dir={runs}",
            *overrides]
    return subprocess.Popen(argv, cwd=ROOT, env=cluster.env, stdout=log, stderr=subprocess.STDOUT)


def run_reference(cluster: Cluster, workload: str, runs: Path, log) -> float:
    started = time.monotonic()
    rc = start_job(cluster, workload, f"{workload}-ref", runs, log).wait()
    cluster.reap_ray()
    if rc != 0:
        raise SystemExit(f"the uninterrupted {workload} run failed (exit {rc}); see {log.name}")
    return time.monotonic() - started


def run_chaos(cluster: Cluster, workload: str, runs: Path, log, ref_s: float, rng: random.Random) -> dict:
    """Start the job; hit the pending kill points at random moments of this start (sorted, within
    the reference's wall time); a driver that ended is started again until the job finishes."""
    pending = POINTS[workload][:]
    rng.shuffle(pending)
    kills: list[dict[str, Any]] = []
    starts = 0
    while True:
        job = start_job(cluster, workload, f"{workload}-chaos", runs, log)
        starts += 1
        t0 = time.monotonic()
        for point, at in zip(list(pending), sorted(rng.uniform(0.05, 0.6) * ref_s for _ in pending), strict=True):
            while job.poll() is None and time.monotonic() < t0 + at:
                time.sleep(0.2)
            if job.poll() is not None:
                break
            pending.remove(point)
            pid = job.pid if point == "driver" else cluster.find(point)
            looked = time.monotonic()
            while pid is None and job.poll() is None and time.monotonic() < looked + FIND_WAIT_S:
                time.sleep(0.5)  # not started yet (a replacement, the first chunk's sandbox): look again
                pid = cluster.find(point)
            kill = {"point": point, "start": starts, "at_s": round(time.monotonic() - t0, 1)}
            if pid is None:
                kills.append(kill | {"made": False, "why": f"no such process within {FIND_WAIT_S} s"})
                continue
            cluster.kill(point, pid)
            kills.append(kill | {"made": True})
            if point == "driver":
                break
        rc = job.wait()
        cluster.reap_ray()
        if kills:
            kills[-1].setdefault("driver_exit", rc)
        if rc == 0:
            kills += [{"point": p, "made": False, "why": "the run had finished"} for p in pending]
            return {"kills": kills, "driver_starts": starts}
        if starts > 2 * len(POINTS[workload]) + 2:
            raise SystemExit(f"the chaos {workload} run did not finish after {starts} starts; see {log.name}")
        time.sleep(LEASE_TTL_S + 1)  # a killed or failed driver: wait out its lease as a user would


def snapshot(store: Store, workload: str, experiment: str) -> dict[str, Any]:
    """What the comparison looks at: per-task counts, program sets, budgets, versions."""
    c = store.client
    if workload == "soar":
        archive = store.archive(experiment)
        tasks = sorted(archive.counts())
        return {
            "counts": archive.counts(),
            "programs": {t: sorted(r["code_hash"] for r in archive.get_task(t, with_code=False)) for t in tasks},
            "budgets": {k.decode(): int(v) for k, v in sorted(c.hgetall(keys.exp(experiment, "counters")).items())
                        if b":sampled:" in k or b":refined:" in k},
            "versions": [(m.version, m.note) for m in store.models(experiment).list()],
            "status": store.experiments.get(experiment).status,
        }
    phases = {p: {k.decode(): json.loads(v) for k, v in c.hgetall(keys.scaling(experiment, p)).items()}
              for p in ("candidates", "verdicts", "comparisons")}
    return {
        "counts": {p: len(v) for p, v in phases.items()},
        "per_question": {q: [len(v["texts"]), sum(map(len, phases["verdicts"].get(q, [])))]
                         for q, v in sorted(phases["candidates"].items())},
        "samples": phases,
        "status": store.experiments.get(experiment).status,
    }


def compare(ref: dict[str, Any], chaos: dict[str, Any]) -> dict[str, bool]:
    checks = {k: ref[k] == chaos[k] for k in ref if k != "status"}
    checks["done"] = ref["status"] == chaos["status"] == "done"
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=["soar", "scaling"], choices=sorted(JOBS))
    parser.add_argument("--seed", type=int, default=0, help="chooses the kill order and moments")
    parser.add_argument("--out", default="runs/chaos", help="run dirs, job logs and chaos.json")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="ratchet-chaos-")))
    report: dict[str, Any] = {"seed": args.seed}
    try:
        for workload in args.workloads:
            with open(out / f"{workload}.log", "w") as log:
                ref_s = run_reference(cluster, workload, out, log)
                outcome = run_chaos(cluster, workload, out, log, ref_s, rng)
            store = Store.connect(cluster.redis.url)
            ref, chaos = snapshot(store, workload, f"{workload}-ref"), snapshot(store, workload, f"{workload}-chaos")
            checks = compare(ref, chaos)
            summary = {k: v for k, v in ref.items() if k in ("counts", "budgets", "versions")}
            report[workload] = {"reference_s": round(ref_s, 1), **outcome, "checks": checks, "reference": summary,
                                "chaos": {k: v for k, v in chaos.items() if k in summary}}
            print(json.dumps({workload: report[workload]}, indent=1, default=str), flush=True)
    finally:
        cluster.close()
    (out / "chaos.json").write_text(json.dumps(report, indent=1, default=str))
    ok = all(all(report[w]["checks"].values()) for w in args.workloads)
    print(f"chaos: {'PASS' if ok else 'MISMATCH'} -> {out / 'chaos.json'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
