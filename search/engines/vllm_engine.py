"""The vLLM engine: offline `vllm.LLM` on a GPU, for real sampling throughput.

vLLM is imported lazily (it exists only with `pip install .[gpu]` on CUDA machines). The
model's own generation_config is ignored (`generation_config="vllm"`) so the sampling
defaults match the other engines. Tested by the `gpu`-marked test in tests/test_engines.py:

    pip install -e '.[gpu]' && pytest -m gpu tests/test_engines.py
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

from search.engines.base import default_version
from common.sampling import (
    Completion,
    Prompt,
    SamplingParams,
    check_counts,
    context_error,
    render_prompt,
)


def _structured(regex: str | None):
    if regex is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    return StructuredOutputsParams(regex=regex)


def _import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(
            "engine 'vllm' needs the vllm package (CUDA machines only): pip install -e '.[gpu]'; "
            "on CPU use engine 'transformers'"
        ) from e
    return vllm


class VLLMEngine:
    def __init__(
        self,
        checkpoint: str | None = None,
        *,
        version: str | None = None,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.85,  # of the GPU this actor was given
        max_model_len: int | None = None,  # None: the model's max_position_embeddings
        seed: int = 0,  # engine seed; requests with params.seed are reproducible on their own
        enforce_eager: bool = False,  # True skips CUDA graph capture: faster load, slower decode
        llm_kwargs: dict[str, Any] | None = None,  # any further vllm.LLM arguments
    ):
        self.llm_args: dict[str, Any] = dict(
            dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len,
            seed=seed, enforce_eager=enforce_eager, **(llm_kwargs or {}),
        )
        self.llm: Any = None
        self.tokenizer: Any = None
        self.version: str | None = None
        self.context_length: int | None = None
        if checkpoint is not None:
            self.load(checkpoint, version)

    def load(self, checkpoint: str, version: str | None = None) -> None:
        vllm = _import_vllm()
        if self.llm is not None:
            # One LLM per GPU at a time: free the old engine's weights and KV cache first.
            self.llm = self.tokenizer = None
            gc.collect()
            import torch

            torch.cuda.empty_cache()
        self.llm = vllm.LLM(model=checkpoint, generation_config="vllm", **self.llm_args)
        self.tokenizer = self.llm.get_tokenizer()
        self.context_length = self.llm.llm_engine.model_config.max_model_len
        self.version = version or default_version(checkpoint)

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        if self.llm is None:
            raise RuntimeError("no checkpoint loaded: call load(checkpoint) first")
        vllm = _import_vllm()
        texts = [render_prompt(self.tokenizer, p) for p in prompts]
        # Check lengths here so an over-long prompt fails alone with the same error as elsewhere.
        for i, (p, text) in enumerate(zip(prompts, texts, strict=True)):
            length = len(self.tokenizer(text, add_special_tokens=isinstance(p, str))["input_ids"])
            if length + params.max_tokens > self.context_length:
                raise context_error(i, length, params.max_tokens, self.context_length)
        sampling = vllm.SamplingParams(
            n=params.n, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k,
            min_p=params.min_p, max_tokens=params.max_tokens, stop=list(params.stop) or None,
            seed=params.seed,
            structured_outputs=_structured(params.regex),
        )
        # Chat text already holds the template's special tokens: pass token ids so vLLM adds none.
        inputs = [
            text if isinstance(p, str)
            else {"prompt_token_ids": self.tokenizer(text, add_special_tokens=False)["input_ids"]}
            for p, text in zip(prompts, texts, strict=True)
        ]
        outputs = self.llm.generate(inputs, sampling, use_tqdm=False)
        results = [
            [
                Completion(
                    text=o.text, finish_reason="length" if o.finish_reason == "length" else "stop",
                    prompt_tokens=len(out.prompt_token_ids), completion_tokens=len(o.token_ids),
                    model_version=self.version,
                )
                for o in out.outputs
            ]
            for out in outputs
        ]
        check_counts(results, len(prompts), params.n, "vllm engine")
        return results
