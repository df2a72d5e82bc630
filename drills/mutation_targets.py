"""What `make mutate` mutates: each module's path and the fast tests that judge its mutants
(drills/mutation.py runs them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    path: str  # the module mutated
    tests: str  # pytest arguments: the module's own fast tests
    skip: tuple[str, ...] = ()  # top-level functions/classes not mutated (drawing, formatting)
    only: tuple[str, ...] = ()  # when given, only these top-level names are mutated
    timeout_s: float = 300.0  # a mutant whose tests run longer is killed (an endless loop)


TARGETS = {
    # the seccomp rule table and its compilation; the process set-up calls beside it (limits,
    # namespaces, chroot, uid) are exercised by every sandbox test at start-up
    "fence": Target("verifiers/arc/fence.py", "tests/test_arc_fence_rules.py",
                    only=("_ACT_ALLOW", "_ACT_ERRNO_EPERM", "_CMP_LT", "_CMP_EQ", "_CMP_MASKED_EQ", "_AT_EMPTY_PATH",
                          "_O_ASYNC", "FCNTL_ALLOWED", "F_SETFL", "MAX_CLOCK_ID", "ALLOWED_SYSCALLS",
                          "SeccompFilter")),
    "pairs": Target("thinking/pairs.py",
                    "tests/test_pairs.py tests/test_tpo_length.py tests/test_tpo.py "
                    "tests/test_tpo_dpo.py::test_divergence_windows_move_the_common_prefix_into_the_prompt "
                    "tests/test_judge_plugins.py::test_a_round_without_usable_verdicts_blames_the_judge "
                    "-k 'pair or rho or ties or unparsable or length or divergence or window or blames'"),
    "curves": Target("scaling/curves.py", "tests/test_curves.py tests/test_intervals.py",
                     skip=("plot_curves",)),
    "comparisons": Target("evolution/comparisons.py", "tests/test_comparisons.py tests/test_intervals.py"),
    "strategies_base": Target("search/strategies/base.py", "tests/test_strategies.py tests/test_intervals.py"),
    "pass_at_k": Target("search/strategies/pass_at_k.py", "tests/test_strategies.py tests/test_intervals.py"),
    "best_of_n": Target("search/strategies/best_of_n.py", "tests/test_strategies.py"),
    "verification": Target("search/strategies/verification.py", "tests/test_strategies.py"),
    "selection": Target("search/selection.py", "tests/test_selection.py tests/test_strategies.py"),
    # the served search's options and strategies on one question (issue #45)
    "service_search": Target("search/serve/service_search.py",
                             "tests/test_service_search.py tests/test_search_free_text.py"),
    "voting": Target("evolution/voting.py", "tests/test_voting.py"),
    "rex": Target("evolution/rex.py", "tests/test_rex.py"),
    "filters": Target("evolution/filters.py", "tests/test_filters.py"),
    "scoring": Target("verifiers/arc/scoring.py", "tests/test_arc_scoring.py"),
    "hindsight": Target("evolution/hindsight.py", "tests/test_hindsight.py"),
    "keys": Target("store/keys.py", "tests/test_store.py tests/test_lease.py"),
    "lease": Target("store/lease.py", "tests/test_lease.py"),
    "prefix_cache": Target("search/engines/prefix_cache.py",
                           "tests/test_prefix_cache.py -k 'blocks or longest or lru or budget or cannot_fit'"),
    "baselines": Target("evolution/baselines.py", "tests/test_baselines.py -k 'reproducible or chat'"),
    "boundary": Target("training/boundary.py", "tests/test_boundary.py -k 'not sft'"),
    "arc_adapter": Target("evolution/arc_adapter.py",
                          "tests/test_arc_adapter.py -k 'not soar_searches and not shipped_adapter' "
                          "'tests/test_embedded.py::test_shipped_model_matches_its_recipe[smollm2-arc-lora]'",
                          skip=("train_adapter", "build_embedded")),  # trainings: test_soar_searches builds one
    "model_mix": Target("evolution/model_mix.py", "tests/test_model_mix.py"),
    # the mask's arithmetic; install() patches vLLM, which only .venv-vllm has (tests/test_vllm_cpu.py)
    "top_p": Target("search/engines/top_p.py", "tests/test_top_p.py", skip=("install", "install_from_env")),
    # plug-in points (issue #49): what a user's judge, checker or task source must be, refused at --dry-run
    "plugins": Target("common/plugins.py", "tests/test_plugins.py tests/test_judge_plugins.py tests/test_scaling_checker.py "
                      "tests/test_soar_tasks.py -k 'dry_run or refused or cannot or import_path or dotted or bound'"),
    "judge_registry": Target("verifiers/judges/registry.py", "tests/test_judge_plugins.py tests/test_judges.py "
                             "-k 'not trains_both_arms and not job_fails and not trained_with_trl'"),
    "checker": Target("verifiers/math_answers.py", "tests/test_scaling_checker.py -k 'checker and not documented'",
                      only=("load_checker", "check_answer", "_is_verdict", "grade_answers")),
    "task_sources": Target("evolution/tasks.py", "tests/test_soar_tasks.py -k 'not documented'",
                           only=("load_split", "load_file", "with_solutions", "_from_source", "is_scored")),
    "coalescer": Target("search/sampler_worker.py", "tests/test_coalescer.py", only=("BATCH_WAIT_S", "_Request", "Coalescer")),
    # the fault drills' fail points (issue #48); common/actor_pool.py is not here: its tests need Ray
    "failpoints": Target("common/failpoints.py", "tests/test_failpoints.py"),
    # issue #46: the modules never mutated before, each against its own fast tests
    # which path a switch takes; the pool's switch itself runs on Ray in the same file's slow half
    "weight_sync": Target("search/weight_sync.py", "tests/test_weight_sync.py -k 'not pool and not serves "
                          "and not loads'"),
    # the manifest, hashes, content address and CLI; convert() runs transformers on a tiny GGUF
    "pretrained": Target("training/pretrained.py", "tests/test_pretrained.py"),
    "placement": Target("common/placement.py", "tests/test_placement.py", skip=("node_id",)),
    "stopping": Target("jobs/stopping.py", "tests/test_stopping.py"),
    "jsonio": Target("common/jsonio.py", "tests/test_jsonio.py"),
    # the recipe, the questions, balancing and rows; sampling and training run in .venv-vllm (test_embedded)
    "verifier_adapter": Target("scaling/verifier_adapter.py",
                               "tests/test_verifier_adapter.py -k 'not merges_into and not scaling_job' "
                               "'tests/test_embedded.py::test_shipped_model_matches_its_recipe[smollm2-verifier-lora]'",
                               skip=("run_sampling", "train_adapter", "build_embedded")),
    # the rules measured and the shares pooled; measure_mixes is the SOAR loop's (tests/test_model_mix.py, slow)
    "mixture": Target("evolution/mixture.py", "tests/test_model_mix.py -k 'mix_rules or pooled_shares'",
                      only=("MIX_PREFIX", "mix_rules", "pooled_shares")),
    # which tasks a search's right programs solve: what docs/real-model.md's diagnosis counts
    "right_programs": Target("evolution/right_programs.py", "tests/test_right_programs.py"),
}
