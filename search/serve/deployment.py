"""The Ray Serve deployment: one replica owns a SamplerPool and serves the OpenAI app over it.

The replica itself takes no CPU (`REPLICA_CPUS`): the pool's actors do the sampling, so on
a small machine the replica never competes with them for a core.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import InitVar, dataclass, field, replace
from pathlib import Path
from typing import Any

from ray import serve

from common.sampling import Completion, Prompt, SamplingParams
from search.pool import PoolConfig, SamplerPool
from search.serve.app import build_app
from search.serve.guard import api_key_digest
from search.serve.limits import ServeLimits
from search.serve.protocol import ReasoningSplit

REPLICA_CPUS = 0  # the replica only routes; the pool's actors hold the CPUs/GPUs


@dataclass
class ServeSettings:
    pool: PoolConfig = field(default_factory=PoolConfig)
    checkpoint: str | None = None  # a Hugging Face checkpoint dir; or use pool.experiment
    version: str | None = None  # registry version in pool.experiment; None: its current version
    model_name: str | None = None  # the id clients send as "model"; default: experiment or checkpoint name
    aliases: tuple[str, ...] = ()  # other ids it answers to (a pinned model's pretrained: name, its dir's name)
    # The bearer token: only its SHA-256 is kept, so the key never enters Ray's cluster state
    # (these settings are the deployment's init args). None: no auth.
    api_key: InitVar[str | None] = None
    api_key_sha256: str | None = None  # or give the digest directly
    limits: ServeLimits = field(default_factory=ServeLimits)
    chat_max_tokens: int = 256  # default max_tokens of chat requests that set none
    reasoning: ReasoningSplit | None = None  # thinking model: thought -> reasoning_content; None: off
    verifier: str | None = None  # a checkpoint dir that gives searches their verdicts, in its own pool
    verifier_name: str | None = None  # the id it is served as

    def __post_init__(self, api_key: str | None):
        if api_key is not None:
            if not api_key:
                raise ValueError("ServeSettings.api_key is empty: pass a key, or None for no auth")
            self.api_key_sha256 = api_key_digest(api_key)
        if (self.checkpoint is None) == (self.pool.experiment is None):
            raise ValueError("ServeSettings needs exactly one model source: checkpoint=PATH, "
                             "or pool.experiment=NAME (with an optional version)")
        if self.checkpoint is not None and self.version is not None:
            raise ValueError("ServeSettings.version names a registry version: set pool.experiment, not checkpoint")
        if (self.verifier is None) != (self.verifier_name is None):
            raise ValueError("ServeSettings.verifier and verifier_name go together")
        if self.chat_max_tokens < 1:
            raise ValueError(f"ServeSettings.chat_max_tokens={self.chat_max_tokens} must be >= 1")

    @property
    def served_name(self) -> str:
        if self.model_name:
            return self.model_name
        return self.pool.experiment or Path(str(self.checkpoint).rstrip("/")).name


class PoolBackend:
    """The app's backend: every request goes through the pool."""

    def __init__(self, pool: SamplerPool, context_length: int | None = None):
        self.pool = pool
        self.context_length = context_length

    @property
    def version(self) -> str | None:
        return self.pool.version

    async def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        return await self.pool.generate(prompts, params)

    def stream(self, prompts: Sequence[Prompt], params: SamplingParams) -> AsyncIterator[tuple[int, list[Completion]]]:
        return self.pool.stream(prompts, params)

    async def stats(self) -> list[Any]:
        return await self.pool.stats()


@serve.deployment(ray_actor_options={"num_cpus": REPLICA_CPUS})
@serve.ingress()
class OpenAIServer:
    async def __init__(self, settings: ServeSettings):
        self.settings = settings
        self.pool = SamplerPool(settings.pool, checkpoint=settings.checkpoint)
        if settings.pool.experiment:
            await self.pool.load(settings.version)
        else:
            self.pool.version = (await self.pool.ready())[0]
        self.context_length = await self.pool.context_length()
        self.verifier_pool = self.verifier_context = None
        if settings.verifier:  # a pool of its own, with the sampler's settings
            self.verifier_pool = SamplerPool(replace(settings.pool, experiment=None), checkpoint=settings.verifier)
            self.verifier_pool.version = (await self.verifier_pool.ready())[0]
            self.verifier_context = await self.verifier_pool.context_length()

    def __serve_build_asgi_app__(self) -> Any:
        s = self.settings
        verifier = PoolBackend(self.verifier_pool, self.verifier_context) if self.verifier_pool else None
        return build_app(PoolBackend(self.pool, self.context_length), model_name=s.served_name, aliases=s.aliases,
                         api_key_sha256=s.api_key_sha256, limits=s.limits, chat_max_tokens=s.chat_max_tokens,
                         reasoning=s.reasoning, verifier=verifier, verifier_name=s.verifier_name)

    def __del__(self):
        for pool in (getattr(self, "pool", None), getattr(self, "verifier_pool", None)):
            if pool is not None:
                pool.shutdown()


def build_serve_app(settings: ServeSettings) -> Any:
    """The Serve application to pass to `serve.run`."""
    return OpenAIServer.bind(settings)
