"""Where a demo search's time goes, in every process of the run: py-spy over bench_soar's search.

    python scripts/profile_soar.py --levers off,on --out /tmp/prof     # runs and splits
    python scripts/profile_soar.py --split /tmp/prof/on.txt --rate 50  # splits a recorded profile

Runs bench_soar's demo search (benchmarks/bench_soar.py: its config, its prefix levers) on
local Ray: once to fill the execution cache, then once per lever under `py-spy record
--subprocesses` (the driver, the sampler and verifier actors, Ray's own processes), and
prints the CPU seconds of active Python threads per part: the engine's model forward,
prefill, grammar mask, generate loop and tokenizer, Ray's processes, the verifier, the
driver. The sampler actor's start-up (imports, model load, before the search) is shown
apart. Needs py-spy (`pip install py-spy`; it reads other processes' memory, so ptrace must
be allowed). A Ray worker waiting for work sits in native code that py-spy counts as
active; those samples are dropped.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

STARTUP = "sampler: actor start-up (imports, model load; before the search)"


def classify(frames: list[str], process: str) -> str | None:
    """The part of the search one stack belongs to (None: an idle Ray worker)."""
    s = ";".join(frames)
    if frames and frames[-1].startswith("Worker.main_loop") and len(frames) <= 2:
        return None
    if "search/engines" in s or "SamplerWorker" in s:
        if "TransformersEngine.generate" not in s:
            if "importlib" in s or "from_pretrained" in s or "TransformersEngine.load" in s or "__init__" in s:
                return STARTUP
            return "sampler: other (actor, Ray hop)"
        if "importlib" in s:
            return "sampler: lazy imports on the first request"
        if "regex_constraint.py" in s or "regex_automaton.py" in s:
            return "engine: grammar mask (regex logits processor)"
        if "hf_prefix.py" in s or "TransformersEngine._prefill" in s:
            return "engine: prefill of the prompts"
        if "TransformersEngine.encode" in s or "TransformersEngine._completion" in s or "split_output" in s:
            return "engine: tokenizer"
        if "transformers/models/" in s or "Module._call_impl" in s:
            return "engine: model forward while decoding"
        return "engine: generate's own loop (sampling, stopping, cache)"
    if "verifiers/" in s:
        return "verifier (sandboxed programs)"
    if any(k in s for k in ("evolution/", "store/", "jobs/", "ray_jobs", "profile_soar")):
        return "driver (prompts, extraction, REX, vote, Redis client, Ray calls)"
    return "Ray's processes (raylet, gcs, agents) and idle actors"


def split(path: Path, rate: float) -> dict[str, float]:
    """CPU seconds per part from a py-spy raw (collapsed stacks) file."""
    totals: collections.Counter = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        last = max((i for i, f in enumerate(frames) if f.startswith("process ")), default=-1)
        part = classify(frames[last + 1 :], frames[last] if last >= 0 else "")
        if part:
            totals[part] += int(count)
    return {part: n / rate for part, n in totals.most_common()}


def report(seconds: dict[str, float]) -> None:
    searched = sum(v for k, v in seconds.items() if k != STARTUP)
    print(f"| {'part':66s} | {'CPU s':>7s} | {'share':>5s} |")
    for part, value in seconds.items():
        share = "" if part == STARTUP else f"{value / searched:5.0%}"
        print(f"| {part:66s} | {value:7.1f} | {share:>5s} |")
    print(f"| {'total (start-up left out)':66s} | {searched:7.1f} | |")


def run(levers: list[str], out: Path, rate: int) -> None:
    import ray

    from benchmarks.bench_soar import LEVERS, NO_CONTROLS
    from common.config import load_config
    from evolution.config import SoarConfig
    from jobs import runner
    from ray_jobs import soar

    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    tag = uuid.uuid4().hex[:6]
    with tempfile.TemporaryDirectory() as runs:
        def search(name: str, engine_kwargs: str) -> dict:
            cfg = load_config("configs/soar-demo.yaml", SoarConfig, [
                f"experiment=profile-{tag}-{name}", f"runs_dir={runs}", engine_kwargs,
                "search.samples_per_task=32", "search.refinements_per_task=16", "render_tasks=0", *NO_CONTROLS])
            return runner.execute(soar.JOB, cfg)["iterations"][0]

        search("warmup", LEVERS["on"])  # fills the execution cache, as bench_soar does
        for kind in levers:
            path = out / f"{kind.replace(' ', '-')}.txt"
            proc = subprocess.Popen([spy, "record", "--pid", str(os.getpid()), "--subprocesses", "--nonblocking",
                                     "-r", str(rate), "-f", "raw", "-o", str(path)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(2)  # py-spy attached
            e = search(kind.replace(" ", "-"), LEVERS[kind])
            proc.send_signal(signal.SIGINT)
            proc.wait()
            print(f"\n{kind}: {e['programs']} programs, search wall {e['wall_s']} s, load average "
                  f"{os.getloadavg()[0]:.2f}; {path}")
            report(split(path, rate))
    ray.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python scripts/profile_soar.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--levers", default="off,on", help="bench_soar lever settings, comma-separated")
    parser.add_argument("--out", type=Path, help="where the raw profiles go (default: a new temporary folder)")
    parser.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    parser.add_argument("--split", type=Path, help="only split this recorded raw profile")
    args = parser.parse_args(argv)
    if args.split:
        report(split(args.split, args.rate))
        return
    out = args.out or Path(tempfile.mkdtemp(prefix="profile-soar-"))
    out.mkdir(parents=True, exist_ok=True)
    run([k.strip() for k in args.levers.split(",")], out, args.rate)


if __name__ == "__main__":
    main()
