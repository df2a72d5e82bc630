"""benchmarks.fork_cost: the fork-per-program floor that bench_arc prints beside its ratios."""

import pytest

from benchmarks.fork_cost import fork_exit_cost


def test_fork_exit_cost_measures_the_workers_preloads_and_a_bare_interpreter():
    worker, bare = fork_exit_cost("worker", forks=20), fork_exit_cost("bare", forks=20)
    for r in (worker, bare):
        assert r["cpu_ms"] > 0 and r["wall_ms"] > 0
    # the worker's numpy and computation-only stdlib are really loaded in the probe
    assert worker["anon_kb"] > bare["anon_kb"] + 4096 and worker["mappings"] > bare["mappings"]


def test_fork_exit_cost_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="'worker' or 'bare'"):
        fork_exit_cost("zygote")
