"""Verifier side of the sandbox: limits, a handle on one warm worker, decoding its replies.

A ``SandboxWorker`` owns one zygote process (zygote.py): started once with a clean
environment (no $RATCHET_REDIS_URL, no credentials, single-threaded BLAS), an empty
scratch dir as cwd, its own session (no terminal signals), and death with its parent.
It receives a task's input grids once, then one program at a time; expected outputs never
go there. A worker that dies or stops answering is replaced; the program in flight is
reported as an error (not retried: it may be what killed the worker).

Time limits (``SandboxLimits``): a program gets a CPU budget per input proportional to
the grid, ``input_cpu_s + cell_cpu_s * cells`` (50 ms + 0.25 ms/cell: 52 ms for 3x3,
275 ms for 30x30), plus ``setup_cpu_s`` (100 ms) for compiling and module-level code. The
budget is cumulative (input k must be done once setup + budgets[0..k] is spent), so fast
inputs bank time for slow ones. Programs models write for ARC take well under 10 ms per
grid (numpy ops: tens of microseconds; Python loops and flood fills over 900 cells: a few
ms), so this is 10-50x headroom, while a program that never stops costs 0.15-0.4 s of a
worker, not the ~1 s per grid of published harnesses. CPU time, read from the child's
CPU clock with ns resolution, is the main limit because it does not move when a busy
machine deschedules the child; the wall limit (3x the CPU allowance + 0.25 s) catches
programs that sleep or block. RLIMIT_CPU (whole seconds) is only a backstop.
"""

from __future__ import annotations

import json
import math
import os
import queue
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common.faults import InfrastructureError
from verifiers.arc.grids import Grid, decode_rows, encode_rows
from verifiers.arc.results import MAX_MESSAGE, STATUSES, InputResult

VERIFIER_VERSION = "arc-sandbox-2"  # bump when a change alters results: it keys the cache
ZYGOTE = Path(__file__).with_name("zygote.py")
PROJECT_ROOT = Path(__file__).resolve().parents[2]
EXIT_SETUP_FAILED = 71  # fenced_child.EXIT_SETUP_FAILED (the worker imports nothing of ours)
START_TIMEOUT_S = 120.0  # importing numpy on a loaded machine can take seconds
CLOSE_GRACE_S = 5.0  # for a worker to exit on its own when closed, before SIGKILL
REPLY_GRACE_S = 10.0  # beyond a program's wall allowance before the worker is presumed hung
# Signals a fenced program can bring on itself: faults, and its own CPU/file-size rlimits.
# It cannot send any (kill/tgkill are denied, fcntl cannot set signal-driven I/O), so any
# other signal came from outside and says nothing about the program.
SELF_INFLICTED_SIGNALS = frozenset((signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL,
                                    signal.SIGTRAP, signal.SIGSYS, signal.SIGXCPU,
                                    signal.SIGXFSZ))


@dataclass(frozen=True)
class SandboxLimits:
    setup_cpu_s: float = 0.1        # compile + module-level code
    input_cpu_s: float = 0.05       # per input grid, plus:
    cell_cpu_s: float = 0.00025     # per cell of that input grid
    wall_factor: float = 3.0        # wall allowance = wall_factor * CPU allowance + slack
    wall_slack_s: float = 0.25
    memory_mb: int = 512            # address space beyond the warm worker's own
    max_result_bytes: int = 1 << 20  # what a child may write back (30x30 x 10 inputs ~ 10 KB)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {value!r}")

    def budgets(self, inputs: Sequence[Grid]) -> list[float]:
        return [self.input_cpu_s + self.cell_cpu_s * len(g) * len(g[0]) for g in inputs]

    def max_wall_s(self, inputs: Sequence[Grid]) -> float:
        return (self.setup_cpu_s + sum(self.budgets(inputs))) * self.wall_factor + self.wall_slack_s

    def wire(self, inputs: Sequence[Grid]) -> dict[str, Any]:
        total_cpu = self.setup_cpu_s + sum(self.budgets(inputs))
        return {"setup_cpu_s": self.setup_cpu_s, "wall_factor": self.wall_factor,
                "wall_slack_s": self.wall_slack_s, "memory_bytes": self.memory_mb << 20,
                "max_result_bytes": self.max_result_bytes,
                "cpu_backstop_s": math.ceil(total_cpu) + 1}

    def tag(self) -> str:
        """Everything that changes results, for the cache key."""
        return json.dumps({"version": VERIFIER_VERSION, **asdict(self)}, sort_keys=True)


class WorkerLost(InfrastructureError):
    """The worker process died or stopped answering (at start too): the machine's failure,
    retried by the verifier pool, never a program's result."""


def _worker_env(paths: Sequence[str]) -> dict[str, str]:
    # Built from nothing, not copied from os.environ: secrets there must not reach programs.
    return {
        "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": os.pathsep.join(paths),
        # one thread: children cannot create threads, and fork copies only the caller
        "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    }


class SandboxWorker:
    """One warm zygote. Not thread-safe: one caller at a time (the executor's idle queue)."""

    def __init__(self, *, allowed_modules: Sequence[str] = (), extra_paths: Sequence[str] = ()):
        self.allowed_modules = tuple(allowed_modules)
        self.extra_paths = tuple(str(p) for p in extra_paths)
        self._proc: subprocess.Popen[bytes] | None = None
        self._scratch: str | None = None
        self._task_key: str | None = None
        self.info: dict[str, Any] = {}
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        self._scratch = tempfile.mkdtemp(prefix="ratchet-arc-")
        self._proc = subprocess.Popen(
            [sys.executable, "-B", "-s", str(ZYGOTE)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, cwd=self._scratch, close_fds=True,
            start_new_session=True,
            env=_worker_env([*self.extra_paths, str(PROJECT_ROOT)]))
        self._send({"allowed_modules": list(self.allowed_modules)})
        self.info = self._recv(START_TIMEOUT_S)
        self._task_key = None
        failed = {k: v for k, v in self.info.get("errors", {}).items()
                  if k in self.allowed_modules}
        if failed:
            self.close()
            raise ValueError(f"allowed_modules: cannot import {failed}; check the module "
                             f"name and that it is on the project root or extra_paths")

    def close(self, *, graceful: bool = True) -> None:
        """Stop the worker: EOF first (it reaps everything and exits), SIGKILL when it does
        not within CLOSE_GRACE_S, or at once when not ``graceful`` (a lost worker)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:  # unflushed bytes to a dead worker
                        pass
            try:  # EOF on its stdin: it reaps its children and its scipy zygote, and exits
                proc.wait(timeout=CLOSE_GRACE_S if graceful else 0)
            except subprocess.TimeoutExpired:  # hung: children die with it (parent-death signal)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def restart(self) -> None:
        self.close(graceful=False)
        self.restarts += 1
        self.start()

    def run(self, key: str, inputs: Sequence[Grid], limits: SandboxLimits,
            code: str) -> dict[str, Any]:
        """Raw outcome of ``code`` on ``inputs`` (see fork_runner.run_program); raises WorkerLost."""
        self._load_task(key, inputs, limits)
        self._send_code(code)
        return self._recv_run(limits.max_wall_s(inputs) + REPLY_GRACE_S)

    def run_queue(self, key: str, inputs: Sequence[Grid], limits: SandboxLimits,
                  jobs: queue.SimpleQueue[tuple[int, str]],
                  done: Callable[[int, list[InputResult]], None], depth: int = 2) -> None:
        """Run (index, code) jobs until ``jobs`` is empty, calling ``done`` for each.

        Keeps ``depth`` requests in flight, so the next program is already waiting in the
        pipe when the worker replies: the verifier's round trip leaves the critical path.
        A lost worker fails the programs in flight (not retried) and is restarted.
        """
        inflight: deque[int] = deque()
        reply_s = limits.max_wall_s(inputs) + REPLY_GRACE_S
        while True:
            try:
                self._load_task(key, inputs, limits)
                while len(inflight) < depth:
                    try:
                        index, code = jobs.get_nowait()
                    except queue.Empty:
                        break
                    inflight.append(index)
                    self._send_code(code)
                if not inflight:
                    return
                raw = self._recv_run(reply_s)
                done(inflight.popleft(), decode_run(raw, len(inputs)))
            except WorkerLost as e:
                lost = [InputResult("error", None, "SandboxError", str(e)[:MAX_MESSAGE])]
                while inflight:
                    done(inflight.popleft(), lost * len(inputs))
                self.restart()

    def _load_task(self, key: str, inputs: Sequence[Grid], limits: SandboxLimits) -> None:
        if self._proc is None:
            self.start()
        if self._task_key != key:
            self._send({"op": "task", "inputs": [encode_rows(g) for g in inputs],
                        "budgets": limits.budgets(inputs), "limits": limits.wire(inputs)})
            self._recv(REPLY_GRACE_S)
            self._task_key = key

    def ping(self) -> dict[str, Any]:
        """The worker's own open fds and resident memory (all earlier children reaped)."""
        if self._proc is None:
            self.start()
        self._send({"op": "ping"})
        return self._recv(REPLY_GRACE_S)

    def _send_code(self, code: str) -> None:
        # raw, not JSON: the worker keeps it in a buffer it wipes (wire.INBUF)
        self._send_body(b"R" + code.encode("utf-8", "surrogatepass"))

    def _recv_run(self, timeout_s: float) -> dict[str, Any]:
        """A run's reply: a JSON frame, then ``out_len`` raw bytes of the child's output."""
        raw = self._recv(timeout_s)
        n = raw.pop("out_len", 0)
        if type(n) is not int or n < 0:
            raise WorkerLost(f"sandbox worker {self.pid} sent a malformed reply")
        raw["out"] = self._read_exact(self._proc.stdout, n, timeout_s).decode("latin-1")
        return raw

    def _send(self, obj: dict[str, Any]) -> None:
        self._send_body(json.dumps(obj).encode())

    def _send_body(self, body: bytes) -> None:
        if self._proc is None or self._proc.stdin is None:
            raise WorkerLost("sandbox worker is not running")
        try:
            self._proc.stdin.write(struct.pack(">I", len(body)) + body)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerLost(f"sandbox worker {self.pid} is gone: {e}") from e

    def _recv(self, timeout_s: float) -> dict[str, Any]:
        if self._proc is None or self._proc.stdout is None:
            raise WorkerLost("sandbox worker is not running")
        out = self._proc.stdout
        head = self._read_exact(out, 4, timeout_s)
        return json.loads(self._read_exact(out, struct.unpack(">I", head)[0], timeout_s))

    def _read_exact(self, out: Any, n: int, timeout_s: float) -> bytes:
        buf = bytearray()
        fd = out.fileno()
        while len(buf) < n:
            ready, _, _ = select.select([fd], [], [], timeout_s)
            if not ready:
                raise WorkerLost(f"sandbox worker {self.pid} did not answer in {timeout_s:.1f} s")
            chunk = os.read(fd, n - len(buf))
            if not chunk:
                raise WorkerLost(f"sandbox worker {self.pid} exited")
            buf += chunk
        return bytes(buf)


def decode_run(raw: dict[str, Any], n_inputs: int) -> list[InputResult]:
    """A worker's raw reply -> one InputResult per input. The lines are untrusted."""
    lines = raw.get("out", "").split("\n")[:-1]  # only complete lines
    results = [_decode_line(line) for line in lines[:n_inputs]]
    term, code = raw.get("term"), raw.get("exit_code", 0)
    while len(results) < n_inputs:
        first = len(results) == len(lines)
        if term == "timeout":
            wall = raw.get("timeout_kind") == "wall"  # within its CPU budget: maybe not its fault
            results.append(InputResult("timeout", None, "WallTimeout" if wall else "Timeout",
                           (f"exceeded its wall-clock allowance (cpu {raw.get('cpu_s', 0):.3f} s,"
                            f" wall {raw.get('wall_s', 0):.3f} s)" if wall else
                            f"exceeded its time budget (cpu {raw.get('cpu_s', 0):.3f} s)")
                           if first else "not run: an earlier input timed out"))
        elif term == "overflow":
            results.append(InputResult("invalid_output", None, "OutputTooLarge",
                                       "wrote more result data than allowed"))
        elif code == EXIT_SETUP_FAILED:
            results.append(InputResult("error", None, "SandboxError", "sandbox setup failed"))
        elif code == -signal.SIGKILL:  # not ours (ours are "timeout"): the kernel's OOM killer
            results.append(InputResult("memory", None, "Killed", "killed, likely out of memory"))
        elif isinstance(code, int) and code < 0 and -code in SELF_INFLICTED_SIGNALS:
            results.append(InputResult("error", None, "Crashed",
                                       f"killed by signal {_signal_name(-code)}"))
        elif isinstance(code, int) and code < 0:  # sent by someone else: not the program's
            results.append(InputResult("error", None, "Signalled",
                                       f"killed by signal {_signal_name(-code)} from outside"))
        else:
            results.append(InputResult("error", None, "Exited",
                                       f"the process exited (code {code}) before returning"))
    return results


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return str(n)


def _decode_line(line: str) -> InputResult:
    bad = InputResult("invalid_output", None, "MalformedResult", "unreadable result line")
    if len(line) > 4 * 30 * 31 + 1000:
        return bad
    try:
        item = json.loads(line)
    except (ValueError, RecursionError):
        return bad
    if type(item) is not list or not item or type(item[0]) is not str or item[0] not in STATUSES:
        return bad
    if item[0] == "ok":
        grid = decode_rows(item[1]) if len(item) == 2 else None
        return bad if grid is None else InputResult("ok", grid)
    if len(item) != 3 or type(item[1]) is not str or type(item[2]) is not str:
        return bad
    return InputResult(item[0], None, item[1][:80], item[2][:MAX_MESSAGE])
