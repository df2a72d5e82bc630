"""`ratchet serve` with the trained verifier beside SmolLM2 on vLLM's CPU build, asked through the
official `openai` client (issue #45): the served weighted Best-of-N picks the answer the offline
strategy picks on the same candidates and verdicts, and every verdict parsed.

Runs in the vLLM virtualenv (make test-vllm); skipped where vllm does not import.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from common.config import load_config  # noqa: E402
from drills.demo_real import ROOT, ratchet_serve  # noqa: E402
from drills.serve_search import NAME, serve_overrides  # noqa: E402
from scaling.config import ScalingConfig  # noqa: E402
from scaling.experiment import load_questions  # noqa: E402
from search.scored_pool import ScoredPool  # noqa: E402
from search.strategies import Draws, StrategyOptions, get_strategy  # noqa: E402
from verifiers.selfverify import answer_prompt  # noqa: E402

CONFIG = load_config(str(ROOT / "configs/scaling-smollm-verifier.yaml"), ScalingConfig, [])


@pytest.fixture(scope="module")
def client():
    with ratchet_serve(serve_overrides(CONFIG), NAME, timeout_s=900, request_timeout_s=900) as c:
        yield c


def offline_choice(search: dict) -> tuple[float, set[int]]:
    """Offline weighted Best-of-N's accuracy on these candidates when only the live choice's answer
    is right, and the answers with the largest summed score (a tie is settled at random)."""
    cands = search["candidates"]
    chosen = cands[search["index"]]["answer_id"]
    n_classes = max(c["answer_id"] for c in cands) + 1
    ok = [a == chosen for a in range(n_classes)]
    record = {"id": "q", "answer_correct": ok, "comparisons": [],
              "candidates": [{"answer_id": c["answer_id"], "correct": c["answer_id"] >= 0 and ok[c["answer_id"]],
                              "verdicts": c["verdicts"], "verdict_probs": c["probabilities"]} for c in cands]}
    pool = ScoredPool.from_records([record], score="probability")
    accuracy = get_strategy("weighted_best_of_n")(pool, Draws(pool, seeds=20), k=len(cands), k_verif=None,
                                                  options=StrategyOptions()).per_question[0]
    sums = {a: sum(c["score"] for c in cands if c["answer_id"] == a) for a in range(n_classes)}
    best = max(sums.values())
    return float(accuracy), {a for a, v in sums.items() if v >= best - 1e-6}


def test_served_weighted_best_of_n_picks_what_the_offline_strategy_picks(client):
    assert [m.id for m in client.models.list().data] == [NAME, "smollm2-verifier-lora"]
    for question in load_questions(CONFIG)[:3]:
        reply = client.chat.completions.create(
            model=NAME, messages=answer_prompt(question["question"]), temperature=CONFIG.temperature,
            max_tokens=CONFIG.max_tokens, seed=0, extra_body={"search": {"k": 8, "return_candidates": True}})
        search = reply.model_extra["search"]
        assert search["strategy"] == "weighted_best_of_n" and len(search["candidates"]) == 8
        assert reply.choices[0].message.content == search["candidates"][search["index"]]["text"]
        # constrained verdicts from the adapter: every one parsed, each with its probability
        assert all(c["verdicts"][0] in (0, 1) and 0 < c["probabilities"][0] < 1 for c in search["candidates"])
        if all(c["answer_id"] < 0 for c in search["candidates"]):
            continue  # no answer to vote for
        accuracy, tied = offline_choice(search)
        assert search["candidates"][search["index"]]["answer_id"] in tied
        assert accuracy == pytest.approx(1 / len(tied))
