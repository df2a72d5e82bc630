"""A user's own TPO judge by import path (judge.kind=module:Class), its kwargs checked against its
constructor before anything starts, and a round whose judge gave no usable verdict failing in one
line that blames the judge (issue #49)."""

from __future__ import annotations

import asyncio

import pytest
from _capture import own_lines
from test_cli import one_line_error, run_cli
from test_tpo import StubSampler, make_loop

from common.config import ConfigError, load_config
from common.faults import CannotContinue
from jobs import runner
from ray_jobs import tpo
from thinking.config import TpoConfig
from verifiers.judges import make_judge
from verifiers.judges.pairwise import PairwiseJudge

DEMO = ["--config", "configs/tpo-demo.yaml"]
TINY = ["iterations=1", "sample.instructions=4", "sample.k=4", "sample.max_tokens=32", "sample.batch_instructions=4",
        "measure.heldout=4", "measure.seeds=[0]", "train.max_steps=2", "train.batch_size=4"]


def test_the_documented_own_judge_passes_the_dry_run(capsys):
    code, out, err = run_cli(tpo, [*DEMO, "judge.kind=examples.judges:ShortCorrectJudge",
                                   "judge.kwargs.per_char=0.002", "--dry-run"], capsys)
    assert (code, own_lines(err)) == (0, "") and "nothing started (--dry-run)" in out


@pytest.mark.parametrize("args, needle", [
    (["judge.kind=vibes"], "judge.kind='vibes' is unknown; choose one of ['pairwise', 'programmatic', "
                           "'reward_model'] or name your own judge class as module:Class"),
    (["judge.kind=no_such_module:Judge"], "module 'no_such_module' does not import"),
    (["judge.kind=examples.judges:Missing"], "examples.judges has no attribute 'Missing'"),
    (["judge.kind=_judges:NotAJudge"], "is not a judge: a judge is a class with `async def score(self, items)`"),
    (["judge.kind=examples.judges:ShortCorrectJudge", "judge.kwargs.perchar=1"],
     "judge.kwargs.perchar: ShortCorrectJudge takes no argument 'perchar'; it takes ['per_char']"),
    (["judge.kind=examples.judges:ShortCorrectJudge", "judge.kwargs.per_char=lots"],
     "judge.kwargs.per_char='lots': ShortCorrectJudge takes it as float, got str"),
    # YAML reads [AB] as a list; the old job took it and failed deep inside (SamplingParams.regex=['AB'])
    (["judge.kind=pairwise", "judge.engine=openai", "judge.base_url=http://127.0.0.1:9/v1", "judge.kwargs.regex=[AB]"],
     "judge.kwargs.regex=['AB']: PairwiseJudge takes it as str | None, got list; YAML read the value as a list: "
     "quote it, judge.kwargs.regex='\"[AB]\"'"),
    (["judge.kind=pairwise", "judge.engine=openai", "judge.base_url=http://127.0.0.1:9/v1", "judge.kwargs.generate=1"],
     "judge.kwargs.generate: the job sets 'generate' itself"),
    # a causal LM as a reward model: refused only after Ray started, in a 36-line traceback, before
    (["judge.kind=reward_model", "judge.checkpoint=models/tpo-arith-seed"],
     "judge.checkpoint='models/tpo-arith-seed' is not a sequence classifier (architectures: ['LlamaForCausalLM'])"),
])
def test_a_judge_that_cannot_work_is_refused_at_the_dry_run_in_one_line(args, needle, capsys):
    code, _, err = run_cli(tpo, [*DEMO, *args, "--dry-run"], capsys)
    assert needle in one_line_error(code, err, "python -m ray_jobs.tpo")


def test_quoted_regex_is_text_and_accepted(capsys):
    code, _, err = run_cli(tpo, [*DEMO, "judge.kind=pairwise", "judge.engine=openai",
                                 "judge.base_url=http://127.0.0.1:9/v1", 'judge.kwargs.regex="[AB]"', "--dry-run"], capsys)
    assert (code, own_lines(err)) == (0, "")


def test_judge_names_and_paths_build_the_same_judge():
    assert isinstance(make_judge("verifiers.judges.pairwise:PairwiseJudge", generate=None), PairwiseJudge)
    assert type(make_judge("pairwise", generate=None)) is PairwiseJudge


def _pairwise(answer: str) -> PairwiseJudge:
    async def generate(prompts, params):
        from common.sampling import Completion

        return [[Completion(answer, "stop", 0, 1)] for _ in prompts]

    return PairwiseJudge(generate)


@pytest.mark.parametrize("answer, needle", [
    # a served judge that never writes a letter: the old message told the user to check the policy's markers
    ("I think so", r"\[thought it0\] the judge gave no usable verdict: (\d+) of \1 judged responses failed "
                   r"\(unparsable verdict: \1\)"),
    # always "A": both orders are asked, so every pair ties and nothing is preferred
    ("A", r"\[thought it0\] the judge scored every response of each instruction alike: 2 tied groups of 2"),
])
def test_a_round_without_usable_verdicts_blames_the_judge(answer, needle, store, experiment_name):
    cfg = load_config("configs/tpo-demo.yaml", TpoConfig, [
        f"experiment={experiment_name}", "iterations=1", "sample.instructions=2", "sample.k=4",
        "sample.batch_instructions=2", "measure.heldout=2", "measure.seeds=[0]"])
    loop = make_loop(cfg, store, StubSampler(), _pairwise(answer), [])
    with pytest.raises(CannotContinue, match=needle) as e:
        asyncio.run(loop.run())
    assert "markers" not in str(e.value)


def test_the_job_fails_in_one_line_when_its_judge_gives_no_verdict(ray_local, redis_server, tmp_path, experiment_name,
                                                                   capsys, monkeypatch):
    """A real TPO job with an own judge whose verdicts all fail: exit 1 and one error line, no traceback."""
    monkeypatch.setenv("RATCHET_REDIS_URL", redis_server.url)
    code, _, err = run_cli(tpo, [*DEMO, f"experiment={experiment_name}", f"runs_dir={tmp_path}", *TINY,
                                 "judge.kind=_judges:EveryVerdictFails"], capsys)
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert code == 1 and "Traceback" not in err, err[-2000:]
    assert len(errors) == 1 and "the judge gave no usable verdict: " in errors[0], errors


def test_the_documented_own_judge_trains_both_arms(ray_local, store, tmp_path, experiment_name):
    """docs/configuration.md's example, as written there, on the tiny budget."""
    cfg = load_config("configs/tpo-demo.yaml", TpoConfig, [f"experiment={experiment_name}", f"runs_dir={tmp_path}",
                                                           *TINY, "judge.kind=examples.judges:ShortCorrectJudge",
                                                           "judge.kwargs.per_char=0.002"])
    summary = runner.execute(tpo.JOB, cfg, store)
    assert summary["judge"] == "examples.judges:ShortCorrectJudge"
    notes = [m.note for m in store.models(experiment_name).list()]
    assert notes == ["seed", "thought iteration 1", "direct iteration 1"]
    scores = [s for e in summary["iterations"] for s in e["score_seeds"]]
    assert all(s < 1 for s in scores)  # the length penalty: never a whole point, right or not


# --- the registry's checks, one rule each -------------------------------------------------------
class _Scores:
    name = "scores"

    async def score(self, items):
        return []


def _judge(init) -> type:
    return type("Custom", (_Scores,), {"__init__": init})


def test_a_registered_name_builds_its_class_and_a_bad_path_is_refused(monkeypatch):
    from verifiers.judges import registry

    monkeypatch.setattr(registry, "JUDGES", dict(registry.JUDGES))
    registry.register("short", "examples.judges:ShortCorrectJudge")
    assert type(make_judge("short", per_char=0.5)).__name__ == "ShortCorrectJudge"
    with pytest.raises(ValueError, match="the path must look like module:Class"):
        registry.register("short", "examples.judges.ShortCorrectJudge")


def test_hints_written_as_types_are_checked_too():
    """A module without `from __future__ import annotations` has types, not strings, as hints."""
    from verifiers.judges.registry import check_kwargs

    def init(self, per_char=0.1):
        pass

    init.__annotations__ = {"per_char": float}
    with pytest.raises(ConfigError, match="takes it as float, got str"):
        check_kwargs(_judge(init), {"per_char": "lots"}, set())


def test_a_hint_that_does_not_resolve_leaves_the_others_checked():
    from verifiers.judges.registry import check_kwargs

    def init(self, engine: NoSuchType = None, per_char: float = 0.1):  # noqa: F821 (never resolves)
        pass

    with pytest.raises(ConfigError, match="takes it as float, got str"):
        check_kwargs(_judge(init), {"engine": 1, "per_char": "lots"}, set())


def test_a_judge_taking_any_keyword_gets_the_unknown_ones_and_the_known_ones_are_checked():
    from verifiers.judges.registry import check_kwargs

    def init(self, per_char: float = 0.1, **rest):
        pass

    check_kwargs(_judge(init), {"anything": [1], "per_char": 0.5}, set())
    with pytest.raises(ConfigError, match="takes it as float, got str"):
        check_kwargs(_judge(init), {"anything": [1], "per_char": "lots"}, set())


def test_only_a_text_parameter_given_a_list_gets_the_quoting_hint():
    from verifiers.judges.pairwise import PairwiseJudge
    from verifiers.judges.registry import check_kwargs

    def init(self, per_char: float = 0.1):
        pass

    with pytest.raises(ConfigError) as e:
        check_kwargs(_judge(init), {"per_char": [1]}, set())
    assert "takes it as float, got list" in str(e.value) and "quote" not in str(e.value)
    long = ["A" * 40, "B" * 40, "C" * 40]  # one line, however long: the message is a single line
    with pytest.raises(ConfigError) as e:
        check_kwargs(PairwiseJudge, {"regex": long}, {"generate"})
    assert str(e.value).endswith(f"""quote it, judge.kwargs.regex='"[{', '.join(long)}]"'""")
