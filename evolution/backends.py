"""Adapters that give SoarSearch its two async functions, on Ray or in one process.

    sampler = pool_sampler(SamplerPool(...))        verifier = pool_verifier(ArcVerifierPool(...))
    sampler = local_sampler(TransformersEngine(...)) verifier = local_verifier(ArcExecutor(...))
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from common.sampling import threaded_generate
from evolution.driver import Sampler
from verifiers.arc.grids import ArcTask
from verifiers.arc.results import Verifier


def pool_sampler(pool) -> Sampler:
    """A SamplerPool: each call is one request on the least-loaded actor."""
    return pool.submit


def pool_verifier(vpool) -> Verifier:
    """An ArcVerifierPool: chunks spread over the actors, awaited without blocking the loop."""

    return vpool.execute


def local_sampler(engine) -> Sampler:
    """An in-process engine, run in a thread so the event loop keeps verifying meanwhile."""
    return threaded_generate(engine)


def local_verifier(executor) -> Verifier:
    async def verify(task: ArcTask, codes: Sequence[str]):
        return await asyncio.to_thread(executor.execute_many, task, list(codes))

    return verify
