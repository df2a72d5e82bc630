"""A multi-node run refuses without a shared Redis or with storage other nodes cannot read; the
cluster recipe (docs/deploy.md's `ray job submit` lines, deploy/) carries what such a run needs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from common.config import load_config
from common.placement import CapacityError, Demand, NodeLedger, actor_options, check_capacity
from common.ports import free_port
from evolution.checks import soar_demands, soar_shared_paths
from evolution.config import SoarConfig
from jobs.cluster import ClusterError, check_cluster
from ray_jobs import scaling, soar, tpo
from scaling.checks import scaling_demands
from search.pool_config import PoolConfig
from thinking.checks import tpo_demands, tpo_shared_paths
from thinking.config import TpoConfig

ROOT = Path(__file__).resolve().parent.parent


def node(i: int, alive: bool = True) -> dict:
    """A `ray.nodes()` entry as Ray 2.60 returns it (the fields the check reads)."""
    return {"NodeID": f"{i:056x}", "Alive": alive, "alive": alive, "NodeManagerAddress": f"10.0.0.{i}",
            "Resources": {"CPU": 8.0, f"node:10.0.0.{i}": 1.0}}


SHARED = {"storage_path": "/shared/ratchet"}
REDIS = {"RATCHET_REDIS_URL": "redis://:pw@redis.internal:6379/0"}


def test_one_node_needs_nothing_shared():
    check_cluster([node(1)], {}, {"storage_path": ""})
    check_cluster([node(1), node(2, alive=False)], {}, {"storage_path": "runs"})  # the dead node does not count


def test_several_nodes_without_a_redis_url_refuse():
    with pytest.raises(ClusterError, match=r"^this Ray cluster has 2 alive nodes but neither RATCHET_REDIS_URL nor "
                                           r"RATCHET_REDIS_URL_FILE is set: each node would start its own Redis"):
        check_cluster([node(1), node(2)], {}, SHARED)
    check_cluster([node(1), node(2)], REDIS, SHARED)
    check_cluster([node(1), node(2)], {"RATCHET_REDIS_URL_FILE": "/etc/ratchet/redis-url"}, SHARED)


@pytest.mark.parametrize("path, shown", [("", "'' (a default on the driver's machine)"), ("runs/shared", "'runs/shared'"),
                                         ("~/ckpt", "'~/ckpt'")])
def test_several_nodes_with_a_relative_storage_path_refuse(path, shown):
    with pytest.raises(ClusterError, match=re.escape(f"storage_path={shown} on a 3-node cluster: other nodes cannot "
                                                     "read it; set storage_path to an absolute path")):
        check_cluster([node(1), node(2), node(3)], REDIS, {"storage_path": path})


def test_the_jobs_name_the_storage_every_node_reads():
    demo = load_config("configs/soar-demo.yaml", SoarConfig)
    assert soar_shared_paths(demo) == {"storage_path": ""}  # runs/ on the driver: refused on a cluster
    assert soar_shared_paths(load_config(None, SoarConfig, ["runs_dir=/nfs/runs"])) == {
        "storage_path": "/nfs/runs"}
    assert tpo_shared_paths(load_config("configs/tpo-qwen.yaml", TpoConfig)) == {
        "storage": "/shared/ratchet/tpo-qwen"}
    assert soar.JOB.shared_paths is soar_shared_paths


# --- the recipe: docs/deploy.md's submit lines, the runtime env, the image and the RayJob -------------
def submit_lines(readme: str) -> dict[str, str]:
    """docs/deploy.md's `ray job submit` commands with a runtime env (continuation lines joined), by job."""
    found = {}
    for line in readme.replace("\\\n", " ").splitlines():
        m = re.search(r"ray job submit .*--runtime-env .*-- python -m ray_jobs\.(\w+)", line)
        if m:
            found[m.group(1)] = line.split("#")[0].strip()
    return found


@pytest.mark.parametrize("job", [soar, scaling, tpo])
def test_readme_submit_lines_pass_the_multi_node_check_with_pinned_packages(job):
    name = job.__name__.rpartition(".")[2]
    args = shlex.split(submit_lines((ROOT / "docs" / "deploy.md").read_text())[name])
    runtime_env = yaml.safe_load((ROOT / args[args.index("--runtime-env") + 1]).read_text())
    assert (ROOT / runtime_env["pip"]).name == "requirements.txt" and (ROOT / runtime_env["pip"]).exists()
    command = args[args.index("--") + 1:]
    assert command[:3] == ["python", "-m", f"ray_jobs.{name}"]
    config = command[command.index("--config") + 1] if "--config" in command else None
    cfg = load_config(ROOT / config if config else None, job.JOB.config_cls, [a for a in command[3:] if "=" in a])
    shared = job.JOB.shared_paths(cfg)
    # every job names what other nodes read; the scaling demo reads only its shipped model, which
    # travels in the working dir
    assert shared or (name == "scaling" and cfg.model == "models/scaling-arith-seed")
    check_cluster([node(1), node(2)], runtime_env["env_vars"], shared)  # the line as written passes
    with pytest.raises(ClusterError):
        check_cluster([node(1), node(2)], {}, shared)  # without its runtime_env it would not


def test_the_runtime_env_pins_every_dependency_as_pyproject_allows():
    import tomllib
    from packaging.requirements import Requirement

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = {Requirement(r).name: Requirement(r) for r in pyproject}
    pinned = {}
    for line in (ROOT / "deploy" / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line  # pinned, not a range
            pinned[req.name] = spec.version
    assert set(pinned) == set(wanted)
    for name, version in pinned.items():
        assert wanted[name].specifier.contains(version), f"{name}=={version} is outside pyproject's {wanted[name]}"


def test_dockerfile_steps_are_the_makefiles():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, re.M))
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    runs = re.findall(r"^RUN (.+)$", dockerfile, re.M)
    made = [t for r in runs for t in re.findall(r"\bmake ([\w$(){}-]+)", r)]
    assert made and all(t in targets or t.startswith("$") for t in made), made
    args = dict(re.findall(r"^ARG (\w+)=(\S+)", dockerfile, re.M))
    assert args["SETUP"] == "setup" and "setup-gpu" in targets  # the GPU image: --build-arg SETUP=setup-gpu
    assert "pip install" not in dockerfile  # packages come from the Makefile's set-up only


def test_rayjob_example_uses_kuberay_field_names():
    doc = yaml.safe_load((ROOT / "deploy" / "rayjob.yaml").read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("ray.io/v1", "RayJob")
    spec = doc["spec"]
    # field names of KubeRay's RayJob CRD (ray.io/v1 RayJobSpec)
    assert set(spec) <= {"entrypoint", "runtimeEnvYAML", "rayClusterSpec", "clusterSelector", "shutdownAfterJobFinishes",
                         "ttlSecondsAfterFinished", "activeDeadlineSeconds", "submissionMode", "jobId",
                         "metadata", "entrypointNumCpus", "entrypointNumGpus", "entrypointResources",
                         "submitterPodTemplate", "backoffLimit", "suspend"}
    assert spec["entrypoint"].startswith("python -m ray_jobs.")
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert "RATCHET_REDIS_URL_FILE" in runtime_env["env_vars"] or "RATCHET_REDIS_URL" in runtime_env["env_vars"]
    storage = [a for a in shlex.split(spec["entrypoint"]) if a.startswith(("storage_path=", "storage="))]
    assert storage and storage[0].split("=", 1)[1].startswith("/")
    cluster = spec["rayClusterSpec"]
    assert set(cluster) <= {"rayVersion", "headGroupSpec", "workerGroupSpecs", "enableInTreeAutoscaling",
                            "autoscalerOptions", "headServiceAnnotations"}
    assert cluster["rayVersion"] == "2.60.0"  # the pinned ray
    head = cluster["headGroupSpec"]
    assert {"rayStartParams", "template"} <= set(head)
    for group in cluster["workerGroupSpecs"]:
        assert {"groupName", "replicas", "rayStartParams", "template"} <= set(group)
    images = {c["image"] for g in [head, *cluster["workerGroupSpecs"]] for c in g["template"]["spec"]["containers"]}
    assert len(images) == 1  # driver and workers run the same image (deploy/Dockerfile)
    mounts = [m["mountPath"] for g in [head, *cluster["workerGroupSpecs"]]
              for c in g["template"]["spec"]["containers"] for m in c.get("volumeMounts", [])]
    # the storage and the Redis URL file are mounted in every pod
    assert storage[0].split("=", 1)[1].startswith("/shared/ratchet") and {"/shared/ratchet", "/etc/ratchet"} <= set(mounts)
    assert len(mounts) == 2 * (1 + len(cluster["workerGroupSpecs"]))
    cfg = load_config(ROOT / "configs/soar-qwen.yaml", SoarConfig,
                      [a for a in shlex.split(spec["entrypoint"]) if "=" in a])
    check_cluster([node(1), node(2)], runtime_env["env_vars"], soar.JOB.shared_paths(cfg))
    json.dumps(doc)  # plain data: kubectl apply reads it


# --- placement: policy in the config, capacity refused up front, which node served how much ---
def ray_node(i: int, cpus: float, **custom: float) -> dict:
    return node(i) | {"NodeID": f"n{i}", "Resources": {"CPU": cpus, f"node:10.0.0.{i}": 1.0, **custom}}


def test_placement_fields_use_rays_names_and_refuse_others():
    assert PoolConfig(scheduling_strategy="SPREAD", resources={"w1": 1}).resources == {"w1": 1}
    with pytest.raises(ValueError, match=r"PoolConfig.scheduling_strategy='spread' must be one of \['DEFAULT', 'SPREAD'\]"):
        PoolConfig(scheduling_strategy="spread")
    with pytest.raises(ValueError, match=r"PoolConfig.resources.CPU: CPU has its own field"):
        PoolConfig(resources={"CPU": 2})
    with pytest.raises(ValueError, match=r"command line \(verifier.resources={w1: 0}\): verifier.resources.w1=0.0 must be a number > 0"):
        load_config(None, SoarConfig, ["verifier.resources={w1: 0}"])
    assert actor_options(strategy="SPREAD", resources={"w1": 1}) == {"scheduling_strategy": "SPREAD",
                                                                     "resources": {"w1": 1}}


def test_a_job_asking_more_than_the_cluster_has_is_refused_naming_the_field():
    nodes = [ray_node(1, 0.0), ray_node(2, 4.0, w1=1), ray_node(3, 4.0, w2=1), node(4, alive=False)]
    check_capacity(nodes, [Demand("sampler.num_actors", 8, {"CPU": 1.0})])  # 8 CPUs on two nodes: fits
    with pytest.raises(CapacityError, match=re.escape("the job asks for CPU: 9 at once (sampler.num_actors: 8 x CPU: 1; "
                                                      "verifier.actors: 1 x CPU: 1) but the cluster's 3 alive node(s) "
                                                      "have CPU: 8; lower those fields or add nodes")):
        check_capacity(nodes, [Demand("sampler.num_actors", 8, {"CPU": 1.0}), Demand("verifier.actors", 1, {"CPU": 1})])
    with pytest.raises(CapacityError, match=r"^sampler.num_actors: each one needs CPU: 5, which no alive node has"):
        check_capacity(nodes, [Demand("sampler.num_actors", 1, {"CPU": 5.0})])
    # phases take turns, each beside what is always up: 6 + max(2, 1) fits 8 CPUs, 6 + 3 does not
    check_capacity(nodes, [Demand("sampler.num_actors", 6, {"CPU": 1.0}), Demand("learn.num_cpus", 1, {"CPU": 2.0}, "learn"),
                           Demand("mix", 1, {"CPU": 1.0}, "mix")])
    with pytest.raises(CapacityError, match=r"CPU: 9 at once \(sampler.num_actors: 6 x CPU: 1; mix: 1 x CPU: 3\)"):
        check_capacity(nodes, [Demand("sampler.num_actors", 6, {"CPU": 1.0}), Demand("learn.num_cpus", 1, {"CPU": 2.0}, "learn"),
                               Demand("mix", 1, {"CPU": 3.0}, "mix")])
    with pytest.raises(CapacityError, match=r"^verifier.actors: each one needs CPU: 1, gpu_node: 1, which no alive node"):
        check_capacity(nodes, [Demand("verifier.actors", 1, {"CPU": 1.0, "gpu_node": 1})])


def test_the_jobs_demands_are_what_their_pools_and_trainings_reserve():
    demo = load_config("configs/soar-demo.yaml", SoarConfig)
    assert [(d.field, d.count, dict(d.per_unit)) for d in soar_demands(demo, gpus_exist=False)] == [
        ("sampler.num_actors", 1, {"CPU": 0.5, "GPU": 0}), ("verifier.actors", 1, {"CPU": 1}),
        ("learn.num_cpus", 1, {"CPU": 0.5, "GPU": 0})]
    one_machine = [ray_node(1, 2.0)]  # `make demo` on 2 cores: every demo fits
    check_capacity(one_machine, soar_demands(demo, False))
    check_capacity(one_machine, scaling_demands(load_config("configs/scaling-demo.yaml", scaling.JOB.config_cls),
                                                       False))
    check_capacity(one_machine, tpo_demands(load_config("configs/tpo-demo.yaml", TpoConfig), False))
    # the mix's pools come up after the last training: the demo with a mix still fits on 2 cores
    mixed = load_config("configs/soar-demo.yaml", SoarConfig, ["mix.enabled=true"])
    assert [d.phase for d in soar_demands(mixed, False)] == [None, None, "learn", "mix"]
    check_capacity(one_machine, soar_demands(mixed, False))
    qwen = load_config("configs/soar-qwen.yaml", SoarConfig)
    with pytest.raises(CapacityError, match="sampler.num_actors"):  # 8 GPU samplers on a CPU machine
        check_capacity(one_machine, soar_demands(qwen, gpus_exist=True))


def test_the_node_ledger_reports_per_node_and_role():
    ledger = NodeLedger()
    ledger.add("sampler", "n2", 8)
    ledger.add("sampler", "n2", 4)
    ledger.add("verifier", "n3", 64)
    ledger.add("sampler", None, 1)  # an actor gone before it said where it ran
    report = ledger.report([ray_node(2, 4.0, w1=1), ray_node(3, 4.0, w2=1) | {"Alive": False}])
    assert report == {"n2": {"alive": True, "resources": ["w1"], "sampler": {"requests": 2, "items": 12}},
                      "n3": {"alive": False, "resources": ["w2"], "verifier": {"requests": 1, "items": 64}},
                      "unknown": {"alive": False, "resources": [], "sampler": {"requests": 1, "items": 1}}}


def test_on_three_nodes_spread_samplers_serve_from_both_workers_keys_stay_out_of_the_gcs_and_capacity_is_live():
    """A real cluster (ray.cluster_utils: a head with no CPUs, two 2-CPU workers) in a process of
    its own, on 127.0.0.1 only: SPREAD puts one sampler actor on each worker, the ledger
    credits both; each actor reads the engine's API key from its file, so the GCS (which keeps
    the actors' arguments) holds the path, never the key; the capacity check reads the live
    nodes. One cluster start (~15 s)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_REDIS_URL")} | {"PYTHONPATH": str(ROOT)}
    probe = subprocess.run([sys.executable, str(ROOT / "tests" / "_cluster_probe.py")], capture_output=True, text=True,
                           env=env, timeout=600)
    assert probe.returncode == 0, probe.stderr[-3000:]
    out = json.loads(probe.stdout.strip().splitlines()[-1])
    assert out["node_ips"] == ["127.0.0.1"]  # every node on loopback
    assert out["api_key"] == {"completions": 8, "requests": 8, "endpoint_got_the_key": True,
                              "gcs_holds_key_file_path": True, "key_not_in_gcs": True}
    assert set(out["served"]) == {"w1", "w2"} and sum(out["served"].values()) == 8, out["served"]
    refusals = out["refusals"]
    assert refusals["fits"] is None
    assert refusals["total"].startswith("the job asks for CPU: 5 at once") and "have CPU: 4" in refusals["total"]
    assert refusals["per_node"].startswith("sampler.num_cpus_per_actor: each one needs CPU: 3, which no alive node")
    assert refusals["custom"].startswith("sampler.resources: each one needs gpu_node: 1")


# --- the recipe run on a cluster on this machine, a worker node lost mid-run ------------------
@pytest.mark.slow
@pytest.mark.parametrize("workload", ["scaling", "soar", "tpo"])
def test_the_recipe_runs_on_three_nodes_and_a_lost_node_changes_nothing(workload, tmp_path):
    """scripts/cluster_demo.py (make cluster-demo) for one workload: the README's `ray job submit`
    line against a head and two workers, Redis over TCP from a URL file; a worker node removed
    mid-search (and, SOAR and TPO, mid-training) and redis-server killed, then the head lost and
    the job sent again; each the same final state as an uninterrupted run; the Redis password
    nowhere in Ray's GCS, its job records or the jobs' logs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_REDIS_URL")} | {"PYTHONPATH": str(ROOT)}
    demo = subprocess.run([sys.executable, str(ROOT / "scripts" / "cluster_demo.py"), "--workloads", workload,
                           "--out", str(tmp_path)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=3000)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    report = json.loads((tmp_path / "cluster.json").read_text())
    entry = report[workload]
    from drills.cluster_demo import PLANNED

    assert entry["status"] == "SUCCEEDED" and all(entry["checks"].values()), entry["checks"]
    assert sorted(x["point"] for x in entry["losses"] if x["made"]) == sorted(PLANNED[workload]), entry["losses"]
    assert all(report["secrets"].values()), report["secrets"]
    if workload in ("soar", "tpo"):  # the training on the lost node went on from its checkpoint elsewhere
        assert any(v["resumed_from_step"] for v in entry["training_resumed"]), entry["training_resumed"]
    head = entry["head_lost"]  # every Ray process lost, a new head, the same line sent again
    assert [x["made"] for x in head["losses"]] == [True] and all(head["checks"].values()), head


def test_the_cluster_demo_passes_only_when_every_planned_fault_was_made_and_the_training_resumed():
    """Of five planned node losses only the three sampler ones happened, and the demo said PASS:
    its verdict ignored `made`. Now a fault not made, or a lost training that started over
    instead of resuming from its checkpoint, is a reason to fail."""
    from drills import cluster_demo

    def report(made: dict[str, bool], resumed: int | None = 2, head: bool | None = True) -> dict:
        losses = [{"point": p, "made": m, **({} if m else {"why": "the job ended before it"})} for p, m in made.items()]
        entry = {"run": "lost", "losses": losses, "checks": {"counts": True},
                 "training_resumed": [{"version": "v1", "resumed_from_step": resumed}]}
        if head is not None:
            entry["head_lost"] = {"run": "head", "losses": [{"point": "head", "made": head}], "checks": {"counts": True}}
        return {"tpo": entry, "secrets": {"password_not_in_gcs": True}, "refusal": {"ok": True}}

    every = dict.fromkeys(cluster_demo.PLANNED["tpo"], True)
    assert "redis" in every and "training_checkpoint" in every
    assert cluster_demo.verdict(report(every), ["tpo"], head_loss=True) == []
    assert cluster_demo.verdict(report(every | {"training_checkpoint": False}, resumed=None), ["tpo"]) == [
        "tpo-lost: the planned fault at training_checkpoint was not made (the job ended before it)"]
    assert cluster_demo.verdict(report(every, resumed=None), ["tpo"]) == [
        "tpo-lost: the training lost with its node did not resume from its checkpoint"]
    assert cluster_demo.verdict(report({"sampler_batch": True, "redis": True}), ["tpo"]) == [
        "tpo-lost: no fault planned at training_checkpoint was tried"]
    assert cluster_demo.verdict(report(every, head=None), ["tpo"], head_loss=True) == [
        "tpo-head: no fault planned at head was tried"]
    assert cluster_demo.verdict(report(every, head=False), ["tpo"], head_loss=True)[0].startswith(
        "tpo-head: the planned fault at head was not made")


def test_a_rerun_says_which_error_stopped_the_driver_not_rays_chatter_after_it():
    """Redis killed mid-write stops a driver with WriteUnconfirmed, and the demo reruns it; the
    report names that error, not the raylet's state dump (which says 'ReportJobError') after it."""
    from drills.cluster_demo import last_error

    logs = "\n".join([
        "Traceback (most recent call last):",
        '  File "store/lease.py", line 80, in watch_failed',
        "store.lease.WriteUnconfirmed: the connection to Redis broke at EXEC (...); Rerun the job",
        "    [state-dump] \tray::rpc::ObservabilityPubSubService.grpc_client.ReportJobError - 1 total",
        "(raylet) Task _with_weights failed. Error: Task failed because the node it was running on is dead"])
    assert last_error(logs) == "store.lease.WriteUnconfirmed: the connection to Redis broke at EXEC (...); Rerun the job"
    assert last_error("job succeeded\n") is None

def test_the_clusters_redis_listens_on_tcp_with_a_password_and_its_url_file_is_private(tmp_path):
    import redis

    from store.connection import connect
    from store.tcp import restart_tcp_server, start_tcp_server, stop_tcp_server, write_url_file

    with pytest.raises(ValueError, match="port 6379 is Ray's head's"):
        start_tcp_server(tmp_path / "r0", host="127.0.0.1", port=6379)
    port = free_port()
    server = start_tcp_server(tmp_path / "redis", host="127.0.0.1", port=port)
    try:
        assert server.url == f"redis://:{server.password}@127.0.0.1:{port}/0"
        url_file = tmp_path / "etc" / "redis-url"
        write_url_file(server.url, url_file)
        assert url_file.stat().st_mode & 0o777 == 0o600
        assert connect(url_file.read_text().strip()).ping()
        with pytest.raises(redis.AuthenticationError), redis.Redis(host="127.0.0.1", port=port) as anonymous:
            anonymous.set("k", "v")  # no password: refused
        assert server.password not in " ".join(Path(f"/proc/{server.pid}/cmdline").read_text().split("\0"))
        connect(server.url).set("written", "before the kill")
        os.kill(server.pid, signal.SIGKILL)  # as a crash: no SHUTDOWN, nothing flushed on the way out
        with contextlib.suppress(ChildProcessError):
            os.waitpid(server.pid, 0)
        while Path(f"/proc/{server.pid}").exists():
            time.sleep(0.01)  # gone (reaped by init: it daemonized)
        server = restart_tcp_server(server)  # its supervisor's part: same port, password and append-only file
        assert connect(url_file.read_text().strip()).get("written") == b"before the kill"
    finally:
        stop_tcp_server(server)
