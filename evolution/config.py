"""The SOAR workload's config, declared once: every field with its default and why.

    cfg = load_config("configs/soar-demo.yaml", SoarConfig, ["search.samples_per_task=64"])

Nothing writes into a SoarConfig after loading: the loop passes what a step needs (the
prompt style to hindsight, the experiment to the registry) as arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.placement import Strategy, check_placement
from common.tracking import TrackingConfig
from evolution.driver import SearchConfig
from evolution.filters import FilterConfig
from evolution.hindsight import HindsightConfig
from evolution.model_mix import MixConfig
from evolution.voting import VoteConfig
from search.pool_config import PoolConfig
from training.seed import SeedConfig

ARC_DSL = "evolution.dsl"  # the one module generated programs may import inside the sandbox


@dataclass
class TaskSetConfig:
    # arc1-train | arc1-eval | arc2-train | arc2-eval | a task file or directory | module:function
    # returning {task id: task} (docs/soar.md#your-own-tasks: the layouts)
    split: str = "arc1-train"
    ids: list[str] = field(default_factory=list)  # explicit task ids (empty: all that fit max_grid)
    # Held-out tasks of the same split: measured with every model and control, never searched
    # for hindsight data and kept out of the seed corpus, so gains there are generalisation.
    heldout_ids: list[str] = field(default_factory=list)
    max_grid: int | None = None  # keep tasks whose grids are at most this many cells per side
    limit: int | None = None  # first N tasks after the filters
    # Tasks searched every iteration for hindsight data only, never measured or counted as
    # solved: SOAR learns from the programs of every training task it searches, not only from
    # those it is scored on. Explicit ids, and/or the first `extra_limit` other tasks of the
    # split (id order; in neither ids nor heldout_ids; grids within max_grid, 10 when unset;
    # sampling prompt within search.max_prompt_chars), from `extra_split` (default: split).
    extra_ids: list[str] = field(default_factory=list)
    extra_limit: int = 0
    extra_split: str | None = None

    def __post_init__(self):
        if self.extra_limit < 0:
            raise ValueError(f"tasks.extra_limit={self.extra_limit} must be >= 0")


@dataclass
class ModelConfig:
    checkpoint: str = ""  # a Hugging Face checkpoint dir; empty: build the seed model below
    seed: SeedConfig = field(default_factory=lambda: SeedConfig(
        preset="tiny", corpus="evolution.seed_corpus:seed_corpus", n=20000, max_steps=1500,
        learning_rate=2e-3, max_length=2048))


@dataclass
class VerifierConfig:
    actors: int = 1  # ArcVerifierPool actors (one CPU each per worker)
    workers_per_actor: int = 1  # warm sandbox workers per actor
    use_cache: bool = True  # the store's execution cache
    request_timeout_s: float | None = 600.0  # a chunk's deadline: its actor is then replaced and the chunk retried
    scheduling_strategy: Strategy = "DEFAULT"  # SPREAD: actors over the nodes (common/placement.py, Ray's names)
    resources: dict[str, float] = field(default_factory=dict)  # custom resources per actor: pins it to nodes that have them

    def __post_init__(self):
        check_placement("verifier", self.scheduling_strategy, self.resources)


@dataclass
class LearnConfig:
    from_base: bool = True  # each iteration fine-tunes the base model on all data so far (the paper); False: the previous one
    # LoRA adapters (peft; merged into every published checkpoint) instead of full fine-tuning;
    # None: LoRA for a pretrained checkpoint, full fine-tuning for ratchet's seed models
    lora: bool | None = None
    lora_r: int = 16  # adapter rank
    lora_alpha: int = 32  # adapter scaling (alpha / r multiplies the update)
    lora_targets: str = "all-linear"  # modules that get adapters (peft's target_modules; comma-separated names work)
    max_steps: int = 200  # SFT steps per iteration
    save_steps: int = 50  # a checkpoint every N steps: a training killed (or its node lost) resumes from it
    learning_rate: float = 1e-3  # SFT learning rate
    batch_size: int = 16  # SFT rows per step
    # rows per forward pass (gradients accumulate over batch_size / micro_batch passes); None:
    # batch_size. A chat model's logits take rows x tokens x vocabulary floats several times over
    # (loss, entropy, gradients): 8 rows of ~1.5k tokens of SmolLM2 (vocab 49k) took 16 GB
    micro_batch: int | None = None
    max_length: int = 2048  # tokens per training sequence
    num_cpus: float = 1.0  # Ray CPUs reserved for the SFT task (the samplers idle meanwhile)
    # Fresh rows of model.seed's corpus mixed into every step's hindsight data (replay): a small
    # model fine-tuned on a few tasks' programs alone forgets what the seed corpus taught it.
    seed_rows: int = 0
    hindsight: HindsightConfig = field(default_factory=HindsightConfig)

    def __post_init__(self):
        if self.micro_batch is not None and (self.micro_batch < 1 or self.batch_size % self.micro_batch):
            raise ValueError(f"learn.micro_batch={self.micro_batch} must divide learn.batch_size={self.batch_size}")

    def batch_args(self) -> dict[str, int]:
        """The trainer's batch fields: batch_size rows a step, micro_batch of them a forward pass."""
        micro = self.micro_batch or self.batch_size
        return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": self.batch_size // micro}


@dataclass
class ControlsConfig:
    # Sampling seeds every measured sampler (model versions, controls) is searched with, on
    # demo and held-out tasks; the iteration's own search counts as the run of search.seed.
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    measure_models: bool = False  # every model version on every seed and split (the demo does)
    # the first iteration measured: 1 skips the seed model (a lever run or a short demo whose
    # iteration 0 is measured elsewhere; its own search still counts in the iterations table)
    measure_from: int = 0
    random_prior: bool = False  # also search with random DSL programs (no model), same budget
    seed_only: bool = False  # the seed model + the same extra SFT steps on seed-corpus rows only

    def __post_init__(self):
        if not self.seeds:
            raise ValueError("controls.seeds must name at least one sampling seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"controls.seeds {self.seeds} repeats a seed")
        if self.measure_from < 0:
            raise ValueError(f"controls.measure_from={self.measure_from} must be >= 0 (an iteration)")

    def measures(self, iteration: int) -> bool:
        """Whether iteration `iteration`'s model is measured on every seed and split."""
        return self.measure_models and iteration >= self.measure_from


@dataclass
class SoarConfig:
    experiment: str = "soar"  # Redis namespace; the same name resumes
    runs_dir: str = "runs"  # outputs go to runs_dir/experiment/
    # checkpoints and datasets go under <storage_path>/<experiment>/; every node must read it
    # (default: the run dir)
    storage_path: str = ""
    iterations: int = 1  # searches; a learning step (hindsight SFT) runs between consecutive ones
    tasks: TaskSetConfig = field(default_factory=TaskSetConfig)  # which ARC tasks are searched and held out
    model: ModelConfig = field(default_factory=ModelConfig)  # the base model (iteration 0's sampler)
    search: SearchConfig = field(default_factory=SearchConfig)  # budgets, sampling, REX (evolution/driver.py)
    sampler: PoolConfig = field(default_factory=PoolConfig)  # engine and Ray sampler actors (search/pool.py)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)  # sandbox actors and workers
    filters: FilterConfig = field(default_factory=FilterConfig)  # SOAR's filters (evolution/filters.py)
    vote: VoteConfig = field(default_factory=VoteConfig)  # the weighted majority vote (evolution/voting.py)
    learn: LearnConfig = field(default_factory=LearnConfig)  # hindsight data and SFT between searches
    controls: ControlsConfig = field(default_factory=ControlsConfig)  # what every model is measured against
    mix: MixConfig = field(default_factory=MixConfig)  # several models in one search, measured after the controls
    # programs tried per task at which the solved-vs-programs curve is read
    curve_budgets: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 6000])
    render_tasks: int = 6  # PNG renderings of this many tasks with their attempts
    tracking: TrackingConfig = field(default_factory=TrackingConfig)  # SFT's report_to; search figures go there too

    def __post_init__(self):
        if self.iterations < 1:
            raise ValueError(f"iterations={self.iterations} must be >= 1: iteration 1 is the first search "
                             "(2 adds a learning step and a second search)")
        if self.render_tasks < 0:
            raise ValueError(f"render_tasks={self.render_tasks} must be >= 0")
        if not self.curve_budgets or min(self.curve_budgets) < 1:
            raise ValueError(f"curve_budgets={self.curve_budgets} must be a non-empty list of counts >= 1")
