"""A multi-node run refuses without a shared Redis or with storage other nodes cannot read; the
cluster recipe (docs/deploy.md's `ray job submit` lines, deploy/) carries what such a run needs."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from common.config import load_config
from evolution.config import SoarConfig
from ray_jobs import checks, scaling, soar, tpo
from ray_jobs.cluster import ClusterError, check_cluster
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
    assert checks.soar_shared_paths(demo) == {"storage_path": ""}  # runs/ on the driver: refused on a cluster
    assert checks.soar_shared_paths(load_config(None, SoarConfig, ["runs_dir=/nfs/runs"])) == {
        "storage_path": "/nfs/runs"}
    assert checks.tpo_shared_paths(load_config("configs/tpo-qwen.yaml", TpoConfig)) == {
        "storage": "/shared/ratchet/tpo-qwen"}
    assert soar.JOB.shared_paths is checks.soar_shared_paths


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
