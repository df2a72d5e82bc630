"""A warm start for SOAR on a real model: a LoRA adapter that teaches SmolLM2 the task format and the DSL.

    recipe = smollm2_arc()                    # the recipe of models/smollm2-arc-lora
    rows = training_rows(recipe)              # TRL conversational prompt/completion rows
    build_embedded(recipe, Path("models/x"))  # train the adapter and write it with what it saw

SmolLM2-135M-Instruct, asked for numpy programs, writes confusions (`np.dot(grid, grid).T`) and
solves nothing (docs/real-model.md); the SOAR paper starts from models that already write some
right programs. The tiny seed model gets there by learning the seed corpus (evolution/
seed_corpus.py): random DSL programs run on real ARC training inputs define tasks whose answers
are those programs. Here the pretrained model learns the same corpus, rendered as the chat
prompts SOAR sends a chat model in the compact style (`search.prompt_format: chat`, one user
message ending in `def transform(grid):`, the program body as the assistant's answer), so it
searches with the prompts it was taught on. The corpus draws its inputs only from ARC-AGI-1
training tasks outside every SOAR demo's searched and held-out tasks; the adapter lists the
tasks it drew on beside its weights, and `check_unseen` refuses an experiment that searches or
holds out any of them.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.config import load_config
from evolution.config import SoarConfig
from evolution.prompts import as_completion, as_prompt
from evolution.seed_corpus import seed_corpus, source_tasks

log = logging.getLogger(__name__)

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
# Every SOAR config whose tasks an ARC adapter must never see (searched or held out).
PROTECTED_CONFIGS = ("soar-demo.yaml", "soar-smollm.yaml", "soar-smollm-vllm.yaml", "soar-smollm-arc.yaml")
TRAINING_TASKS = "ratchet_training_tasks.json"  # beside an embedded adapter: the ARC tasks whose inputs it saw


def protected_tasks() -> list[str]:
    """The searched and held-out task ids of every config in PROTECTED_CONFIGS (those present)."""
    ids: set[str] = set()
    for name in PROTECTED_CONFIGS:
        if (CONFIGS / name).exists():
            tasks = load_config(CONFIGS / name, SoarConfig).tasks
            ids |= {*tasks.ids, *tasks.heldout_ids}
    return sorted(ids)


@dataclass(frozen=True)
class ArcAdapterRecipe:
    """Everything that makes the adapter (its hash is the embedded model's recipe hash)."""

    base: str = "pretrained:smollm2-135m-instruct"  # the model the adapter is trained on and merged into
    split: str = "arc1-train"  # the ARC split whose inputs the corpus draws on (never an evaluation split)
    exclude_tasks: tuple[str, ...] = ()  # task ids never drawn on: every demo's searched and held-out ones
    rows: int = 384  # corpus rows (each seen `epochs` times): 48 steps of 8, ~30-40 s each on 2 cores
    corpus_seed: int = 0
    max_grid: int = 10  # source tasks' largest grid side
    program_steps: int = 2  # DSL steps per program (seed_corpus max_steps)
    refine_frac: float = 0.2  # share of refinement rows (wrong parent + feedback -> right program)
    max_chars: int = 600  # prompt + completion characters (~340 SmolLM2 tokens: a digit is a token)
    chat: bool = True  # rows as chat messages, as SOAR sends a chat model (prompt_format: chat)
    lora_r: int = 16
    lora_alpha: int = 32
    lora_targets: str = "all-linear"
    learning_rate: float = 1e-3
    epochs: float = 1.0
    batch_size: int = 8
    max_length: int = 1024  # tokens; no row of max_chars comes near it
    seed: int = 0  # data order and LoRA init

    def __post_init__(self):
        if self.split not in ("arc1-train", "arc2-train"):
            raise ValueError(f"split={self.split!r}: an ARC adapter learns from a training split only "
                             "(arc1-train or arc2-train), never from the tasks it is evaluated on")

    def hashable(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def smollm2_arc() -> ArcAdapterRecipe:
    """The recipe of models/smollm2-arc-lora (configs/soar-smollm-arc.yaml's model)."""
    return ArcAdapterRecipe(exclude_tasks=tuple(protected_tasks()))


def training_tasks(recipe: ArcAdapterRecipe) -> list[str]:
    """The ids of every task whose inputs the corpus may draw on (a superset of those it drew)."""
    return sorted(t.id for t in source_tasks(recipe.split, recipe.max_grid, recipe.exclude_tasks, recipe.max_chars))


def training_rows(recipe: ArcAdapterRecipe) -> list[dict[str, Any]]:
    """The seed corpus's prompt/completion rows, as chat messages when the recipe says so."""
    rows = seed_corpus(n=recipe.rows, seed=recipe.corpus_seed, max_grid=recipe.max_grid,
                       max_steps=recipe.program_steps, refine_frac=recipe.refine_frac,
                       exclude_tasks=recipe.exclude_tasks, split=recipe.split, max_chars=recipe.max_chars)
    return [{"prompt": as_prompt(r["prompt"], recipe.chat), "completion": as_completion(r["completion"], recipe.chat)}
            for r in rows]


def check_unseen(checkpoint: str, task_ids: list[str]) -> None:
    """Refuse an experiment that searches or holds out a task the adapter's corpus drew on (its
    dir lists them): its figures would measure memory, not search."""
    listed = Path(checkpoint) / TRAINING_TASKS
    if not listed.exists():
        return
    seen = sorted(set(json.loads(listed.read_text())) & set(task_ids))
    if seen:
        raise ValueError(f"model.checkpoint {checkpoint} was trained on the inputs of {len(seen)} of this "
                         f"experiment's tasks ({', '.join(seen[:5])}); search and hold out tasks outside its "
                         f"{TRAINING_TASKS}, or use a checkpoint that never saw them")


def train_adapter(recipe: ArcAdapterRecipe, base_checkpoint: str, output_dir: str, cpu_threads: int = 0) -> Any:
    """LoRA SFT of the base on the corpus rows; returns training.common.TrainResult, whose
    checkpoint (merged) holds the adapter itself in adapter/."""
    from training.sft import SFTJobConfig, train_sft

    cfg = SFTJobConfig(
        model_path=base_checkpoint, output_dir=output_dir, lora=True, lora_r=recipe.lora_r,
        lora_alpha=recipe.lora_alpha, lora_target_modules=recipe.lora_targets, save_adapter=True,
        learning_rate=recipe.learning_rate, num_train_epochs=recipe.epochs,
        per_device_train_batch_size=recipe.batch_size, seed=recipe.seed, max_length=recipe.max_length,
        cpu_threads=cpu_threads, lr_scheduler_type="cosine", warmup_steps=0.05, save_steps=25, logging_steps=5,
        disable_tqdm=True,
    )
    return train_sft(cfg, training_rows(recipe))


def build_embedded(recipe: ArcAdapterRecipe, out: Path) -> dict[str, Any]:
    """training/embedded.py's builder: train the adapter and write into `out` its files (its base
    named as the recipe names it) and the tasks its corpus drew on."""
    from training import pretrained
    from training.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
    from training.common import ADAPTER_DIR

    base = pretrained.resolve_checkpoint(recipe.base)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="ratchet-adapter-") as tmp:
        result = train_adapter(recipe, base, str(Path(tmp) / "trained"))
        adapter = Path(result.checkpoint) / ADAPTER_DIR
        config = json.loads((adapter / ADAPTER_CONFIG).read_text())
        config["base_model_name_or_path"] = recipe.base  # portable: the base as configs name it
        (out / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        shutil.copyfile(adapter / ADAPTER_WEIGHTS, out / ADAPTER_WEIGHTS)
    tasks = training_tasks(recipe)
    (out / TRAINING_TASKS).write_text(json.dumps(tasks, indent=0) + "\n")
    log.info("ARC adapter trained in %.0f s on %d rows drawn from %d tasks", time.time() - started, recipe.rows,
             len(tasks))
    return {"base": recipe.base, "rows": recipe.rows, "source_tasks": len(tasks), "train": result.metrics}
