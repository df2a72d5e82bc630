"""The transformers engine: batched `generate` on a local Hugging Face checkpoint.

Runs anywhere (CPU in tests and demos, bf16 on a GPU when one is present). The n samples
of a prompt share one prefill (its KV cache, copied n times); distinct prompts (n=1) are
generated in left-padded batches with attention masks. A seed
makes one call reproducible (the same call with the same seed gives the same completions;
unlike vLLM's per-request seeds, a row's sample also depends on the batch it shares).
`SamplingParams.regex` constrains completions as vLLM's structured outputs do
(search/engines/regex_constraint.py: allowed-token masks per state of the pattern's automaton,
kept across calls; `regex_automaton=False` scans the vocabulary per completion text instead).
Prompt states are also shared across calls: a bounded prefix cache
(search/engines/prefix_cache.py, vLLM's automatic prefix caching scheme) serves the blocks
of a prompt that an earlier prompt already computed; `prefix_cache_bytes=0` turns it off. While decoding, a prefix that every row of a batch
shares (a prompt's n samples; the block prefix of a task's refinement prompts) is held once,
not once per row (search/engines/shared_prefix.py); `shared_prefix=False` copies it per row.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    GenerationConfig,
    LogitsProcessorList,
)

from common.sampling import (
    Completion,
    Prompt,
    SamplingParams,
    check_counts,
    context_error,
    render_prompt,
    truncate_at_stop,
)
from search.engines.base import default_version
from search.engines.hf_prefix import layer_states, prefill
from search.engines.logprobs import generate_kwargs, split_output
from search.engines.prefix_cache import DEFAULT_BLOCK_TOKENS, DEFAULT_MAX_BYTES, PrefixCache
from search.engines.regex_constraint import RegexLogitsProcessor, TokenPieces, TokenRegex
from search.engines.shared_prefix import ATTENTION, SharedPrefixCache


def default_threads() -> int:
    """OMP_NUM_THREADS when set (Ray sets it to an actor's CPUs), else the CPUs we may use."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def eos_token_ids(tokenizer: Any, generation_config: Any) -> list[int]:
    """Every id that ends a completion: the tokenizer's EOS and the checkpoint's generation_config
    ones (Qwen2.5 and Llama-3 chat models end a turn with a token other than the tokenizer's EOS)."""
    ids = getattr(generation_config, "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None:
        ids.insert(0, tokenizer.eos_token_id)
    return list(dict.fromkeys(ids))


class TransformersEngine:
    def __init__(
        self,
        checkpoint: str | None = None,
        *,
        version: str | None = None,
        device: str = "auto",  # "auto": cuda when available, else cpu
        dtype: str = "auto",  # "auto": bfloat16 on cuda, float32 on cpu
        batch_size: int = 64,  # rows (prompt x sample) per generate call
        num_threads: int | None = None,  # CPU threads; None: default_threads()
        prefix_cache_bytes: int = DEFAULT_MAX_BYTES,  # KV states kept across calls; 0: no prefix cache
        prefix_block_tokens: int = DEFAULT_BLOCK_TOKENS,  # tokens per cached block (vLLM's block size)
        shared_prefix: bool = True,  # decode over a prefix the batch's rows share held once (cascade attention)
        regex_automaton: bool = True,  # regex masks per automaton state; False: scan the vocabulary per text
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} must be >= 1")
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        if dtype == "auto":
            dtype = "bfloat16" if self.device.startswith("cuda") else "float32"
        self.dtype = getattr(torch, dtype)
        self.batch_size = batch_size
        if self.device == "cpu":
            torch.set_num_threads(num_threads or default_threads())
        self.shared_prefix = shared_prefix
        self.regex_automaton = regex_automaton
        self.prefix_cache = PrefixCache(prefix_cache_bytes, prefix_block_tokens) if prefix_cache_bytes else None
        self.model: Any = None
        self._constraints: dict[str, Any] = {}
        self.tokenizer: Any = None
        self.version: str | None = None
        self.context_length: int | None = None
        if checkpoint is not None:
            self.load(checkpoint, version)

    def load(self, checkpoint: str, version: str | None = None) -> None:

        if not os.path.isdir(checkpoint):
            raise FileNotFoundError(f"checkpoint {checkpoint} is not a directory; pass a Hugging Face checkpoint dir")
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        attention = {"attn_implementation": ATTENTION} if self.shared_prefix else {}
        model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=self.dtype, **attention).to(self.device).eval()
        if tokenizer.pad_token_id is None:  # left padding needs a pad id; EOS is the usual stand-in
            tokenizer.pad_token = tokenizer.eos_token
        self.model, self.tokenizer = model, tokenizer
        self.eos_ids = eos_token_ids(tokenizer, model.generation_config)
        if self.prefix_cache is not None:
            self.prefix_cache.clear()  # states computed by the previous weights
        self._constraints: dict[str, Any] = {}  # regex -> TokenRegex for this tokenizer
        self._pieces: TokenPieces | None = None  # the tokenizer's token texts, shared by every pattern
        self.context_length = int(getattr(model.config, "max_position_embeddings", 0)) or None
        self.version = version or default_version(checkpoint)
        # transformers 5.2x renamed past_key_values to cache; the GPU set (vLLM's pin) has the old name.
        self._cache_arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    @torch.no_grad()
    def load_weights(self, weights: dict[str, torch.Tensor], version: str, checkpoint: str | None = None) -> None:
        """New weights from memory (Hugging Face names -> tensors, e.g. from Ray's object store)
        into the loaded model with `load_state_dict`: no checkpoint read. Names and shapes are
        checked before anything is copied, so a bad state dict leaves the old weights serving.
        `checkpoint` is recorded only (where the registry keeps the same weights)."""
        self._require_model()
        own = self.model.state_dict()
        tied = {"lm_head.weight"} if getattr(self.model.config, "tie_word_embeddings", False) else set()
        missing = set(own) - set(weights) - tied
        unexpected = set(weights) - set(own)
        wrong = sorted(k for k in set(weights) & set(own) if tuple(weights[k].shape) != tuple(own[k].shape))
        if missing or unexpected or wrong:
            raise ValueError(f"load_weights({version!r}): the weights do not fit the loaded model (missing "
                             f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]}, wrong shape {wrong[:3]}); "
                             f"load(checkpoint) for another architecture. Still serving {self.version!r}")
        self.model.load_state_dict(weights, strict=False)  # copies into the existing tensors, casting dtype
        if self.prefix_cache is not None:
            self.prefix_cache.clear()  # states computed by the previous weights
        self.version = version

    def _require_model(self) -> None:
        if self.model is None:
            raise RuntimeError("no checkpoint loaded: call load(checkpoint) first")

    def encode(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[int]]:
        """Token ids per prompt, rejecting any that do not fit the context with max_tokens."""
        self._require_model()
        ids = []
        for i, p in enumerate(prompts):
            # Chat text already carries the template's special tokens; plain text gets the defaults.
            tokens = self.tokenizer(render_prompt(self.tokenizer, p), add_special_tokens=isinstance(p, str))["input_ids"]
            if self.context_length and len(tokens) + params.max_tokens > self.context_length:
                raise context_error(i, len(tokens), params.max_tokens, self.context_length)
            ids.append(tokens)
        return ids

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        ids = self.encode(prompts, params)
        # Greedy samples are identical: generate each prompt once and copy it n times.
        copies = 1 if params.greedy else params.n
        rows = [i for i in range(len(ids)) for _ in range(copies)]
        results: list[list[Completion]] = [[] for _ in prompts]
        devices = [torch.cuda.current_device()] if self.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices, enabled=params.seed is not None):
            if params.seed is not None:
                torch.manual_seed(params.seed)
            if copies > 1:  # samples of one prompt share its prefill (the prompt's KV cache)
                for i, prompt_ids in enumerate(ids):
                    for start in range(0, copies, self.batch_size):
                        results[i] += self._generate_shared(prompt_ids, min(self.batch_size, copies - start), params)
            else:
                run = self._generate_batch if self.prefix_cache is None else self._generate_cached_batch
                for start in range(0, len(rows), self.batch_size):
                    batch = rows[start : start + self.batch_size]
                    for i, completion in zip(batch, run([ids[i] for i in batch], params), strict=True):
                        results[i].append(completion)
        if params.greedy:
            results = [[row[0]] + [Completion(**row[0].to_dict()) for _ in range(params.n - 1)] for row in results]
        check_counts(results, len(prompts), params.n, "transformers engine")
        return results

    def _generate_shared(self, prompt_ids: list[int], n: int, params: SamplingParams) -> list[Completion]:
        """n samples of one prompt: the prompt (but its last token) is run once, its KV cache
        copied n times, then generate continues from it. Several times faster than n
        prefills when prompts are long and completions short, as SOAR's are."""

        if len(prompt_ids) < 2:
            return self._generate_batch([prompt_ids] * n, params)
        cache, _, _ = self._prefill([prompt_ids[:-1]])
        if self.shared_prefix:  # the prompt's states once, each sample's own columns after them
            cache = SharedPrefixCache(layer_states(cache), n)
        else:
            cache.batch_repeat_interleave(n)
        name = self._cache_arg
        input_ids = torch.tensor([prompt_ids] * n, device=self.device)
        out = self.model.generate(
            input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **{name: cache},
            generation_config=self._generation_config(params), tokenizer=self.tokenizer if params.stop else None,
            logits_processor=self._processors(params, len(prompt_ids)),
        )
        rows, logprobs = split_output(out, len(prompt_ids), params, self.tokenizer)
        return [self._completion(row, len(prompt_ids), params, logprobs and logprobs[r]) for r, row in enumerate(rows)]

    def _prefill(self, rows: list[list[int]]) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
        """The states of `rows` (prompts but their last tokens): one cache, with its columns'
        token ids and attention mask; through the prefix cache when there is one. Only the
        states are wanted: the forward passes compute one position's logits (logits_to_keep),
        not the vocabulary's for every prompt token."""
        if self.prefix_cache is None:
            cache = DynamicCache(config=self.model.config)
            ids = torch.tensor(rows, device=self.device)
            self.model(input_ids=ids, **{self._cache_arg: cache}, use_cache=True, logits_to_keep=1)
            return cache, ids, torch.ones_like(ids)
        return prefill(self.model, rows, self.prefix_cache, cache_arg=self._cache_arg,
                       pad_id=self.tokenizer.pad_token_id, device=self.device, shared=self.shared_prefix)

    def _generate_cached_batch(self, batch: list[list[int]], params: SamplingParams) -> list[Completion]:
        """_generate_batch with the prompts' states from _prefill: generate then runs only
        each prompt's last token (a left-padded batch, with pads inside it as well)."""
        if any(len(x) < 2 for x in batch):  # one-token prompts: nothing to reuse
            return self._generate_batch(batch, params)
        tok = self.tokenizer
        cache, ids, mask = self._prefill([x[:-1] for x in batch])
        last = torch.tensor([[x[-1]] for x in batch], device=self.device)
        input_ids, mask = torch.cat([ids, last], dim=1), torch.cat([mask, torch.ones_like(last)], dim=1)
        width = input_ids.shape[1]
        out = self.model.generate(
            input_ids=input_ids, attention_mask=mask, **{self._cache_arg: cache},
            generation_config=self._generation_config(params), tokenizer=tok if params.stop else None,
            logits_processor=self._processors(params, width),
        )
        generated, logprobs = split_output(out, width, params, tok)
        return [self._completion(row, len(x), params, logprobs and logprobs[r])
                for r, (row, x) in enumerate(zip(generated, batch, strict=True))]

    def stats(self) -> dict[str, Any]:
        """The prefix cache's counters: hit_rate = prompt tokens reused / prompt tokens, bytes held."""
        return {"prefix_cache": self.prefix_cache.stats() if self.prefix_cache is not None else {"enabled": False}}

    def _generate_batch(self, batch: list[list[int]], params: SamplingParams) -> list[Completion]:
        tok = self.tokenizer
        width = max(len(x) for x in batch)
        pad = tok.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in batch], device=self.device)
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in batch], device=self.device)
        out = self.model.generate(
            input_ids=input_ids, attention_mask=mask, generation_config=self._generation_config(params),
            tokenizer=tok if params.stop else None, logits_processor=self._processors(params, width),
        )
        generated, logprobs = split_output(out, width, params, tok)
        return [self._completion(row, len(x), params, logprobs and logprobs[r])
                for r, (row, x) in enumerate(zip(generated, batch, strict=True))]

    def _generation_config(self, params: SamplingParams):

        tok = self.tokenizer
        # A fresh config (not the checkpoint's generation_config) so every engine samples with
        # the same defaults, like vLLM's generation_config="vllm".
        return GenerationConfig(
            max_new_tokens=params.max_tokens, do_sample=not params.greedy,
            temperature=params.temperature if not params.greedy else None,
            top_p=params.top_p if not params.greedy else None,
            top_k=params.top_k if not params.greedy else None,
            min_p=(params.min_p or None) if not params.greedy else None,
            eos_token_id=self.eos_ids, pad_token_id=tok.pad_token_id,
            stop_strings=list(params.stop) or None, **generate_kwargs(params),
        )

    def _processors(self, params: SamplingParams, prompt_width: int):


        if params.regex is None:
            return None
        if params.regex not in self._constraints:
            if len(self._constraints) >= 256:  # one pattern per task is typical; bound the memory
                self._constraints.clear()
            self._pieces = self._pieces or TokenPieces(self.tokenizer)
            self._constraints[params.regex] = TokenRegex(params.regex, self.tokenizer, self._pieces,
                                                         automaton=self.regex_automaton)
        return LogitsProcessorList([RegexLogitsProcessor(self._constraints[params.regex], self.tokenizer, prompt_width)])

    def _completion(self, row: list[int], prompt_tokens: int, params: SamplingParams,
                    logprobs: list[dict[str, Any]] | None = None) -> Completion:
        pad = self.tokenizer.pad_token_id
        ends = [i for i, t in enumerate(row) if t in self.eos_ids][:1]
        if ends:
            length, hit_eos = ends[0] + 1, True
        else:
            # A row finished by a stop string is padded after it; a full row has no padding.
            length, hit_eos = len(row), False
            while length and row[length - 1] == pad:
                length -= 1
        text = self.tokenizer.decode(row[:length], skip_special_tokens=True)
        text, hit_stop = truncate_at_stop(text, params.stop)
        return Completion(
            text=text, finish_reason="stop" if hit_eos or hit_stop else "length",
            prompt_tokens=prompt_tokens, completion_tokens=length, model_version=self.version,
            logprobs=None if logprobs is None else logprobs[:length],
        )

