"""The worker forks each program's child before the program arrives (fork_runner.Warm).

Still one fresh, fenced child per program: these tests hold that a waiting child runs only
the program it is then given, with the inputs and limits of that program's task, and that
a waiting child killed from outside costs the next program nothing.
"""

from __future__ import annotations

import os
import select
import signal

from verifiers.arc.sandbox import SandboxLimits, SandboxWorker, decode_run

IDENTITY = "def transform(g):\n    return g\n"
PID = ("import sys\nos = sys.modules['os']\n"
       "def transform(g):\n    return [[int(c) for c in str(os.getpid())]]\n")


def _program_children(worker: SandboxWorker) -> list[int]:
    """The worker's children but its scipy zygote, oldest first: the last program's child
    (killed once it answered, reaped before the next fork) may still be among them, the
    child forked for the next program is the newest."""
    with open(f"/proc/{worker.pid}/task/{worker.pid}/children") as f:
        return [int(k) for k in f.read().split() if int(k) != worker.info["scipy_zygote"]]


def _run(worker: SandboxWorker, key: str, inputs: list, limits: SandboxLimits, code: str):
    return decode_run(worker.run(key, inputs, limits, code), len(inputs))


def test_a_waiting_child_killed_from_outside_costs_the_next_program_nothing():
    worker = SandboxWorker()
    limits = SandboxLimits(setup_cpu_s=5.0)
    try:
        [first] = _run(worker, "k", [[[1, 2]]], limits, IDENTITY)
        assert first.output == ((1, 2),)
        waiting = _program_children(worker)[-1]  # forked for the next program, fenced, idle
        pidfd = os.pidfd_open(waiting)
        try:
            os.kill(waiting, signal.SIGKILL)
            assert select.select([pidfd], [], [], 30)[0], "the waiting child did not die"
        finally:
            os.close(pidfd)
        [second] = _run(worker, "k", [[[1, 2]]], limits, IDENTITY + "# next\n")
    finally:
        worker.close()
    assert second.status == "ok", second
    assert second.output == ((1, 2),)


def test_every_program_runs_in_a_process_of_its_own():
    worker = SandboxWorker()
    limits = SandboxLimits(setup_cpu_s=5.0)
    try:
        pids = [_run(worker, "k", [[[0]]], limits, f"{PID}_n = {i}\n")[0] for i in range(6)]
    finally:
        worker.close()
    assert all(r.status == "ok" for r in pids), pids
    assert len({r.output for r in pids}) == 6


def test_a_waiting_child_takes_the_inputs_and_limits_of_the_task_it_is_given():
    # task A allows 512 MB, task B 64 MB: a child forked while A ran must not carry A's
    # address-space limit into B's program, nor A's inputs.
    # (np.empty: address space without touching pages; a generous CPU allowance, so a
    # loaded machine cannot turn a result into a wall-clock timeout)
    alloc = ("import numpy as np\ndef transform(g):\n    a = np.empty(25 * 2**20, dtype=np.uint8)\n"
             "    return [[g[0][0], a.size >> 22]]\n")
    a_limits = SandboxLimits(setup_cpu_s=5.0, memory_mb=512)
    b_limits = SandboxLimits(setup_cpu_s=5.0, memory_mb=8)
    worker = SandboxWorker()
    try:
        results = []
        for i, (key, grid, limits) in enumerate([("a", [[1]], a_limits), ("b", [[2]], b_limits),
                                                 ("a", [[3]], a_limits), ("a", [[3]], a_limits)]):
            results.append(_run(worker, key, [grid], limits, f"{alloc}_n = {i}\n")[0])
        ping = worker.ping()
    finally:
        worker.close()
    assert [r.status for r in results] == ["ok", "memory", "ok", "ok"], results
    assert [r.output for r in results] == [((1, 6),), None, ((3, 6),), ((3, 6),)]
    assert ping["ok"]


def test_ping_leaves_no_waiting_child():
    worker = SandboxWorker()
    try:
        _run(worker, "k", [[[1]]], SandboxLimits(), IDENTITY)
        assert _program_children(worker)  # at least the waiting child
        worker.ping()
        assert _program_children(worker) == []
        [after] = _run(worker, "k", [[[1]]], SandboxLimits(), IDENTITY + "# again\n")
    finally:
        worker.close()
    assert after.output == ((1,),)


def test_children_use_the_workers_libc_not_one_of_their_own():
    # die_with_parent() runs in every child: loading libc there cost each program ~0.5 ms
    # of CPU and ~100 copy-on-write faults (dlopen, new ctypes classes)
    from verifiers.arc import fence

    assert fence._libc() is fence._libc()
