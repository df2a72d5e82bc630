"""The scaling experiment's config, declared in one place (a comment per field).

Loaded from YAML by common.config (configs/scaling-*.yaml) with field=value overrides.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

from common.tracking import TrackingConfig
from scaling.curves import CurvesConfig
from scaling.sampling import SamplingPlan
from search.pool_config import PoolConfig
from training.seed import SeedConfig


def demo_seed() -> SeedConfig:
    """The recipe of models/scaling-arith-seed (training/embedded.py), built when model == "seed".

    600 steps at learning rate 3e-3 (the old recipe) gave pass@1 0.02 and checks that could not copy
    a step; 3000 steps at 3e-3 still 0.07. Learning rate 1e-3 with numbers as whole tokens: loss 0.12,
    pass@1 0.34 at temperature 1.0, pass@16 1.0 on 48 held-out problems."""
    return SeedConfig(preset="tiny", corpus="scaling.arith_problems:seed_corpus", n=24000, max_steps=4000,
                      max_length=288, learning_rate=1e-3, words="training.corpora:number_words")


@dataclass
class ScalingConfig:
    experiment: str = "scaling"  # Redis namespace; outputs go to runs_dir/experiment/
    runs_dir: str = "runs"
    mode: Literal["curves", "verification_benchmark", "both"] = "curves"  # what to run
    dataset: str = "arith"  # a generated set (arith_problems.DATASETS: arith, arith1, ...) or a JSONL of {question, answer}
    questions: int = 500  # first N questions of the dataset
    # who decides a candidate is correct: "" = math-verify equivalence with the reference; else a
    # `module:function` called as f(answer, reference) -> bool on each extracted final answer (a candidate
    # without one is wrong unchecked), e.g. examples.checkers:exact_text for string answers
    checker: str = ""
    arith_seed: int = 1000  # seed of generated problems (the seed corpus uses 0)
    triples: str = "arith"  # verification benchmark: "arith" or a JSONL of {question, correct, wrong}
    benchmark_triples: int = 100  # triples used by the verification benchmark
    model: str = "seed"  # "seed": build/reuse the offline seed model; else a checkpoint (or served model name)
    seed_model: SeedConfig = field(default_factory=demo_seed)  # used when model == "seed"
    # who checks: "" = the model itself (self-verification); else a checkpoint for the verdicts and
    # comparisons, or a LoRA adapter dir (models/smollm2-verifier-lora) merged into its base once
    verifier: str = ""
    # merged over sampler.engine_kwargs for the verifier's own pool, e.g. {dtype: float32}: a bf16 engine's
    # logprobs hold the verdict's P(1) to a few values (docs/real-model.md), fp32 ranks finer
    verifier_engine_kwargs: dict[str, Any] = field(default_factory=dict)
    # engine, engine_kwargs (e.g. batch_size, base_url) and Ray actors (search/pool.py)
    sampler: PoolConfig = field(default_factory=PoolConfig)
    in_process: bool = False  # one engine in this process instead of the Ray SamplerPool (tests, debugging)
    prompt_style: Literal["full", "compact"] = "full"  # "compact" is what the seed model was trained on
    # verdicts and comparisons (verifiers.verdicts): "parsed" free text; "constrained" the verdict alone
    # under a regex, with its probability; "reasoned" free text, then the constrained verdict
    verdict: Literal["parsed", "constrained", "reasoned"] = "parsed"
    # what a verdict sees of a candidate: its whole solution (the paper's) or its final answer alone
    # (verifiers.selfverify.verify_prompt; a verifier adapter is trained on one of them)
    verify_view: Literal["solution", "answer"] = "solution"
    k_inf: int = 200  # candidates per question (REFERENCES: 200)
    k_verif: int = 50  # verdicts per candidate (REFERENCES: 50)
    k_tie: int = 100  # stored pairwise comparisons per pair of answer classes (REFERENCES: 100 per matchup)
    compare_classes: int = 4  # best-verified answer classes that enter the comparisons
    temperature: float = 1.5  # candidate sampling (REFERENCES: 1.5)
    verify_temperature: float = 1.0  # verdicts and comparisons (REFERENCES: 1.0)
    max_tokens: int = 2048  # per candidate
    verify_max_tokens: int = 2048  # per verdict or comparison
    batch_questions: int = 8  # questions per stored batch (the resumable unit)
    sample_seed: int | None = 0  # sampling seed (None: fresh randomness)
    # subsampling, CIs, and Verification@k's selection options (curves.options.k_tie: replayed
    # comparisons per matchup, drawn from the stored ones)
    curves: CurvesConfig = field(default_factory=CurvesConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)  # curves and benchmark to report_to's trackers

    def __post_init__(self):
        for name in ("questions", "k_inf", "k_verif", "batch_questions", "compare_classes",
                     "max_tokens", "verify_max_tokens", "benchmark_triples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.k_tie < 0:
            raise ValueError(f"k_tie={self.k_tie} must be >= 0")
        if self.verifier_engine_kwargs and not self.verifier:
            raise ValueError("verifier_engine_kwargs is for a verifier's own pool: set verifier too (it may name "
                             "the model itself, for self-verification on an engine of its own)")
        if self.verifier_engine_kwargs:
            try:  # the sampler's checks (unknown arguments; no literal secret, which the stored plan and Ray's
                # cluster state would keep) at load, not when the verifier's actors start
                self.verifier_pool()
            except ValueError as e:
                raise ValueError(f"verifier_engine_kwargs: {e}") from e
        if self.temperature < 0 or self.verify_temperature < 0:
            raise ValueError("temperature and verify_temperature must be >= 0")
        if self.curves.options.score == "probability" and self.verdict == "parsed" and self.mode != "verification_benchmark":
            raise ValueError("curves.options.score=probability needs verdict=constrained or verdict=reasoned "
                             "(verdict=parsed stores no probabilities)")

    # old spellings: an error names the new one (one name per setting across every job)
    renamed_fields: ClassVar[dict[str, str]] = {
        "num_actors": "sampler.num_actors", "engine": "sampler.engine", "engine_kwargs": "sampler.engine_kwargs"}

    def verifier_pool(self) -> PoolConfig:
        """The verifier's own pool (ray_jobs.scaling): the sampler's, its engine_kwargs overridden."""
        return replace(self.sampler, engine_kwargs={**self.sampler.engine_kwargs, **self.verifier_engine_kwargs})

    def plan(self, model: str = "", verifier: str = "") -> SamplingPlan:
        """The sampling plan stored with the experiment; `model`, `verifier`: the resolved checkpoints."""
        return SamplingPlan(
            k_inf=self.k_inf, k_verif=self.k_verif, k_tie=self.k_tie, compare_classes=self.compare_classes,
            temperature=self.temperature, verify_temperature=self.verify_temperature, max_tokens=self.max_tokens,
            verify_max_tokens=self.verify_max_tokens, style=self.prompt_style, batch_questions=self.batch_questions,
            seed=self.sample_seed, model=model, verdict=self.verdict, verifier=verifier,
            verify_view=self.verify_view, verifier_engine_kwargs=dict(self.verifier_engine_kwargs),
            checker=self.checker,
        )


