"""The SOAR loop: search -> hindsight data -> train -> publish -> reload -> measure, per iteration.

    base = base_model(cfg, store, task_ids)
    loop = SoarLoop(cfg, store=store, tasks=tasks, heldout=heldout, base=base, sampler=pool,
                    verifier=verify, run_dir=run_dir)
    summary = await loop.fit()

A plain class with one method per step (as OpenRLHF's trainer holds its loop in `fit`): the
job file only wires Ray pools into it, and a test can hand it an in-process engine. The
sampler is anything with SamplerPool's `submit`, `stats`, `switch`, `load_checkpoint` and
`version`. After each training the samplers take the new weights from memory or from the
published checkpoint (`sampler.weight_sync`, search/weight_sync.py).
Every step records what it did in the store, so a killed job started again skips it: the
search draws only what its budget still misses, a published iteration is reused, and so are
finished measurements and controls. Outputs are rewritten after every search.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common import fmt
from common.progress import progress
from common.tracking import Tracker, training_args
from evolution import metrics
from evolution.arc_adapter import check_unseen
from evolution.config import SoarConfig, TaskSetConfig
from evolution.controls import (
    SEED_ONLY_NOTE,
    extra_steps,
    measure_sampler,
    random_prior_control,
    seed_only_model,
)
from evolution.driver import SoarSearch, TaskOutcome
from evolution.learn import (
    find_published,
    hindsight_rows,
    seed_corpus_kwargs,
    seed_rows,
    train_and_publish,
)
from evolution.mixture import measure_mixes
from evolution.prompts import sampling_prompt
from evolution.report import write_outputs
from evolution.tasks import load_split, select
from search.pool import Switch
from store import Store
from store.models import ModelVersion, relocated
from training import adapters, embedded, pretrained
from training.checkpoints import clean_scratch, is_chat_model, publish
from training.seed import build_seed_model
from verifiers.arc.examples import SOLUTIONS
from verifiers.arc.grids import ArcTask
from verifiers.arc.results import Verifier

log = logging.getLogger(__name__)

# (checkpoint, version name, files, share of sampler.num_cpus_per_actor) -> a started sampler pool
NewSampler = Callable[[str, str, "dict[str, str] | None", float], Any]


@dataclass
class SearchResult:
    entry: dict[str, Any]  # the iteration's summary.json entry
    rows: list[dict[str, Any]]  # per-task metrics.jsonl rows
    outcomes: dict[str, TaskOutcome]


def load_tasks(ts: TaskSetConfig) -> tuple[dict[str, ArcTask], dict[str, ArcTask]]:
    """(search tasks, held-out tasks) by id."""
    split = load_split(ts.split)
    tasks = select(split, ids=ts.ids or None, max_grid=ts.max_grid, limit=ts.limit)
    if not tasks:
        raise ValueError(f"tasks: no task in {ts.split!r} matches ids/max_grid/limit")
    overlap = sorted(set(ts.heldout_ids) & set(tasks))
    if overlap:
        raise ValueError(f"tasks.heldout_ids {overlap} are also search tasks: held-out tasks must never be trained on")
    heldout = select(split, ids=ts.heldout_ids) if ts.heldout_ids else {}
    return tasks, heldout


def extra_tasks(cfg: SoarConfig, tasks: dict[str, ArcTask], heldout: dict[str, ArcTask]) -> dict[str, ArcTask]:
    """Tasks searched for hindsight data only (`tasks.extra_ids`, `tasks.extra_limit`)."""
    ts = cfg.tasks
    if not (ts.extra_ids or ts.extra_limit):
        return {}
    split = load_split(ts.extra_split or ts.split, "tasks.extra_split" if ts.extra_split else "tasks.split")
    taken = {*tasks, *heldout}  # ARC ids name a task in every split that holds it
    extra = select(split, ids=ts.extra_ids) if ts.extra_ids else {}
    overlap = sorted(taken & set(extra))
    if overlap:
        raise ValueError(f"tasks.extra_ids {overlap} are also demo or held-out tasks: extra tasks are searched "
                         "for hindsight data only")
    fits = cfg.search.max_prompt_chars
    others = [t for tid, t in select(split, max_grid=ts.max_grid or 10).items()
              if tid not in taken and tid not in extra
              and (fits is None or len(sampling_prompt(t, cfg.search.prompt_style)) <= fits)]
    return extra | {t.id: t for t in others[:ts.extra_limit]}


def one_shot_examples(max_chars: int | None, shown_never: set[str]) -> dict[str, tuple[ArcTask, str]]:
    """The solved ARC-train tasks a numpy-style prompt may show as its one-shot example: never a
    searched or held-out task (its code in a prompt would leak it), and only those whose own
    prompt fits `max_chars`."""
    arc1 = load_split("arc1-train")
    return {tid: (arc1[tid], code) for tid, code in SOLUTIONS.items()
            if tid in arc1 and tid not in shown_never
            and (max_chars is None or len(sampling_prompt(arc1[tid], "numpy")) <= max_chars)}


def model_checkpoint(spec: str, task_ids: list[str]) -> str:
    """A checkpoint dir for a config's model: `pretrained:<name>` fetched, an embedded model's
    manifest checked, an adapter dir merged into its base (refused if it drew on `task_ids`)."""
    checkpoint = embedded.verified(pretrained.resolve_checkpoint(spec))
    if adapters.is_adapter(checkpoint):  # e.g. models/smollm2-arc-lora: its base with it merged in
        check_unseen(checkpoint, task_ids)
        checkpoint = adapters.merged_checkpoint(checkpoint)
    return checkpoint


def base_model(cfg: SoarConfig, store: Store, task_ids: list[str]) -> ModelVersion:
    """The experiment's first version: on a fresh experiment, the configured checkpoint (an adapter
    dir merged into its base) or the seed model (built, or reused from the cache), published as v0."""
    registry = store.models(cfg.experiment)
    if registry.current() is None:
        if cfg.model.checkpoint:
            checkpoint = model_checkpoint(cfg.model.checkpoint, task_ids)
            publish(store, cfg.experiment, checkpoint, parent=None, metrics={},
                    note="base")
        else:
            seed_cfg = replace(cfg.model.seed, corpus_kwargs=seed_corpus_kwargs(cfg, task_ids))
            log.info("building (or reusing) the %s seed model", seed_cfg.preset)
            seed = build_seed_model(seed_cfg)
            log.info("seed model %s: %s", "reused" if seed.cached else "built", seed.path)
            publish(store, cfg.experiment, seed.path, parent=None, metrics=seed.info["train"], note="seed")
        return registry.list()[0]  # iteration 0 always searches with the base
    base = registry.list()[0]
    if cfg.model.checkpoint and base.note == "base":
        # a rerun submitted to a new Ray head unpacks a checkpoint from its working dir elsewhere:
        # the same files under the new path are the same base (else its load names what changed)
        return relocated(base, model_checkpoint(cfg.model.checkpoint, task_ids)) or base
    return base


def with_prompt_format(cfg: SoarConfig, checkpoint: str) -> SoarConfig:
    """`cfg` with search.prompt_format "auto" settled by the base checkpoint: chat for a chat model
    (training.checkpoints.is_chat_model), text for ratchet's seeds and base models."""
    if cfg.search.prompt_format != "auto":
        return cfg
    fmt = "chat" if is_chat_model(checkpoint) else "text"
    if fmt == "chat" and cfg.search.prompt_style == "compact":
        raise ValueError(f"{checkpoint} is a chat model, but search.prompt_style=compact is the format the seed "
                         "models and models/smollm2-arc-lora were taught: set search.prompt_style=numpy, or "
                         "search.prompt_format=chat for a chat model taught the compact style (text for a seed)")
    log.info("prompts: %s (search.prompt_format=auto, %s)", fmt, checkpoint)
    return replace(cfg, search=replace(cfg.search, prompt_format=fmt))


def iteration_line(entry: dict[str, Any], previous: dict[str, Any] | None, heldout: int) -> str:
    """One log line per SOAR iteration: what its search found, the change since the iteration
    before, and (when models are measured) the mean over sampling seeds on both task sets."""
    hit = "search_hit_rate" if "search_hit_rate" in entry else "hit_rate"  # measured: hit_rate is over seeds

    def change(name: str) -> str:
        was = (previous or {}).get(name)
        return f" ({fmt.delta(entry[name] - was)})" if was is not None and entry[name] is not None else ""

    line = (f"iteration {entry['iteration']} ({entry['model_version']}): "
            f"{metrics.solved_text(entry, change('solved'))}, hit rate {fmt.num(entry[hit])}{change(hit)}, "
            f"{fmt.num(entry['programs'])} programs in {fmt.num(entry['wall_s'])} s")
    if entry.get("solved_seeds") and metrics.scored(entry):
        seeds = entry["solved_seeds"]
        line += f"; mean of {len(seeds)} seeds: demo solved {fmt.num(sum(seeds) / len(seeds))}"
        if entry.get("heldout_solved_seeds"):  # absent without held-out tasks: nothing to average
            held = entry["heldout_solved_seeds"]
            line += f", held-out solved {fmt.num(sum(held) / len(held))}/{heldout}"
    if entry.get("extra"):  # searched for hindsight data only: whether they gave any right program
        extra = entry["extra"]
        line += (f"; extra tasks: oracle {fmt.num(extra['oracle'])}/{extra['tasks']} "
                 f"in {fmt.num(extra['programs'])} programs")
    return line


class SoarLoop:
    def __init__(self, cfg: SoarConfig, *, store: Store, tasks: dict[str, ArcTask], heldout: dict[str, ArcTask],
                 base: ModelVersion, sampler: Any, verifier: Verifier, run_dir: Path, tracker: Tracker | None = None,
                 extra: dict[str, ArcTask] | None = None, new_sampler: NewSampler | None = None):
        self.cfg = with_prompt_format(cfg, base.checkpoint) if base is not None else cfg
        self.store, self.tasks, self.heldout, self.base = store, tasks, heldout, base
        self.extra = extra or {}  # searched for hindsight data only: never measured, never in the reports' solved
        self.sampler, self.verifier, self.run_dir = sampler, verifier, run_dir
        self.new_sampler = new_sampler  # one more sampler pool per model of a mix (ray_jobs/soar.py)
        self.tracker = tracker or Tracker({})  # each iteration's search (and measure) figures
        # checkpoints and datasets of this experiment only: a storage_path shared by experiments
        # never lets one's checkpoints/itN meet another's (run_dir already ends in the name)
        self.storage = Path(cfg.storage_path) / cfg.experiment if cfg.storage_path else run_dir
        clean_scratch(self.storage / "checkpoints")  # a killed training's; the runner's lease makes them ours
        self.results: list[SearchResult] = []
        self.baselines: dict[str, Any] = {}
        self._examples: dict[str, tuple[ArcTask, str]] | None = None

    async def fit(self) -> dict[str, Any]:
        """Every iteration, then the controls; returns summary.json's content."""
        version = self.base
        for it in range(self.cfg.iterations):
            timing: dict[str, float] = {}
            learned: dict[str, Any] = {}
            switch: dict[str, Any] = {}
            if it > 0:
                version, learned, weights = await self.learn(it, version)
                timing |= {k: learned.pop(k) for k in ("dataset_s", "train_s") if k in learned}
                if self.sampler.version != version.version:
                    switch = (await self.reload(version, weights)).summary()
                    timing["switch_s"] = switch.pop("switch_s")
                weights = None  # the object store frees the state dict once no ref is left
            result = await self.search(version, it)
            timing["search_s"] = result.entry["wall_s"]
            if it > 0:
                result.entry["hindsight"] = learned
            result.entry |= switch  # weight_sync: the path the switch took (and why, when not the planned one)
            if self.cfg.controls.measures(it):
                started = time.time()
                result.entry["search_hit_rate"] = result.entry["hit_rate"]  # this search's; hit_rate: over seeds
                result.entry |= await self.measure(version, result.outcomes)
                timing["measure_s"] = round(time.time() - started, 2)
            result.entry["timing"] = timing
            self.tracker.log(result.entry, step=it, prefix="search")
            log.info("%s", iteration_line(result.entry, self.results[-1].entry if self.results else None,
                                          len(self.heldout)))
            self.results.append(result)
            self.report()  # after every search: a later crash loses nothing measured
        await self.controls()
        await self.mixtures()
        return self.report()

    async def search(self, version: ModelVersion, iteration: int) -> SearchResult:
        """One search over the demo and extra tasks with `version`, archived under the experiment;
        its figures are the demo tasks' (the extra ones only add how many of them it solved)."""
        cfg = self.cfg
        budget = len(self.tasks | self.extra) * (cfg.search.samples_per_task + cfg.search.refinements_per_task)
        bar = progress(total=budget, desc=f"iteration {iteration} programs", unit="prog")
        search = SoarSearch(cfg.search, sampler=self.sampler.submit, verifier=self.verifier,
                            archive=self.store.archive(cfg.experiment), model_version=version.version,
                            iteration=iteration, filters=cfg.filters, vote_cfg=cfg.vote, examples=self.examples(),
                            on_progress=lambda task_id, n: bar.update(n))
        before = await self.sampler.stats()
        started = time.time()
        outcomes = await search.run(self.tasks | self.extra)
        wall = time.time() - started
        after = await self.sampler.stats()
        busy = sum(s.busy_s for s in after) - sum(s.busy_s for s in before)
        bar.close()
        rows = [metrics.task_row(self.tasks[t], outcomes[t], cfg.filters, cfg.vote) | {"iteration": iteration}
                for t in self.tasks]
        extra_rows = [metrics.task_row(self.extra[t], outcomes[t], cfg.filters, cfg.vote) for t in self.extra]
        outcomes = {t: outcomes[t] for t in self.tasks}
        scored = sum(r["solved"] is not None for r in rows)  # the others have no test outputs
        tried = cfg.search.samples_per_task + cfg.search.refinements_per_task
        budgets = [b for b in cfg.curve_budgets if b <= tried] or [1]
        entry = {
            "iteration": iteration,
            "model_version": version.version,
            "tasks": len(self.tasks),
            "scored": scored,  # tasks whose test outputs are known: solved and oracle count only these
            "solved": sum(r["solved"] or 0.0 for r in rows) if scored else None,  # None: nothing to score
            "oracle": sum(r["oracle"] or 0.0 for r in rows) if scored else None,
            "programs": sum(r["programs"] for r in rows),
            "executions": sum(r["executions"] for r in rows),
            "cache_hits": sum(r["cache_hits"] for r in rows),
            "hit_rate": metrics.hit_rate(outcomes),
            "sampler_busy_frac": busy / (wall * cfg.sampler.num_actors) if wall > 0 else 0.0,
            "wall_s": round(wall, 2),
            "prefix_cache": metrics.prefix_cache_use(before, after),
            "curve": metrics.curve(self.tasks, outcomes, budgets, cfg.filters, cfg.vote),
        }
        if self.extra:
            entry["extra"] = {"tasks": len(self.extra), "oracle": sum(r["oracle"] or 0.0 for r in extra_rows),
                              "programs": sum(r["programs"] for r in extra_rows)}
        return SearchResult(entry, rows, outcomes)

    def examples(self) -> dict[str, tuple[ArcTask, str]]:
        """Solved examples from other tasks for numpy-style one-shot prompts."""
        if not (self.cfg.search.one_shot and self.cfg.search.prompt_style == "numpy"):
            return {}
        if self._examples is None:  # searches, measurements and hindsight rows all show these
            self._examples = one_shot_examples(self.cfg.search.one_shot_max_chars, {*self.tasks, *self.heldout})
        return self._examples

    async def learn(self, iteration: int, current: ModelVersion) -> tuple[ModelVersion, dict[str, Any], Any]:
        """Hindsight data from the archive (+ seed replay) -> SFT -> version "iteration N";
        returns it, its counts, and its weights in Ray's object store (an ObjectRef) when
        sampler.weight_sync takes them from memory (else None)."""
        cfg, note = self.cfg, f"iteration {iteration}"
        done = find_published(self.store, cfg.experiment, note)
        if done is not None:
            log.info("%s: reusing %s (trained before a restart)", note, done.version)
            return done, {}, None
        started = time.time()
        rows, counts = hindsight_rows(cfg, self.store, self.tasks | self.extra, iteration - 1, self.examples())
        if not rows:
            log.warning("%s: no hindsight data (no program ran cleanly); keeping %s", note, current.version)
            return current, counts | {"rows": 0}, None
        hindsight = len(rows)
        if cfg.learn.seed_rows:
            rows += seed_rows(cfg, cfg.learn.seed_rows, 1 + iteration, sorted({*self.tasks, *self.heldout}))
            counts = counts | {"seed_rows": cfg.learn.seed_rows}
        prep_s = time.time() - started
        start = self.base if cfg.learn.from_base else current
        trained = await train_and_publish(cfg.learn, self.store, registry=cfg.experiment, rows=rows, start=start,
                                          storage=self.storage, data_name=f"it{iteration - 1}",
                                          name=f"it{iteration}", steps=cfg.learn.max_steps,
                                          seed=iteration - 1, note=note, parent=current.version,
                                          metrics=counts | {"rows": hindsight},
                                          train_args=training_args(cfg.tracking, self.run_dir, f"it{iteration}"),
                                          base_checkpoint=self.base.checkpoint,  # seeds train fully, others LoRA
                                          weights=cfg.sampler.sync_path == "memory")
        self.store.events(cfg.experiment).emit("published", version=trained.version.version, iteration=iteration)
        return trained.version, counts | {"rows": hindsight, "dataset_s": round(prep_s + trained.dataset_s, 2),
                                          "train_s": trained.train_s}, trained.weights

    async def reload(self, version: ModelVersion, weights: Any = None) -> Switch:
        """Every sampler actor switches to `version`: its `weights` from memory or its checkpoint,
        as sampler.weight_sync says (SamplerPool.switch)."""
        switch = await self.sampler.switch(version, weights)
        log.info("%s", switch.line())
        return switch

    async def measure(self, version: ModelVersion, outcomes: dict[str, TaskOutcome]) -> dict[str, Any]:
        """`version` on every sampling seed, demo and held-out tasks; the iteration's own search
        counts as the demo run of its seed."""
        log.info("measuring %s on seeds %s, demo%s tasks", version.version, self.cfg.controls.seeds,
                 " and held-out" if self.heldout else "")
        return await measure_sampler(self.cfg, self.store, self.tasks, self.heldout, self.sampler.submit,
                                     self.verifier, namespace=f"{self.cfg.experiment}.eval.{version.version}",
                                     model_version=version.version, label=f"model {version.version}",
                                     reuse={self.cfg.search.seed: outcomes}, examples=self.examples())

    async def controls(self) -> None:
        """The random-program prior and the seed-only control, as configured."""
        c = self.cfg.controls
        if c.random_prior:
            log.info("control: the random-program prior")
            self.baselines["random_prior"] = await random_prior_control(self.cfg, self.store, self.tasks,
                                                                        self.heldout, self.verifier)
            self.report()
        if c.seed_only and self.cfg.iterations < 2:
            log.info("controls.seed_only skipped: with one iteration there is no extra training to match")
        elif c.seed_only:
            model = await seed_only_model(self.cfg, self.store, self.base, self.storage,
                                          sorted({*self.tasks, *self.heldout}))
            name = f"seed-only-{model.version}"
            await self.sampler.load_checkpoint(model.checkpoint, name, model.files)
            measured = await measure_sampler(self.cfg, self.store, self.tasks, self.heldout, self.sampler.submit,
                                             self.verifier, namespace=f"{self.cfg.experiment}.seed-only",
                                             model_version=name, label=SEED_ONLY_NOTE, examples=self.examples())
            self.baselines["seed_only_control"] = measured | {"steps": extra_steps(self.cfg),
                                                              "checkpoint": model.checkpoint}
            self.report()

    def mix_models(self) -> dict[str, tuple[str, dict[str, str] | None]]:
        """{name: (checkpoint, files)}: every published version, then each of mix.checkpoints."""
        models = {v.version: (v.checkpoint, v.files) for v in self.store.models(self.cfg.experiment).list()}
        task_ids = sorted({*self.tasks, *self.heldout})
        for name, spec in self.cfg.mix.checkpoints.items():  # never a vN (MixConfig refuses those names)
            models[name] = (model_checkpoint(spec, task_ids), None)
        return models

    async def mixtures(self) -> None:
        """Every model in one search (evolution/mixture.py), each model on its own sampler pool;
        together they hold the Ray CPUs of one pool (sampler.num_cpus_per_actor split between them)."""
        if not self.cfg.mix.enabled:
            return
        if self.new_sampler is None:
            raise ValueError("mix.enabled needs samplers for each model: run it through ray_jobs.soar")
        models = self.mix_models()
        if len(models) < 2:
            log.warning("mix.enabled: only %s to mix (no training published another version); no mix measured",
                        ", ".join(models))
            return
        pools = {name: self.new_sampler(checkpoint, name, files, 1 / len(models))
                 for name, (checkpoint, files) in models.items()}
        try:
            await asyncio.gather(*(p.ready() for p in pools.values()))
            self.baselines |= await measure_mixes(self.cfg, self.store, self.tasks, self.heldout,
                                                  {n: p.submit for n, p in pools.items()}, self.verifier,
                                                  self.examples())
        finally:
            for p in pools.values():
                p.shutdown()
        self.report()

    def report(self) -> dict[str, Any]:
        return write_outputs(self.cfg, self.run_dir, self.tasks, self.results, self.baselines)
