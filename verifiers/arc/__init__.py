"""ARC execution verifier: run model-written ``transform(grid)`` programs safely and score them.

    from verifiers.arc import ArcExecutor, ArcTask
    with ArcExecutor(workers=2) as ex:
        result = ex.execute(task, code)          # ProgramResult: per-input status/output/score
        results = ex.execute_many(task, codes)   # batch, deduplicated, cached if given a cache

Modules: grids (plain-data grids/tasks), results (result types), sandbox + zygote +
fork_runner + fenced_child + fence + wire + encode (isolation), executor (batching, cache),
scoring (train accuracy, pass@2), pool (Ray), __main__ (CLI: ``python -m verifiers.arc
check|batch``).
"""

from verifiers.arc.executor import ArcExecutor
from verifiers.arc.grids import ArcTask, Example, Grid, GridError, load_tasks, validate_grid
from verifiers.arc.results import STATUSES, InputResult, ProgramResult, Status
from verifiers.arc.sandbox import VERIFIER_VERSION, SandboxLimits
from verifiers.arc.scoring import (
    SubmissionScore,
    cell_accuracy,
    pass_at_2,
    score_submission,
    train_accuracy,
)

__all__ = [
    "STATUSES", "VERIFIER_VERSION", "ArcExecutor", "ArcTask", "Example", "Grid", "GridError",
    "InputResult", "ProgramResult", "SandboxLimits", "Status", "SubmissionScore",
    "cell_accuracy", "load_tasks", "pass_at_2", "score_submission", "train_accuracy",
    "validate_grid",
]
