"""TpoConfig: the one typed config of a TPO run (loaded from YAML by common.config; never written to)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from common.tracking import TrackingConfig
from search.pool_config import PoolConfig
from thinking.pairs import PairsConfig
from thinking.prompts import DirectPromptConfig, ThoughtPromptConfig
from verifiers.judges.registry import EXAMPLE, JUDGES, known_kind


@dataclass
class ModelConfig:
    checkpoint: str = "models/tpo-arith-seed"  # the seed: a Hugging Face checkpoint dir every node can read


@dataclass
class SampleConfig:
    instructions: int = 32  # fresh training instructions per iteration
    k: int = 8  # samples per instruction (paper: 8)
    temperature: float = 0.8  # paper: 0.8
    top_p: float = 0.95  # paper: 0.95
    max_tokens: int = 64  # thought + response
    batch_instructions: int = 16  # instructions per stored batch (the resumable unit)

    def __post_init__(self):
        if self.k < 2:
            raise ValueError(f"sample.k={self.k} must be >= 2: a preference pair needs two samples per instruction")
        for name in ("instructions", "max_tokens", "batch_instructions"):
            if getattr(self, name) < 1:
                raise ValueError(f"sample.{name}={getattr(self, name)} must be >= 1")


@dataclass
class JudgeConfig:
    # programmatic, reward_model, pairwise, or your own judge class as module:Class (docs/tpo.md)
    kind: str = "programmatic"
    checkpoint: str = ""  # reward_model: a sequence-classification checkpoint; pairwise+pool: the judge LLM
    # pairwise (or an own judge taking `generate`): a judge pool of its own, or an endpoint
    engine: Literal["pool", "openai"] = "pool"
    base_url: str = ""  # engine openai: the endpoint (key from $OPENAI_API_KEY, never the config)
    model: str = ""  # engine openai: the served model name ("" = the server's first)
    # the judge's own arguments, checked against its constructor's type hints (docs/tpo.md lists them)
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if not known_kind(self.kind):
            raise ValueError(f"judge.kind={self.kind!r} is unknown; choose one of {sorted(JUDGES)} or name your "
                             f"own judge class as module:Class (e.g. {EXAMPLE})")
        if self.kind == "reward_model" and not self.checkpoint:
            raise ValueError("judge.checkpoint is empty: a reward_model judge needs a sequence-classification "
                             "checkpoint dir")
        if self.kind == "pairwise" and self.engine == "pool" and not self.checkpoint:
            raise ValueError("judge.checkpoint is empty: a pairwise judge on engine 'pool' needs the judge model's "
                             "checkpoint (it runs in its own pool, never the model being trained)")
        if self.kind == "pairwise" and self.engine == "openai" and not self.base_url:
            raise ValueError("judge.base_url is empty: a pairwise judge on engine 'openai' needs the endpoint URL")


@dataclass
class TrainConfig:
    beta: float = 0.1  # DPO beta
    max_steps: int = 40  # DPO steps per iteration
    save_steps: int = 50  # a checkpoint every N steps: a training killed (or its node lost) resumes from it
    learning_rate: float = 5e-5  # DPO learning rate
    batch_size: int = 16  # pairs per step
    max_length: int = 256  # prompt + completion tokens
    # LoRA adapters (peft; merged into every published checkpoint) instead of full fine-tuning;
    # None: LoRA for a pretrained checkpoint, full fine-tuning for ratchet's seed models
    lora: bool | None = None
    lora_r: int = 16  # adapter rank
    lora_alpha: int = 32  # adapter scaling (alpha / r multiplies the update)
    lora_targets: str = "all-linear"  # modules that get adapters (peft's target_modules; comma-separated names work)
    # weight of a negative log-likelihood term on the chosen response (TRL loss_type ["sigmoid", "sft"],
    # as Iterative RPO adds); 0: plain DPO, as the paper trains
    sft_weight: float = 0.0
    num_cpus: float = 1.0  # Ray CPUs reserved for the DPO task (a GPU is used when the cluster has one)

    def __post_init__(self):
        if self.sft_weight < 0:
            raise ValueError(f"train.sft_weight={self.sft_weight} must be >= 0 (0: plain DPO)")


@dataclass
class MeasureConfig:
    heldout: int = 64  # held-out instructions (never trained on)
    seeds: tuple[int, ...] = (0, 1, 2)  # sampling seeds; figures are means with per-seed values
    temperature: float = 0.8  # sampling temperature of the measurement
    top_p: float = 0.95

    def __post_init__(self):
        if self.heldout < 1 or not self.seeds:
            raise ValueError("measure.heldout must be >= 1 and measure.seeds non-empty")


@dataclass
class TpoConfig:
    experiment: str = "tpo"  # Redis namespace; outputs go to runs_dir/experiment/
    runs_dir: str = "runs"  # where run directories are written
    storage: str = ""  # checkpoints go under <storage>/<experiment>/ (every node reads it); "" = the run dir
    iterations: int = 3  # DPO rounds (paper: 4-5)
    instructions: str = "thinking.arith:instructions"  # `module:function(n, seed) -> [{id, instruction, reference?}]`
    instruction_seed: int = 1  # iteration i draws with seed instruction_seed + i (fresh each iteration)
    heldout_seed: int = 1000  # held-out instructions' seed
    baseline: bool = True  # also run the direct-response arm, same budget (TPO is compared with it)
    model: ModelConfig = field(default_factory=ModelConfig)  # the seed model
    # the samplers' engine (vllm on GPUs), engine_kwargs and Ray actors (search/pool.py); a
    # pairwise judge's own pool uses the same engine
    sampler: PoolConfig = field(default_factory=PoolConfig)
    prompt: ThoughtPromptConfig = field(default_factory=ThoughtPromptConfig)  # thought prompt and markers
    direct_prompt: DirectPromptConfig = field(default_factory=DirectPromptConfig)  # the baseline's prompt
    sample: SampleConfig = field(default_factory=SampleConfig)  # K samples per instruction
    judge: JudgeConfig = field(default_factory=JudgeConfig)  # scores the response only
    pairs: PairsConfig = field(default_factory=PairsConfig)  # length control and unparsable cap
    train: TrainConfig = field(default_factory=TrainConfig)  # DPO per iteration
    measure: MeasureConfig = field(default_factory=MeasureConfig)  # held-out measurement
    tracking: TrackingConfig = field(default_factory=TrackingConfig)  # DPO's report_to; judge figures go there too

    # old spellings: an error names the new one (one name per setting across every job)
    renamed_fields: ClassVar[dict[str, str]] = {
        "model.engine": "sampler.engine", "model.engine_kwargs": "sampler.engine_kwargs",
        "model.num_actors": "sampler.num_actors"}

    def __post_init__(self):
        if self.iterations < 0:
            raise ValueError(f"iterations={self.iterations} must be >= 0")
        if self.heldout_seed < self.instruction_seed + self.iterations:
            raise ValueError(f"heldout_seed={self.heldout_seed} must be >= instruction_seed + iterations, so the "
                             "held-out instructions are never among the training ones")
        if self.pairs.divergence_words and "chat" in (self.prompt.style, self.direct_prompt.style):
            arm = "prompt" if self.prompt.style == "chat" else "direct_prompt"
            raise ValueError(f"pairs.divergence_words={self.pairs.divergence_words} needs plain-text prompts, but "
                             f"{arm}.style is 'chat' (the common prefix is appended to the prompt text); set "
                             f"{arm}.style=plain or pairs.divergence_words=0")
