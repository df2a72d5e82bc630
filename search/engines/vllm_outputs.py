"""vLLM's RequestOutputs -> ratchet's Completions: finish reasons that only pass when they are
stop or length, greedy rows copied to n, and vLLM's ranked logprobs in OpenAI's entry shape
(search/engines/vllm_engine.py says why each exists)."""

from __future__ import annotations

from typing import Any

from common.sampling import Completion, SamplingParams, check_counts
from search.engines.vllm_setup import GREEDY_BELOW


def completions(outputs: list[Any], params: SamplingParams, version: str | None, tokenizer: Any,
                ) -> list[list[Completion]]:
    """One row of params.n Completions per vLLM RequestOutput, in prompt order."""
    results = [
        [
            Completion(
                text=o.text, finish_reason=finish_reason(o.finish_reason, i),
                prompt_tokens=len(out.prompt_token_ids), completion_tokens=len(o.token_ids),
                model_version=version, logprobs=ranked_logprobs(o, params.logprobs, tokenizer),
            )
            for o in out.outputs
        ]
        for i, out in enumerate(outputs)
    ]
    if params.temperature < GREEDY_BELOW:  # sampled once (vLLM wants n=1 when greedy): copy to n
        results = [[row[0]] + [Completion(**row[0].to_dict()) for _ in range(params.n - 1)] for row in results]
    check_counts(results, len(outputs), params.n, "vllm engine")
    return results


def ranked_logprobs(output: Any, k: int | None, tokenizer: Any) -> list[dict[str, Any]] | None:
    """vLLM's per-token {token id: Logprob} (the k most likely plus the sampled token, each
    with its rank) -> Completion.logprobs' entries, top ones in rank order."""
    if k is None or output.logprobs is None:
        return None

    def entry(token_id: int, lp: Any) -> dict[str, Any]:
        text = lp.decoded_token if lp.decoded_token is not None else tokenizer.decode([token_id])
        return {"token": text, "logprob": float(lp.logprob), "bytes": list(text.encode("utf-8"))}

    entries = []
    for token_id, candidates in zip(output.token_ids, output.logprobs, strict=True):
        top = sorted(((t, lp) for t, lp in candidates.items() if lp.rank is not None and lp.rank <= k),
                     key=lambda item: item[1].rank)
        entries.append(entry(token_id, candidates[token_id]) | {"top_logprobs": [entry(t, lp) for t, lp in top]})
    return entries


def finish_reason(reason: str | None, prompt_index: int) -> str:
    if reason in ("stop", "length"):
        return reason
    raise RuntimeError(
        f"vLLM finished a sample of prompt {prompt_index} with finish_reason={reason!r} (not stop or length): "
        "the request was aborted or failed inside the engine; see vLLM's log, then retry the call"
    )
