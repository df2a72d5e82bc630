"""What a scaling run checks before Redis, Ray or a seed build start, and what it asks of the
cluster (the job's `JobSpec.check`, `shared_paths` and `demands`, ray_jobs/scaling.py).

Building the config does no I/O (ScalingConfig's own rules); these read the disk: the dataset's
rows, the triples, the checkpoints or the seed corpus, the answer checker, and the engines
(an `openai` server is asked what it serves and takes). Each failure is one ConfigError naming
the field, the problem and the fix.
"""

from __future__ import annotations

from pathlib import Path

from common.checks import need_path
from common.config import ConfigError
from common.placement import Demand
from scaling.arith_problems import DATASETS
from scaling.config import ScalingConfig
from search.engines.checks import check_engine
from search.pool_config import pool_demand
from training import embedded, pretrained
from training.checks import need_checkpoint, need_corpus


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


def check_scaling(cfg: ScalingConfig) -> None:
    if cfg.dataset not in DATASETS:
        need_path("dataset", cfg.dataset, f"JSONL file (or a generated set: {', '.join(sorted(DATASETS))})")
        _dataset_rows("dataset", cfg.dataset, cfg.questions)
    if cfg.checker:  # the loader the sampler calls: a name that does not import fails here, in one line
        from verifiers.math_answers import load_checker

        load_checker(cfg.checker)
    if cfg.triples != "arith" and cfg.mode != "curves":
        need_path("triples", cfg.triples, "JSONL file")
    if cfg.model == "seed":
        need_corpus("seed_model.corpus", cfg.seed_model.corpus)
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


def scaling_shared_paths(cfg: ScalingConfig) -> dict[str, str]:
    """The checkpoint the samplers load: the seed model's cache dir, or the model's path. An
    embedded model (a relative models/<name> with its manifest) travels in `--working-dir .`."""
    if cfg.model == "seed":
        return {"seed_model.cache_dir": cfg.seed_model.cache_dir or ""}
    if cfg.sampler.engine == "openai" or cfg.model.startswith(pretrained.PREFIX) or (
            not Path(cfg.model).is_absolute() and embedded.is_embedded(cfg.model)):  # each node fetches its own
        return {}
    return {"model": cfg.model}


def scaling_demands(cfg: ScalingConfig, gpus_exist: bool) -> list[Demand]:
    """The sampler pool, and the verifier's own pool (ScalingConfig.verifier_pool: the sampler's shape)."""
    if cfg.in_process:
        return []
    demands = [pool_demand("sampler.num_actors", cfg.sampler, gpus_exist)]
    if cfg.verifier:
        demands.append(pool_demand("verifier (its own pool: sampler.*)", cfg.verifier_pool(), gpus_exist))
    return demands
