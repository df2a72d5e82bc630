"""TPO: thought prompts and parsing, length-controlled pairs, the loop (stub sampler, real Redis)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from common.config import ConfigError, load_config
from common.sampling import Completion, SamplingParams
from search.weight_sync import Switch
from thinking.arith import DEMO_THOUGHT, instructions, seed_corpus
from thinking.config import SampleConfig, TpoConfig
from thinking.loop import TpoLoop
from thinking.pairs import Group, PairsConfig, Sample, build_pairs, choose_rho, pick
from thinking.prompts import DirectPrompt, DirectPromptConfig, ThoughtPrompt, ThoughtPromptConfig
from thinking.state import TpoState
from verifiers.judges import JudgeItem, Verdict


# -- prompts and parser --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["generic", "specific"])
@pytest.mark.parametrize("style", ["plain", "chat"])
def test_thought_prompts_name_both_markers(kind, style):
    cfg = ThoughtPromptConfig(kind=kind, style=style, thought_marker="<T>", response_marker="<R>")
    p = ThoughtPrompt(cfg).build("Reverse abc.")
    text = p if isinstance(p, str) else p[0]["content"]
    assert "Reverse abc." in text and "<T>" in text and "<R>" in text
    if kind == "specific":
        assert "draft response" in text
    assert isinstance(p, str) == (style == "plain")


def test_parser_splits_thought_from_response():
    tp = ThoughtPrompt(ThoughtPromptConfig(style="chat", prefill_thought_marker=False))
    out = tp.parse("Here is my thought process: 2+2 is 4.\nHere is my response: Four.")
    assert (out.ok, out.thought, out.response) == (True, "2+2 is 4.", "Four.")


@pytest.mark.parametrize("text, reason", [
    ("just an answer", "no response marker"),
    ("Here is my thought process: hmm. Here is my response:   ", "empty response"),
    ("Here is my response: 4. Here is my thought process: wait", "thought marker"),
    ("Here is my thought process: a Here is my response: b Here is my response: c", "more than one"),
])
def test_parser_marks_unparsable_instead_of_guessing(text, reason):
    out = ThoughtPrompt(ThoughtPromptConfig(style="chat", prefill_thought_marker=False)).parse(text)
    assert not out.ok and out.response == "" and reason in out.error


def test_plain_prompt_prefills_the_thought_marker():
    tp = ThoughtPrompt(DEMO_THOUGHT)
    assert tp.build("3+4").endswith("Work:")
    out = tp.parse(" 3+4=7. So: 7")
    assert (out.ok, out.thought, out.response) == (True, "3+4=7.", "7")


def test_chat_prompt_prefills_the_thought_marker_and_dpo_rows_carry_it():
    """A chat model is asked in a user message and its answer starts with the thought marker (an
    assistant message it continues); the DPO rows are TRL's conversational ones with the marker
    back at the start of each assistant message, the tokens the model was sampled at."""
    from common.sampling import is_prefilled
    from thinking.pairs import trl_rows

    tp = ThoughtPrompt(ThoughtPromptConfig(style="chat"))
    prompt = tp.build("3+4")
    assert prompt[0]["role"] == "user" and is_prefilled(prompt)
    assert prompt[-1]["content"] == "Here is my thought process:"
    out = tp.parse(" 3+4=7.\nHere is my response: 7")
    assert (out.ok, out.thought, out.response) == (True, "3+4=7.", "7")
    (row,) = trl_rows([{"prompt": prompt, "chosen": " 3+4=7. Here is my response: 7",
                        "rejected": " no. Here is my response: 8"}])
    assert row["prompt"] == [prompt[0]]
    assert row["chosen"] == [{"role": "assistant", "content": "Here is my thought process: 3+4=7. Here is my response: 7"}]
    assert row["rejected"][0]["content"].startswith("Here is my thought process: no.")


def test_direct_prompt_whole_completion_is_the_response():
    d = DirectPrompt(DirectPromptConfig(template="Q: {instruction}\nA:"))
    assert d.build("3+4") == "Q: 3+4\nA:"
    assert d.parse(" 7 ").response == "7" and not d.parse("  ").ok


def test_template_without_markers_is_rejected_naming_the_field():
    with pytest.raises(ValueError, match=r"thinking.prompt.template is missing \{response_marker\}"):
        ThoughtPromptConfig(kind="custom", template="{instruction} think after {thought_marker}")


def test_k_below_two_is_rejected():
    with pytest.raises(ValueError, match=r"sample.k=1 must be >= 2"):
        SampleConfig(k=1)
    with pytest.raises(ConfigError, match="sample.k"):
        load_config(None, TpoConfig, ["sample.k=1"])


def test_divergence_windows_with_chat_prompts_are_refused_before_anything_runs():
    """The window's common prefix is appended to the prompt text, which a chat prompt does not have:
    refused when the config loads (it used to fail at the first DPO round, after sampling)."""
    with pytest.raises(ConfigError, match=r"pairs.divergence_words=1 needs plain-text prompts, but prompt.style"):
        load_config("configs/tpo-demo.yaml", TpoConfig, ["pairs.divergence_words=1", "prompt.style=chat"])
    with pytest.raises(ConfigError, match=r"direct_prompt.style is 'chat'"):
        load_config("configs/tpo-demo.yaml", TpoConfig, ["pairs.divergence_words=1", "direct_prompt.style=chat"])
    load_config("configs/tpo-demo.yaml", TpoConfig, ["pairs.divergence_words=1"])


def test_demo_config_loads():
    cfg = load_config("configs/tpo-demo.yaml", TpoConfig, [])
    assert cfg.prompt.thought_marker == "Work:" and cfg.measure.seeds == (0, 1, 2)
    load_config("configs/tpo-qwen.yaml", TpoConfig, [])


# -- the demo seed's corpus ------------------------------------------------------------------------
STEP = re.compile(r"(-?\d+)([+-])(\d+)=(-?\d+)\.")  # after a slip a chain may go below zero


def steps_of(text: str) -> list[tuple[int, str, int, int]]:
    return [(int(a), op, int(b), int(r)) for a, op, b, r in STEP.findall(text)]


def right(a: int, op: str, b: int) -> int:
    return a + b if op == "+" else a - b


def test_rough_habit_marks_itself_slips_and_carries_its_slips_to_the_response():
    rows = seed_corpus(3000, 0, thought_share=1.0, corrupt_share=0.0, habit_share=1.0, slip=0.4)
    slipped = total = 0
    for r in rows:
        work, _, answer = r["completion"].partition(" So: ")
        assert work.startswith(" Rough: ")
        st = steps_of(work)
        for (a, op, b, res), nxt in zip(st, st[1:] + [None], strict=True):
            total += 1
            slipped += res != right(a, op, b)
            assert nxt is None or nxt[0] == res  # the next step starts from the written value, slipped or not
        assert answer == str(st[-1][3])  # the response follows the working
    assert 0.35 < slipped / total < 0.45


def test_careful_working_is_right_and_carried_slips_live_only_in_the_prompt():
    rows = seed_corpus(3000, 0, thought_share=1.0, corrupt_share=0.0, repair_share=0.5)
    carried = 0
    for r in rows:
        work, _, answer = r["completion"].partition(" So: ")
        given = steps_of(r["prompt"].rpartition("Work:")[2])
        st = steps_of(work)
        assert all(res == right(a, op, b) for a, op, b, res in st)  # never a slip in what is trained
        if given:  # a carried-slip row: one wrong step in the prompt, the completion works from its value
            carried += 1
            assert sum(res != right(a, op, b) for a, op, b, res in given) == 1
            assert st[0][0] == given[-1][3]
        assert answer == str(st[-1][3])
    assert 0.2 < carried / len(rows) < 0.5  # half of the rows with two or more steps


def test_unknown_habit_is_refused():
    with pytest.raises(ValueError, match="habit_kind"):
        seed_corpus(10, 0, habit_share=0.5, habit_kind="doodle")


# -- pairs and length control --------------------------------------------------------------------
def S(score, response="x", parsed=True, completion=None):
    return Sample(completion=completion or f"T {response}", thought="T", response=response, parsed=parsed,
                  score=score if parsed else None)


def test_ties_give_no_pair():
    groups = [Group("a", "p", [S(1.0), S(1.0), S(1.0)]), Group("b", "p", [S(1.0, "y"), S(0.0, "n")])]
    pairs, counts = build_pairs(groups, 0.0, PairsConfig())
    assert [p["instruction_id"] for p in pairs] == ["b"] and counts["ties"] == 1
    assert pick(groups[0], 0.3, PairsConfig()) is None


def test_rho_is_the_smallest_that_makes_chosen_not_longer():
    # Long responses score a little higher: with rho=0 chosen is longer on average; length control
    # must pick the smallest grid value where chosen responses are not longer than rejected ones.
    groups = []
    for g in range(6):
        groups.append(Group(f"g{g}", "p", [S(1.0, "x" * 40), S(0.9, "x" * 5), S(0.2, "x" * 10), S(0.0, "x" * 30)]))
    cfg = PairsConfig(rho_steps=11)
    rho = choose_rho(groups, cfg)

    def chosen_not_longer(r):
        picks = [pick(g, r, cfg) for g in groups]
        return sum(len(c.response) for c, _ in picks) <= sum(len(r_.response) for _, r_ in picks)

    assert 0 < rho <= 0.5 and chosen_not_longer(rho)
    smaller = [r for r in (i * 0.05 for i in range(11)) if r < rho - 1e-9]
    assert smaller and not any(chosen_not_longer(r) for r in smaller)


def test_rho_is_zero_when_chosen_already_shorter():
    groups = [Group("a", "p", [S(1.0, "xx"), S(0.0, "x" * 20)])]
    assert choose_rho(groups, PairsConfig()) == 0.0


def test_unparsable_outputs_are_capped_rejected():
    groups = [Group(f"g{i}", "p", [S(1.0, "good"), S(0.0, "bad"), S(None, parsed=False, completion="garbage")])
              for i in range(20)]
    pairs, counts = build_pairs(groups, 0.0, PairsConfig(unparsable_share=0.1))
    unp = [p for p in pairs if p["kind"] == "unparsable"]
    assert counts["unparsable_candidates"] == 20
    assert len(unp) == 2 and len(unp) / len(pairs) <= 0.1
    assert all(p["rejected"] == "garbage" and p["chosen"] == "T good" for p in unp)
    none, _ = build_pairs(groups, 0.0, PairsConfig(unparsable_share=0.0))
    assert all(p["kind"] == "scored" for p in none)


def test_pairs_keep_the_thought_in_chosen_and_rejected():
    groups = [Group("a", "PROMPT", [S(1.0, "7", completion=" 3+4=7. So: 7"), S(0.0, "8", completion=" 3+4=8. So: 8")])]
    (p,), _ = build_pairs(groups, 0.0, PairsConfig())
    assert p["prompt"] == "PROMPT" and p["chosen"] == " 3+4=7. So: 7" and p["rejected"] == " 3+4=8. So: 8"


# -- the loop with a stub sampler ---------------------------------------------------------------------
SECRET = "ZQXSECRETTHOUGHT"


class StubSampler:
    """Answers arithmetic: right on even sample index, wrong on odd; thoughts carry a sentinel.

    `fail_after` raises after that many generate calls (a job killed mid-sampling).
    """

    def __init__(self, fail_after: int | None = None):
        self.version, self.calls, self.prompts, self.fail_after = None, 0, [], fail_after
        self.switched: list[tuple[str, object]] = []  # (version, the weights it was handed)

    async def switch(self, version, weights=None):
        self.version = version.version
        self.switched.append((version.version, weights))
        return Switch(version.version, "disk" if weights is None else "memory", 0.0)

    async def generate(self, prompts, params: SamplingParams):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise RuntimeError("killed")
        self.calls += 1
        self.prompts += list(prompts)
        out = []
        for p in prompts:
            expr = re.search(r"Q: (\S+)", p).group(1)
            value = eval(expr)  # the stub's own arithmetic instructions, not model output
            row = []
            for k in range(params.n):
                v = value if k % 2 == 0 else value + 1 + k
                text = f" {SECRET} {expr}={v}. So: {v}" if p.endswith("Work:") else f" {v}"
                if p.endswith("Work:") and params.n > 1 and k == params.n - 1:
                    text = " no markers at all"
                row.append(Completion(text, "stop", 1, 1, self.version))
            out.append(row)
        return out


class RecordingJudge:
    name = "recording"

    def __init__(self):
        self.seen: list[JudgeItem] = []

    async def score(self, items):
        self.seen += items
        return [Verdict.of(1.0 if i.response.strip() == i.reference else 0.0) for i in items]


def tiny_cfg(experiment: str, iterations: int = 1) -> TpoConfig:
    return load_config("configs/tpo-demo.yaml", TpoConfig, [
        f"experiment={experiment}", f"iterations={iterations}", "sample.instructions=6", "sample.k=4",
        "sample.batch_instructions=2", "measure.heldout=4", "measure.seeds=[0,1]"])


def make_loop(cfg, store, sampler, judge, trained):
    async def train(rows, start, arm, iteration):
        trained.append((arm, iteration, len(rows)))
        return f"/ckpt/{arm}-{iteration + 1}", {"loss": 0.0}, None

    return TpoLoop(cfg, state=TpoState(store.client, cfg.experiment), models=store.models(cfg.experiment),
                   sampler=sampler, judge=judge, train=train, seed_checkpoint="/ckpt/seed", progress=False)


def test_loop_runs_both_arms_and_the_judge_never_sees_a_thought(store, experiment_name):
    cfg, sampler, judge, trained = tiny_cfg(experiment_name), StubSampler(), RecordingJudge(), []
    summary = asyncio.run(make_loop(cfg, store, sampler, judge, trained).run())
    assert judge.seen and all(SECRET not in i.response and SECRET not in i.instruction for i in judge.seen)
    assert any(SECRET in p for p in sampler.prompts) is False  # prompts never carry thoughts either
    assert sorted((arm, it) for arm, it, _ in trained) == [("direct", 0), ("thought", 0)]
    assert all(n >= 1 for *_, n in trained)
    it = summary["iterations"]
    assert [e["iteration"] for e in it] == [0, 1] and len(summary["baselines"]["direct"]) == 2
    e = it[1]
    assert e["model_version"] != it[0]["model_version"] and len(e["score_seeds"]) == 2
    assert e["unparsable_rate"] == 0.0 and e["pairs"] >= 1 and e["rho"] is not None
    assert 0 <= e["win_rate_vs_direct"] <= 1 and e["accuracy"] == e["score"]
    assert store.models(cfg.experiment).list()[-1].note.endswith("iteration 1")


def test_trained_weights_reach_the_first_switch_to_their_version_and_no_later_one(store, experiment_name):
    """A training's weights (an ObjectRef in the job) go to the samplers' first switch to the
    version it published, are dropped there, and the entry says how the samplers took it."""
    cfg, sampler, handed = tiny_cfg(experiment_name), StubSampler(), {}

    async def train(rows, start, arm, iteration):
        handed[arm] = object()  # stands for the weights' ObjectRef
        return f"/ckpt/{arm}-{iteration + 1}", {"loss": 0.0}, handed[arm]

    loop = TpoLoop(cfg, state=TpoState(store.client, cfg.experiment), models=store.models(cfg.experiment),
                   sampler=sampler, judge=RecordingJudge(), train=train, seed_checkpoint="/ckpt/seed", progress=False)
    summary = asyncio.run(loop.run())
    versions = {m.note.split()[0]: m.version for m in store.models(cfg.experiment).list() if m.note != "seed"}
    for arm, entries in (("thought", summary["iterations"]), ("direct", summary["baselines"]["direct"])):
        switches = [w for v, w in sampler.switched if v == versions[arm]]
        assert switches[0] is handed[arm] and all(w is None for w in switches[1:])
        assert entries[1]["weight_sync"] == "memory" and entries[1]["switch_s"] == 0.0
        assert "weight_sync" not in entries[0]  # the seed was not trained by this run
    assert loop.weights == {}  # no ref outlives its switch


def test_killed_job_resumes_without_sampling_twice(store, experiment_name):
    cfg, judge = tiny_cfg(experiment_name), RecordingJudge()
    # measurement: 1 reference (direct seed) x 2 seeds + thought seed x 2 seeds = 4 calls; then thought
    # arm training sampling: 3 batches of 2 instructions. Die after the first training batch.
    first = StubSampler(fail_after=5)
    with pytest.raises(RuntimeError, match="killed"):
        asyncio.run(make_loop(cfg, store, first, judge, []).run())
    state = TpoState(store.client, cfg.experiment)
    assert len(state.get_rows("thought", "it0", "samples")) == 2
    second, trained = StubSampler(), []
    asyncio.run(make_loop(cfg, store, second, judge, trained).run())
    train_ids = {i["instruction"] for i in instructions(6, cfg.instruction_seed)}
    resampled = [p for p in second.prompts if p.endswith("Work:") and re.search(r"Q: (\S+)", p).group(1) in train_ids]
    assert len(resampled) == 4  # only the 4 instructions the killed run had not sampled
    # nothing measured twice either: the seed's measurements were stored
    seed_measure = [p for p in second.prompts if re.search(r"Q: (\S+)", p).group(1) not in train_ids]
    assert len(seed_measure) == 2 * 2 * 4  # both arms' iteration-1 models x 2 seeds x 4 held-out; not the seed's
    # a third start reuses the trained versions: no training, no sampling
    third, trained3 = StubSampler(), []
    asyncio.run(make_loop(cfg, store, third, judge, trained3).run())
    assert trained3 == [] and third.calls == 0


def test_judge_failure_is_recorded_not_dropped(store, experiment_name):
    class NanJudge(RecordingJudge):
        async def score(self, items):
            return [Verdict.of(float("nan")) if "1" in i.response else Verdict.of(0.0) for i in items]

    cfg = tiny_cfg(experiment_name)
    loop = make_loop(cfg, store, StubSampler(), NanJudge(), [])
    ins = instructions(6, cfg.instruction_seed)
    texts = asyncio.run(loop.sample("direct", 0, ins))
    groups = asyncio.run(loop.judge("direct", ("direct", "it0", "judged"), ins, texts))
    failed = [s for g in groups for s in g.samples if s.judge_error]
    assert failed and all(s.score is None and s.judge_error == "judge: nan score" for s in failed)
    assert sum(len(g.samples) for g in groups) == 6 * 4  # every sample kept


def test_restart_with_another_seed_is_refused(store, experiment_name):
    cfg = tiny_cfg(experiment_name)
    make_loop(cfg, store, StubSampler(), RecordingJudge(), []).seed_version()
    other = TpoLoop(cfg, state=TpoState(store.client, cfg.experiment), models=store.models(cfg.experiment),
                    sampler=StubSampler(), judge=RecordingJudge(), train=None, seed_checkpoint="/ckpt/other")
    with pytest.raises(ValueError, match="use a new experiment name"):
        other.seed_version()


def test_a_rerun_finds_its_seed_unpacked_elsewhere_by_its_files(store, experiment_name, tmp_path):
    """A job submitted again to a new Ray head (the old one lost) unpacks its working dir, and the
    seed in it, under another session's path: the rerun refused ('was started with seed ...') and
    the experiment could not resume. The same files under a new path are the same seed."""
    import shutil

    cfg = tiny_cfg(experiment_name)

    def loop_on(seed: Path) -> TpoLoop:
        return TpoLoop(cfg, state=TpoState(store.client, cfg.experiment), models=store.models(cfg.experiment),
                       sampler=StubSampler(), judge=RecordingJudge(), train=None, seed_checkpoint=str(seed))

    first = tmp_path / "session_1" / "models" / "seed"
    first.mkdir(parents=True)
    (first / "config.json").write_text('{"model_type": "llama"}')
    (first / "model.safetensors").write_bytes(b"weights")
    v0 = loop_on(first).seed_version()
    assert v0.files and v0.checkpoint == str(first)
    again = tmp_path / "session_2" / "models" / "seed"
    shutil.copytree(first, again)
    shutil.rmtree(first)  # the lost session's files are gone
    found = loop_on(again).seed_version()
    assert (found.version, found.checkpoint, found.files) == (v0.version, str(again), v0.files)
    assert [m.version for m in store.models(cfg.experiment).list()] == [v0.version]  # nothing published again
    (again / "model.safetensors").write_bytes(b"other weights")  # another model at the new path
    with pytest.raises(ValueError, match="use a new experiment name"):
        loop_on(again).seed_version()

def test_a_round_without_rows_fails_loudly_and_publishes_nothing(store, experiment_name):
    """With pairs.divergence_words, pairs whose windows come out equal are dropped; when none is
    left the round fails with what it counted, and never publishes the untouched start model as
    'thought iteration 1' (which the old code did, then measured it as trained)."""
    from dataclasses import replace

    cfg = tiny_cfg(experiment_name)
    cfg = replace(cfg, pairs=replace(cfg.pairs, divergence_words=2))
    trained: list = []
    loop = make_loop(cfg, store, StubSampler(), RecordingJudge(), trained)
    start = store.models(cfg.experiment).publish("/ckpt/seed", note="seed")
    pairs = [{"prompt": "Q: 1+1\nWork:", "chosen": " a b", "rejected": " a b ", "instruction_id": "i0", "kind": "scored"}]
    with pytest.raises(RuntimeError, match=r"\[thought it0\] no DPO rows: 1 pairs.*divergence_words"):
        asyncio.run(loop.train_and_publish("thought", 0, pairs, start, {"pairs": 1}))
    assert trained == [] and [m.note for m in store.models(cfg.experiment).list()] == ["seed"]
    with pytest.raises(RuntimeError, match="no DPO rows: 0 pairs"):
        asyncio.run(loop.train_and_publish("thought", 0, [], start, {"pairs": 0, "ties": 6}))
