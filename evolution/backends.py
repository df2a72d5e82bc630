"""Adapters that give SoarSearch its two async functions, on Ray or in one process.

    sampler = pool_sampler(SamplerPool(...))        verifier = pool_verifier(ArcVerifierPool(...))
    sampler = local_sampler(TransformersEngine(...)) verifier = local_verifier(ArcExecutor(...))
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from common.sampling import SamplingParams
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
    lock = asyncio.Lock()  # one generate at a time: the engine is not re-entrant

    async def sample(prompts: Sequence[str], params: SamplingParams):
        async with lock:
            return await asyncio.to_thread(engine.generate, list(prompts), params)

    return sample


def local_verifier(executor) -> Verifier:
    async def verify(task: ArcTask, codes: Sequence[str]):
        return await asyncio.to_thread(executor.execute_many, task, list(codes))

    return verify
