"""Foundation demo: seed model -> one SFT round as a Ray task -> new version in the registry.

    python -m ray_jobs.sft_demo                                  # local Ray, local Redis
    python -m ray_jobs.sft_demo --config configs/sft-demo.yaml sft_steps=200
    ray job submit --working-dir . -- python -m ray_jobs.sft_demo

It builds (or reuses) a tiny seed model that maps the last digit of `map 3 1 4 =>` through
the identity, fine-tunes it with TRL SFT on a new mapping, publishes the result as a new
model version in Redis, and reports held-out greedy accuracy before and after. The SOAR
job replaces this as `make demo` once it exists. The steps live in training/sft_demo.py;
this file only wires them.
"""

from __future__ import annotations

from jobs import runner
from training.sft_demo import SftDemoConfig, run_demo


async def run(cfg: SftDemoConfig, ctx: runner.JobContext) -> dict:
    return await run_demo(cfg, ctx.store, ctx.run_dir)


JOB = runner.JobSpec(workload="sft-demo", config_cls=SftDemoConfig, run=run, doc=__doc__,
                     headline=lambda s: f"{s['base_version']} -> {s['new_version']}: held-out accuracy "
                                        f"{s['heldout_accuracy_before']:.2f} -> {s['heldout_accuracy_after']:.2f}")


def main(argv: list[str] | None = None) -> dict:
    return runner.main(JOB, argv)


if __name__ == "__main__":
    main()
