"""Chaos run: kill the driver, a sampler actor, a verifier actor, a sandbox worker and
redis-server at chosen points of a small job, restart, and compare with an uninterrupted run.

    python scripts/chaos.py                          # make chaos: soar, scaling and tpo, seed 0
    python scripts/chaos.py --workloads tpo --seed 3

Everything runs on a redis-server of the script's own, and each driver starts its local Ray
under a temp dir of the script's (RAY_TMPDIR): only those processes are ever signalled, and
a killed driver's Ray goes with it, as it does for a user running the job on one machine.
Per workload, a reference run goes through uninterrupted (experiment `<workload>-ref`) and
its final progress count is read (drills/chaos_jobs.py: samples drawn, rows stored); then
the chaos run (`<workload>-chaos`) is started, and each kill point (in random order) is hit
once the chaos run's own count reaches a random share (5-85%) of the reference's: kills land
while the job works, at a moment the seed fixes, however fast the machine is. The sampler is
and the verifier actor are killed at fail points (common/failpoints.py): armed at that moment,
the next sampler to finish a batch, or verifier to take a chunk, stops there until it is killed,
so the kill lands by construction; the sandbox is found by its command line. Each run starts with an empty execution cache, so
the chaos run's programs reach real sandboxes. A driver that ended (killed, or failed on the
fault) is started again, as a user would, until it finishes. A planned kill that was not made
fails the run (verdict), as does any difference from the reference.
Then the final state is compared (chaos_jobs.snapshot): counts per task or phase (a
duplicate would show there), program sets, budgets, pairs, published versions, statuses.
Prints one JSON report and `chaos: PASS`, or each reason it fails and `chaos: FAIL`, exit 1.
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

from common.failpoints import FailPoints
from common.procs import cmdline, descendants, pids_naming, ppid
from drills.chaos_jobs import JOBS, POINTS, compare, differences, progress, snapshot, summary
from store import Store, keys
from store.server import ensure_local_server, stop_local_server

ROOT = Path(__file__).resolve().parents[1]

SHARES = (0.05, 0.85)  # a kill point is hit at this share of the reference's final progress count
POLL_S = 0.2  # how often the chaos run's progress is read
FIND_WAIT_S = 600  # how long a kill point's process is looked for (a restarted driver on a busy machine
# may take minutes to verify its first program, and only then starts a sandbox) before the kill counts as not made
LEASE_TTL_S = 10  # short, so a killed driver's lease frees soon; a restart waits it out
# kill points a process of the job stops at (common/failpoints.py), once armed, until it is killed:
# found by what it announces, not by a process title (a runtime env or a renamed class changes that)
FAIL_POINTS = {"sampler": "sampler_batch", "verifier": "verifier_batch"}


def ray_roots(ray_tmp: str) -> set[int]:
    """The Ray processes started under `ray_tmp` (Ray passes its session dir to each)."""
    return set(pids_naming(ray_tmp))


def candidates(ray_tmp: str, point: str) -> list[int]:
    """The live processes for the sandbox kill point (a verifier actor's zygote or one of its
    forked children: same command line), among the Ray processes started under `ray_tmp` and
    their descendants."""
    if point != "sandbox":
        raise ValueError(f"only the sandbox is found by its command line; {point!r} stops at a fail point")
    roots = ray_roots(ray_tmp)
    return [p for p in descendants(roots) if b"zygote.py" in cmdline(p)]


def find_process(ray_tmp: str, point: str) -> int | None:
    """One of the point's candidates, at random; None when none runs now."""
    hits = candidates(ray_tmp, point)
    return random.choice(hits) if hits else None


def census(ray_tmp: str) -> str:
    """What a lookup that found nothing did see: the Ray processes and sandbox processes."""
    roots = ray_roots(ray_tmp)
    mine = descendants(roots)
    return f"{len(mine)} Ray process(es), {sum(b'zygote.py' in cmdline(p) for p in mine)} sandbox process(es)"


def describe(point: str, pid: int) -> str:
    if point == "sandbox":
        return "sandbox child" if b"zygote.py" in cmdline(ppid(pid)) else "sandbox zygote"
    return point


def forget_executions(store: Store) -> int:
    """Empty the execution cache (shared by experiments, keyed by task and program) before a
    run: the chaos run then starts from what the reference started from. Left filled, it
    answers every program the reference verified (the chaos run draws the same ones), so
    the chaos run's verifier never starts a sandbox worker and the sandbox kill cannot land.
    Returns the keys removed."""
    names = list(store.client.scan_iter(match=keys.exec_cache("*")))
    return store.client.delete(*names) if names else 0


class Cluster:
    """A redis-server of this script's own, and a temp dir for the jobs' Ray: each driver starts
    its local Ray under it (RAY_TMPDIR), so its processes are found, and only they are signalled."""

    def __init__(self, base: Path):
        self.base = base
        self.ray_tmp = tempfile.mkdtemp(prefix="chaos-", dir="/tmp")  # short: Ray's socket paths are limited
        self.redis_dir = base / "redis"
        self.redis = ensure_local_server(self.redis_dir)
        self.points = FailPoints(base / "failpoints")
        self.env = os.environ | {"RATCHET_REDIS_URL": self.redis.url, "RAY_TMPDIR": self.ray_tmp,
                                 "RATCHET_LEASE_TTL_S": str(LEASE_TTL_S), "PYTHONPATH": str(ROOT)} | self.points.env
        self.env.pop("RAY_ADDRESS", None)

    def ray_roots(self) -> set[int]:
        return ray_roots(self.ray_tmp)

    def find(self, point: str) -> int | None:
        """A live process of this cluster for the kill point (None when none runs now)."""
        if point == "redis":
            return int((self.redis_dir / "redis.pid").read_text())
        return find_process(self.ray_tmp, point)

    def describe(self, point: str, pid: int) -> str:
        return describe(point, pid)

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
        for pid in descendants(roots):
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


def run_reference(cluster: Cluster, workload: str, runs: Path, log) -> tuple[float, int]:
    """The uninterrupted run: its wall time and final progress count."""
    started = time.monotonic()
    forget_executions(Store.connect(cluster.redis.url))
    rc = start_job(cluster, workload, f"{workload}-ref", runs, log).wait()
    cluster.reap_ray()
    if rc != 0:
        raise SystemExit(f"the uninterrupted {workload} run failed (exit {rc}); see {log.name}")
    return time.monotonic() - started, progress(Store.connect(cluster.redis.url), workload, f"{workload}-ref")


def _progress(cluster: Cluster, workload: str, experiment: str) -> int:
    try:  # a fresh client: redis-server may have just been killed and started again
        return progress(Store.connect(cluster.redis.url), workload, experiment)
    except Exception:  # restarting: no progress seen this time
        return -1


def run_chaos(cluster: Cluster, workload: str, runs: Path, log, total: int, rng: random.Random) -> dict:
    """Start the job; hit each kill point once its progress count reaches the point's share of
    the reference's `total` (shares drawn by `rng`, sorted); a driver that ended is started
    again until the job finishes."""
    experiment = f"{workload}-chaos"
    forget_executions(Store.connect(cluster.redis.url))  # not the reference's results: the sandboxes must work
    points = POINTS[workload][:]
    rng.shuffle(points)
    pending = list(zip(points, sorted(max(1, int(rng.uniform(*SHARES) * total)) for _ in points), strict=True))
    kills: list[dict[str, Any]] = []
    starts = 0
    while True:
        job = start_job(cluster, workload, experiment, runs, log)
        starts += 1
        t0 = time.monotonic()
        while pending and job.poll() is None:
            point, at = pending[0]
            seen = _progress(cluster, workload, experiment)
            if seen < at:
                time.sleep(POLL_S)  # polling a count the job writes: the moment is chosen by progress
                continue
            pending.pop(0)
            if point in FAIL_POINTS:
                cluster.points.arm(FAIL_POINTS[point])
                hit = cluster.points.wait_hit(FAIL_POINTS[point], lambda j=job: j.poll() is None)
                pid = None if hit is None else hit["pid"]
                cluster.points.disarm(FAIL_POINTS[point])  # not reached before the driver ended: not later either
            else:
                pid = job.pid if point == "driver" else cluster.find(point)
            looked = time.monotonic()
            while pid is None and point not in FAIL_POINTS and job.poll() is None and time.monotonic() < looked + FIND_WAIT_S:
                time.sleep(0.5)  # not started yet (a replacement, the first chunk's sandbox): look again
                pid = cluster.find(point)
            kill = {"point": point, "at_progress": at, "seen_progress": seen, "of": total, "start": starts,
                    "at_s": round(time.monotonic() - t0, 1)}
            if pid is None or job.poll() is not None:
                why = "the run had finished" if job.poll() is not None else f"no such process within {FIND_WAIT_S} s"
                if point not in ("driver", "redis"):  # what the lookup saw, for the report
                    why += f" (seen: {census(cluster.ray_tmp)})"
                kills.append(kill | {"made": False, "why": why})
                print(json.dumps({workload: kills[-1]}), flush=True)
                continue
            kill["what"] = cluster.describe(point, pid)
            cluster.kill(point, pid)
            kills.append(kill | {"made": True})
            print(json.dumps({workload: kills[-1]}), flush=True)  # as it happens: a long run shows its kills
            if point == "driver":
                break
        rc = job.wait()
        cluster.reap_ray()
        if kills:
            kills[-1].setdefault("driver_exit", rc)
        if rc == 0:
            kills += [{"point": p, "at_progress": at, "made": False, "why": "the run had finished"} for p, at in pending]
            return {"kills": kills, "driver_starts": starts}
        if starts > 2 * len(POINTS[workload]) + 2:
            raise SystemExit(f"the chaos {workload} run did not finish after {starts} starts; see {log.name}")
        time.sleep(LEASE_TTL_S + 1)  # a killed or failed driver: wait out its lease as a user would


def verdict(report: dict[str, Any], workloads: list[str]) -> list[str]:
    """Why the chaos run fails (empty: PASS): a planned kill not made (a drill whose fault did not
    happen proves nothing), or a final state unlike the uninterrupted run's."""
    failures = []
    for w in workloads:
        kills = report[w]["kills"]
        failures += [f"{w}: the planned kill of the {k['point']} was not made ({k.get('why')})"
                     for k in kills if not k["made"]]
        failures += [f"{w}: no kill of the {p} was tried" for p in POINTS[w] if p not in {k["point"] for k in kills}]
        failures += [f"{w}: {name} differs from the uninterrupted run's" for name, ok in report[w]["checks"].items()
                     if not ok]
    return failures


def made_line(entry: dict[str, Any]) -> str:
    """One workload's faults in a line: how many of the planned were made, which, and the outcome."""
    made = [k for k in entry["kills"] if k["made"]]
    return (f"{len(made)} of {len(entry['kills'])} planned kills made "
            f"({', '.join(k['point'] + ' at ' + str(k['at_progress']) for k in made) or 'none'}); final state "
            f"{'equal to' if all(entry['checks'].values()) else 'DIFFERENT from'} the uninterrupted run's")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=list(JOBS), choices=sorted(JOBS))
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
                ref_s, total = run_reference(cluster, workload, out, log)
                started = time.monotonic()
                outcome = run_chaos(cluster, workload, out, log, total, rng)
                chaos_s = time.monotonic() - started
            store = Store.connect(cluster.redis.url)
            ref = snapshot(store, workload, f"{workload}-ref", out)
            chaos = snapshot(store, workload, f"{workload}-chaos", out)
            report[workload] = {"reference_s": round(ref_s, 1), "chaos_s": round(chaos_s, 1), "progress": total,
                                **outcome, "checks": compare(ref, chaos), "reference": summary(ref),
                                "chaos": summary(chaos)}
            if not all(report[workload]["checks"].values()) and "detail" in ref:  # soar's snapshots
                report[workload]["differences"] = differences(ref, chaos)
            print(json.dumps({workload: report[workload]}, indent=1, default=str), flush=True)
    finally:
        cluster.close()
    (out / "chaos.json").write_text(json.dumps(report, indent=1, default=str))
    failures = verdict(report, args.workloads)
    for w in args.workloads:
        print(f"chaos: {w}: {made_line(report[w])}", flush=True)
    for failure in failures:
        print(f"chaos: {failure}", flush=True)
    print(f"chaos: {'PASS' if not failures else 'FAIL'} -> {out / 'chaos.json'}", flush=True)
    ok = not failures
    return 0 if ok else 1

