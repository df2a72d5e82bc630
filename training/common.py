"""What SFT and DPO jobs share: the ratchet fields on top of TRL's configs, model loading,
LoRA, threads, resuming a killed training, and writing a finished checkpoint atomically.

A training works in `.<name>.work` beside its output dir: its rows are saved there before
the first step (`dataset/`), and the trainer saves a checkpoint every `save_steps` steps
(TRL's own `save_strategy="steps"`, keeping the last `save_total_limit`). Run again with
the same output dir after a kill, it trains on the saved rows from the last checkpoint
(`trainer.train(resume_from_checkpoint=...)`). The work dir goes once the model is saved."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import resource
import shutil
import time
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
import torch
from datasets import Dataset, load_from_disk
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.integrations import TensorBoardCallback
from transformers.trainer_callback import PrinterCallback, TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from common import fmt
from common.failpoints import failpoint
from training.checkpoints import finalize_checkpoint, is_seed_model, validate_checkpoint

log = logging.getLogger(__name__)


@dataclass
class RatchetTrainFields:
    """Fields ratchet adds to TRL's SFTConfig/DPOConfig (mixed in by sft.py and dpo.py)."""

    model_path: str = field(default="", metadata={"help": "Hugging Face checkpoint dir to start from."})
    lora: bool = field(default=False, metadata={"help": "Train LoRA adapters (merged into the saved checkpoint)."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA scaling alpha."})
    lora_dropout: float = field(default=0.0, metadata={"help": "LoRA dropout."})
    lora_target_modules: str = field(default="all-linear", metadata={"help": "Modules that get adapters."})
    cpu_threads: int = field(default=0, metadata={"help": "torch threads on CPU; 0 = all cores of this process."})
    quiet: bool = field(default=False, metadata={"help": "No per-step log lines (with disable_tqdm: silent)."})
    save_adapter: bool = field(default=False, metadata={
        "help": "With lora: also save the adapter itself, unmerged (PEFT's adapter_config.json and "
                "adapter_model.safetensors), in the checkpoint's adapter/ subdir: megabytes to ship where the "
                "merged checkpoint is the whole model (training/embedded.py's adapter recipes)."})
    return_weights: bool = field(default=False, metadata={
        "help": "Also return the final state dict (LoRA merged, on the CPU) in TrainResult.weights, for samplers "
                "that take weights in memory (train_remote(weights=True) sets it)."})
    tracking_dir: str = field(default="", metadata={
        "help": "Where report_to=tensorboard writes its event files; '' = inside output_dir's scratch dir, "
                "which is removed after training (common.tracking.training_args sets it)."})
    # TRL defaults changed for ratchet (this mixin comes first in the MRO, so these win):
    bf16: bool | None = field(default=None)  # None: bf16 on GPU, fp32 on CPU (TRL's True fails on CPU)
    # small models: recompute costs more than it saves (transformers 5 renamed the field; the old
    # name stays None so its deprecation warning is not raised on every training)
    activation_checkpointing: bool = field(default=False)
    gradient_checkpointing: bool | None = field(default=None)
    report_to: Any = field(default="none")  # no trackers unless asked (a job's tracking.report_to)
    # intermediate checkpoints in the work dir, so a killed training resumes (the finished
    # model is still saved once, atomically, into output_dir)
    save_strategy: Any = field(default="steps")
    save_steps: float = field(default=50)
    save_total_limit: int | None = field(default=1)
    logging_steps: float = field(default=10)
    dataloader_pin_memory: bool = field(default=False)

    def __post_init__(self):
        if self.bf16 is None:
            self.bf16 = torch.cuda.is_available()
        super().__post_init__()  # TRL's config (this class is only used as a mixin)


@dataclass
class TrainResult:
    checkpoint: str  # a complete Hugging Face checkpoint dir (merged weights + tokenizer)
    metrics: dict[str, Any]
    # with return_weights: the checkpoint's weights as tensors (Hugging Face names), else None
    weights: dict[str, torch.Tensor] | None = field(default=None, repr=False)


def check_fields(cfg: RatchetTrainFields) -> None:
    if not cfg.model_path:
        raise ValueError("model_path is required: a Hugging Face checkpoint dir to start from")
    validate_checkpoint(cfg.model_path)
    if cfg.lora and cfg.lora_r <= 0:
        raise ValueError(f"lora_r must be positive, got {cfg.lora_r}")


def set_threads(cfg: RatchetTrainFields) -> None:
    if not torch.cuda.is_available():
        torch.set_num_threads(cfg.cpu_threads or len(os.sched_getaffinity(0)))


def load_model(path: str):
    """Load a causal LM for training: bf16 on GPU, fp32 on CPU; SDPA attention (3x eager on CPU)."""

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def lora_args(lora: bool | None, fields: Any, checkpoint: str) -> dict[str, Any]:
    """SFT/DPO job fields from a workload config's lora, lora_r, lora_alpha, lora_targets;
    `lora=None` chooses by the model the workload started from (`checkpoint`)."""
    use = (not is_seed_model(checkpoint)) if lora is None else lora
    return {"lora": use, "lora_r": fields.lora_r, "lora_alpha": fields.lora_alpha,
            "lora_target_modules": fields.lora_targets}


def lora_config(cfg: RatchetTrainFields):
    if not cfg.lora:
        return None

    return LoraConfig(
        r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
        target_modules=(cfg.lora_target_modules if cfg.lora_target_modules == "all-linear"
                        else [m.strip() for m in cfg.lora_target_modules.split(",")]),
        task_type="CAUSAL_LM",
    )


def as_dataset(data: Dataset | list[dict[str, Any]] | str, columns: tuple[str, ...]) -> Dataset:
    """A Hugging Face dataset from a Dataset, a list of rows, or a `save_to_disk` directory."""
    if isinstance(data, str | os.PathLike):
        if not Path(data).exists():
            raise FileNotFoundError(f"dataset {data} does not exist (expected a datasets.save_to_disk dir)")
        data = load_from_disk(str(data))
    elif isinstance(data, list):
        data = Dataset.from_list(data)
    missing = [c for c in columns if c not in data.column_names]
    if missing:
        raise ValueError(
            f"dataset is missing column(s) {missing}: expected TRL's format with {list(columns)}, "
            f"got {data.column_names}"
        )
    if len(data) == 0:
        raise ValueError("dataset is empty: nothing to train on")
    return data


@contextlib.contextmanager
def scratch_run(cfg):
    """The same config with output_dir moved to a scratch dir beside it, removed afterwards
    (for trainings that are not resumed: the reward model's)."""
    final = Path(cfg.output_dir)
    work = final.with_name(f".{final.name}.work-{uuid.uuid4().hex[:8]}")
    try:
        yield dataclasses.replace(cfg, output_dir=str(work), save_strategy="no")
    finally:
        shutil.rmtree(work, ignore_errors=True)


DATASET_DIR = "dataset"  # the rows a training uses, saved in its work dir before the first step


def work_dir(output_dir: str | Path) -> Path:
    """A training's work dir: stable, so a run started again after a kill finds it."""
    final = Path(output_dir)
    return final.with_name(f".{final.name}.work")


@contextlib.contextmanager
def resumable_run(cfg, data: Dataset):
    """(the config with output_dir moved to the work dir, the dataset to train on, the last
    checkpoint to resume from or None). The rows are those saved by the first attempt, so a
    resumed training sees the same data; the work dir is removed once training succeeded."""
    work = work_dir(cfg.output_dir)
    saved = work / DATASET_DIR
    if saved.is_dir():
        data = load_from_disk(str(saved))
        log.info("%s: resuming on the %d rows its first attempt saved", cfg.output_dir, len(data))
    else:
        work.mkdir(parents=True, exist_ok=True)
        tmp = work / f".{DATASET_DIR}.tmp-{uuid.uuid4().hex[:8]}"
        data.save_to_disk(str(tmp))
        os.replace(tmp, saved)  # complete or absent: a kill mid-save leaves no half dataset
    last = get_last_checkpoint(str(work)) if any(work.glob("checkpoint-*")) else None
    yield dataclasses.replace(cfg, output_dir=str(work)), data, last
    shutil.rmtree(work, ignore_errors=True)


class LogCallback(TrainerCallback):
    """The trainer's periodic numbers (loss, learning rate...) as log lines, instead of the
    PrinterCallback's prints: common.logs' format and redaction, and Ray forwards them."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs:
            # 3 significant figures, the learning rate in e-notation (round(5e-5, 4) printed 0.0)
            log.info("step %d/%d: %s", state.global_step, state.max_steps, fmt.metrics(logs))


class FailPointCallback(TrainerCallback):
    """The fault drills' place to lose a training (common/failpoints.py): just after a checkpoint
    is saved, so the training resumed elsewhere has one to resume from. A no-op outside a drill."""

    def on_save(self, args, state, control, **kwargs):
        failpoint("training_checkpoint", step=state.global_step, output_dir=args.output_dir)


def set_callbacks(trainer, cfg: RatchetTrainFields) -> None:
    """Logs instead of prints (unless quiet); TensorBoard into cfg.tracking_dir when asked.
    With disable_tqdm=False the trainer keeps TRL's own bar, which also shows the numbers."""
    trainer.remove_callback(PrinterCallback)  # present only with disable_tqdm: it print()s each log dict
    trainer.add_callback(FailPointCallback())
    if cfg.disable_tqdm and not cfg.quiet:
        trainer.add_callback(LogCallback())
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, TensorBoardCallback) and cfg.tracking_dir:
            callback.logging_dir = cfg.tracking_dir  # transformers 5 has no logging_dir argument


ADAPTER_DIR = "adapter"  # save_adapter's subdir of the saved checkpoint


def save_trained(trainer, tokenizer, output_dir: str, metrics: dict[str, Any], started: float,
                 weights: bool = False, adapter: bool = False) -> TrainResult:
    """Merge LoRA if any, save into a temp dir, then rename into place (atomic); with `weights`,
    the saved weights come back too (TrainResult.weights); with `adapter`, the unmerged LoRA
    adapter goes into the checkpoint's adapter/ subdir first."""
    final = Path(output_dir)
    tmp = final.with_name(f".{final.name}.tmp-{uuid.uuid4().hex[:8]}")
    model = trainer.model
    if adapter:
        if not hasattr(model, "merge_and_unload"):
            raise ValueError("save_adapter needs lora=True: a full fine-tuning has no adapter to save")
        model.save_pretrained(tmp / ADAPTER_DIR)
    if hasattr(model, "merge_and_unload"):  # a PeftModel: ship plain weights every engine loads
        model = model.merge_and_unload()
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    metrics = {**metrics, "wall_s": round(time.time() - started, 3)}
    (tmp / "ratchet_train_metrics.json").write_text(json.dumps(metrics, indent=2))
    final.parent.mkdir(parents=True, exist_ok=True)
    return TrainResult(str(finalize_checkpoint(tmp, final)), metrics, state_dict(model) if weights else None)


def state_dict(model) -> dict[str, torch.Tensor]:
    """The model's weights as save_pretrained writes them, on the CPU: a tied output layer is
    left out (the engines tie it again, as they do loading the checkpoint)."""
    state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    return state


def peak_memory_mb() -> float:
    """This process's peak resident memory (CPU), or the GPU's peak allocation when training on one."""
    if torch.cuda.is_available():
        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux reports KiB


def train_metrics(train_output, trainer) -> dict[str, Any]:
    logs = [h for h in trainer.state.log_history if "loss" in h]
    steps = max(1, int(trainer.state.global_step))
    runtime = train_output.metrics.get("train_runtime") or 0.0
    return {
        "s_per_step": round(runtime / steps, 3),
        "peak_memory_mb": peak_memory_mb(),
        "train_loss": round(float(train_output.training_loss), 5),
        "first_loss": logs[0]["loss"] if logs else None,
        "last_loss": logs[-1]["loss"] if logs else None,
        "steps": int(trainer.state.global_step),
        "train_runtime_s": train_output.metrics.get("train_runtime"),
        "samples_per_s": train_output.metrics.get("train_samples_per_second"),
    }


@contextlib.contextmanager
def known_library_warnings_ignored():
    """Ignore, around ratchet's own training calls only (not process-wide), the deprecation
    warnings that TRL and peft trigger inside transformers and that no setting of ours avoids:
    each would print a block in every demo's log, forwarded by Ray from the training task.
    When the library versions move on, these filters match nothing and can go."""
    with warnings.catch_warnings():
        # trl.models.utils.disable_gradient_checkpointing (DPO) and peft read the deprecated
        # alias; transformers 5.20-5.24 warns on every read
        warnings.filterwarnings("ignore", message=r".*`is_gradient_checkpointing` is deprecated",
                                category=FutureWarning)
        yield


def run_trainer(trainer_cls, cfg, data, columns: tuple[str, ...], callbacks: list | None,
                extra_metrics: dict[str, Any], prepare: Any = None) -> TrainResult:
    """The one training flow of every method: check, load, train in a scratch dir, save atomically.
    `prepare(dataset, tokenizer) -> dataset` runs on the rows once the tokenizer is loaded."""
    started = time.time()
    check_fields(cfg)
    dataset = as_dataset(data, columns)
    set_threads(cfg)
    model, tokenizer = load_model(cfg.model_path)
    if prepare is not None:
        dataset = prepare(dataset, tokenizer)
    with resumable_run(cfg, dataset) as (run_cfg, dataset, last), known_library_warnings_ignored():
        trainer = trainer_cls(
            model=model, args=run_cfg, train_dataset=dataset, processing_class=tokenizer,
            peft_config=lora_config(cfg), callbacks=callbacks,
        )
        set_callbacks(trainer, cfg)
        output = trainer.train(resume_from_checkpoint=last)
        metrics = (train_metrics(output, trainer) | {"examples": len(dataset)} | extra_metrics
                   | ({"resumed_from_step": int(Path(last).name.split("-")[-1])} if last else {})
                   | ({"lora_r": cfg.lora_r, "lora_alpha": cfg.lora_alpha} if cfg.lora else {}))
        log.info("%s: %d steps, %.3g s/step, peak memory %.0f MiB, %s", extra_metrics.get("method", "training"),
                 metrics["steps"], metrics["s_per_step"], metrics["peak_memory_mb"],
                 f"LoRA r={cfg.lora_r} alpha={cfg.lora_alpha}" if cfg.lora else "full fine-tuning")
        return save_trained(trainer, tokenizer, cfg.output_dir, metrics, started, weights=cfg.return_weights,
                            adapter=cfg.save_adapter)


def gpu_options() -> dict[str, Any]:
    """Ray task options: one GPU when the cluster has one, else CPU only."""

    return {"num_gpus": 1} if ray.cluster_resources().get("GPU", 0) >= 1 else {"num_gpus": 0}


# The share of its node's object store a state dict may take; beyond it the weights are not
# handed back (the samplers load the checkpoint) rather than have Ray spill them to disk, or
# push out what the search keeps there.
MAX_STORE_SHARE = 0.5


def train_remote(fn, cfg, data, num_cpus: float, *, weights: bool = False):
    """Submit fn(cfg, data) (train_sft, train_dpo) as a Ray task, on a GPU when the cluster has
    one. Returns the ObjectRef of its TrainResult; with `weights`, (result ref, weights ref):
    the final state dict as a second return of the task, so it goes into Ray's object store
    once and the caller passes the ref on (SamplerPool.switch) without fetching it. The weights
    are None when they would take more than MAX_STORE_SHARE of the node's object store.
    Drop the weights ref after the switch: the object store keeps them while a ref lives."""
    task = ray.remote(fn if not weights else _with_weights).options(num_cpus=num_cpus, **gpu_options(),
                                                                     **({"num_returns": 2} if weights else {}))
    if not weights:
        return task.remote(cfg, data)
    return task.remote(fn, dataclasses.replace(cfg, return_weights=True), data)


def _with_weights(fn, cfg, data) -> tuple[TrainResult, dict[str, torch.Tensor] | None]:
    result = fn(cfg, data)
    weights, result.weights = result.weights, None
    size = sum(t.numel() * t.element_size() for t in (weights or {}).values())
    store = _object_store_bytes()
    if store and size > MAX_STORE_SHARE * store:
        log.warning("%s: not handing its weights back in memory (%s MB, more than %s of this node's %s MB object "
                    "store): the samplers load the checkpoint", cfg.output_dir, fmt.num(size / 2**20),
                    MAX_STORE_SHARE, fmt.num(store / 2**20))
        weights = None
    return result, weights


def _object_store_bytes() -> float | None:
    """The object store size of the node this task runs on (None when Ray does not say)."""
    node = ray.get_runtime_context().get_node_id()
    return next((n["Resources"].get("object_store_memory") for n in ray.nodes() if n.get("NodeID") == node), None)
