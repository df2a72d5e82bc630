"""What the chaos run (drills/chaos.py) knows of each job: its small run, its kill points, how
far a run has got (read from Redis), and the final state compared with an uninterrupted run.

Progress is a count the job writes as it goes (soar: samples drawn; scaling: questions stored
per phase; tpo: instruction rows stored per phase plus published versions), so a kill point
chosen at "30% of the reference's final count" lands while the run is working, whatever the
machine's speed, and never after it finished.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

from store import Store, keys

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
        "benchmark_triples=4", "curves.seeds=2", "curves.bootstrap=20", "sampler.num_actors=1", "max_tokens=16",
        "verify_max_tokens=16"]),
    "tpo": ("ray_jobs.tpo", "configs/tpo-demo.yaml", [
        "iterations=2", "sample.instructions=16", "sample.batch_instructions=4", "sample.k=4",
        "train.max_steps=4", "train.batch_size=4", "measure.heldout=12", "measure.seeds=[0,1]",
        "sampler.prompts_per_request=4"]),
}
POINTS = {"soar": ["driver", "sampler", "verifier", "sandbox", "redis"],
          "scaling": ["driver", "sampler", "redis"],
          "tpo": ["driver", "sampler", "redis"]}  # TPO's judge is programmatic: no verifier actor


def progress(store: Store, workload: str, experiment: str) -> int:
    """How much of the run is stored now (grows monotonically, across restarts too)."""
    c = store.client
    if workload == "soar":
        return sum(v["samples"] for v in store.archive(experiment).counts().values())
    if workload == "scaling":
        return sum(c.hlen(keys.scaling(experiment, p)) for p in ("candidates", "verdicts", "comparisons"))
    rows = sum(c.hlen(k) for k in c.scan_iter(match=keys.tpo(experiment, "*"), _type="hash"))
    return rows + len(store.models(experiment).list())


def _tpo_state(store: Store, experiment: str) -> tuple[dict[str, Any], str]:
    """Per stored phase key: rows and completions per row (hashes), or the pair counts; and a
    digest of every stored value (equal digests: the same samples, verdicts and pairs)."""
    c = store.client
    prefix = keys.tpo(experiment, "")
    phases: dict[str, Any] = {}
    digest = hashlib.sha256()
    for key in sorted(c.scan_iter(match=prefix + "*")):
        name = key.decode()[len(prefix):]
        if c.type(key) == b"hash":
            rows = {f.decode(): json.loads(v) for f, v in c.hgetall(key).items()}
            phases[name] = {"rows": len(rows), "per_row": dict(Counter(len(v) for v in rows.values()))}
            digest.update(json.dumps([name, sorted(rows.items())], sort_keys=True).encode())
        else:
            value = json.loads(c.get(key))
            phases[name] = value["counts"] if isinstance(value, dict) and "counts" in value else value
            digest.update(json.dumps([name, value], sort_keys=True).encode())
    return phases, digest.hexdigest()[:16]


def snapshot(store: Store, workload: str, experiment: str, runs: Path) -> dict[str, Any]:
    """What the comparison looks at: per-task or per-phase counts, program sets, budgets,
    published versions, the record's status (and, for TPO, its summary's per-iteration rows)."""
    c = store.client
    status = store.experiments.get(experiment).status
    if workload == "soar":
        archive = store.archive(experiment)
        records = {t: {r["code_hash"]: r for r in archive.get_task(t, with_code=False)} for t in sorted(archive.counts())}
        return {
            "counts": archive.counts(),
            "programs": {t: sorted(recs) for t, recs in records.items()},
            "budgets": {k.decode(): int(v) for k, v in sorted(c.hgetall(keys.exp(experiment, "counters")).items())
                        if b":sampled:" in k or b":refined:" in k},
            "versions": [(m.version, m.note) for m in store.models(experiment).list()],
            "status": status,
            "detail": {t: {h: [r.get("kind"), r.get("iteration"), r.get("parent"), r.get("statuses")]
                           for h, r in recs.items()} for t, recs in records.items()},  # for differences()
        }
    if workload == "tpo":
        phases, digest = _tpo_state(store, experiment)
        summary = json.loads((runs / experiment / "summary.json").read_text()) if status == "done" else {}
        rows = summary.get("iterations", []) + summary.get("baselines", {}).get("direct", [])
        return {
            "counts": {k: v for k, v in phases.items() if not k.endswith(":pairs")},
            "pairs": {k: v for k, v in phases.items() if k.endswith(":pairs")},
            "versions": [(m.version, m.note, m.parent) for m in store.models(experiment).list()],
            "summary": [(e["iteration"], e["model_version"], e.get("pairs")) for e in rows],
            "status": status,
            "info": {"state_digest": digest},  # reported, not compared (see compare)
        }
    phases = {p: {k.decode(): json.loads(v) for k, v in c.hgetall(keys.scaling(experiment, p)).items()}
              for p in ("candidates", "verdicts", "comparisons")}
    return {
        "counts": {p: len(v) for p, v in phases.items()},
        "per_question": {q: [len(v["texts"]), sum(map(len, phases["verdicts"].get(q, [])))]
                         for q, v in sorted(phases["candidates"].items())},
        "samples": phases,
        "status": status,
    }


def compare(ref: dict[str, Any], chaos: dict[str, Any]) -> dict[str, bool]:
    """One check per compared field (all must hold), and both runs done. TPO's state digest is
    reported beside them: equal when even the sampled texts match (same batches, same seeds)."""
    checks = {k: ref[k] == chaos[k] for k in ref if k not in ("status", "info", "detail")}
    checks["done"] = ref["status"] == chaos["status"] == "done"
    return checks


def summary(snap: dict[str, Any]) -> dict[str, Any]:
    """The part of a snapshot printed in the report."""
    return {k: v for k, v in snap.items() if k in ("counts", "budgets", "versions", "pairs", "info")}


def differences(ref: dict[str, Any], chaos: dict[str, Any]) -> dict[str, Any]:
    """Where two soar snapshots part (for the report when a check fails): per task, the
    programs only one run has, and the programs both have whose per-input statuses differ
    (a wall timeout in one run only, a sandbox error archived as a result), each as
    [kind, iteration, parent, statuses]."""
    out: dict[str, Any] = {}
    a, b = ref.get("detail", {}), chaos.get("detail", {})
    for task in sorted(set(a) | set(b)):
        x, y = a.get(task, {}), b.get(task, {})
        diff = {"only_reference": {h: x[h] for h in sorted(set(x) - set(y))},
                "only_chaos": {h: y[h] for h in sorted(set(y) - set(x))},
                "statuses_differ": {h: [x[h][3], y[h][3]] for h in sorted(set(x) & set(y)) if x[h][3] != y[h][3]}}
        if any(diff.values()):
            out[task] = diff
    return out
