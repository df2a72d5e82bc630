"""Build small Llama-architecture seed models from scratch, cached by content hash.

Offline demos and tests need a model that exists without a download. A seed model is a
byte-level tokenizer + a Llama config preset + TRL SFT on a prompt/completion corpus,
saved as a Hugging Face checkpoint dir (AutoModelForCausalLM, AutoTokenizer and vLLM load it).

    python -m training.seed --preset tiny --corpus training.corpora:digit_map --n 2000
    python -m training.seed --preset small --corpus my_rows.jsonl --max-steps 2000

The cache key covers the preset, every training field, the corpus *content* and the seed,
so a changed corpus generator rebuilds and an unchanged one is reused.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from common.logs import setup_logging
from common.progress import mode as progress_mode
from common.redaction import redact_secrets
from store.codehash import content_hash
from store.server import ratchet_home
from training.checkpoints import CheckpointExists
from training.corpora import load_corpus, named_function

log = logging.getLogger(__name__)

# Wide and shallow: on CPU about 3x faster to train than deep-narrow at the same size.
PRESETS: dict[str, dict[str, int]] = {
    # ~0.3M parameters: tests, laptop demos
    "tiny": dict(hidden_size=96, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4),
    # ~4M parameters: the demos' default where learning must show
    "small": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=8),
}
SEED_INFO = "ratchet_seed.json"  # written last: its presence marks a complete cached build


@dataclass
class SeedConfig:
    preset: Literal["tiny", "small"] = "tiny"
    corpus: str = "training.corpora:digit_map"  # `module:function` or a .jsonl of rows
    corpus_kwargs: dict[str, Any] = field(default_factory=dict)  # extra arguments of the generator
    n: int = 2000  # rows drawn from the corpus
    seed: int = 0  # corpus, init and training seed
    vocab_size: int = 259  # 259 = 256 bytes + 3 specials: character level; larger adds BPE merges
    max_position_embeddings: int = 2048
    max_steps: int = 300
    learning_rate: float = 3e-3  # tiny models from scratch want a high rate
    batch_size: int = 32
    max_length: int = 1024  # training sequence cap (tokens)
    words: str = ""  # `module:function` returning strings that become whole tokens (DSL names)
    cache_dir: str | None = None  # default: $RATCHET_HOME/models

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise ValueError(f"preset {self.preset!r} is unknown; choose one of {sorted(PRESETS)}")
        for name in ("n", "max_steps", "batch_size", "max_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


@dataclass
class SeedResult:
    path: str
    cached: bool
    info: dict[str, Any]


def load_words(source: str) -> list[str]:
    """The whole-word tokens named by `module:function` ("" for none)."""
    if not source:
        return []
    words = list(named_function(source, "words")())
    if not all(isinstance(w, str) and w for w in words):
        raise ValueError(f"words {source!r} must return non-empty strings")
    return words


def cache_key(cfg: SeedConfig, rows: list[dict[str, str]]) -> str:
    spec = {k: v for k, v in asdict(cfg).items() if k not in ("cache_dir", "corpus", "words")}
    spec["architecture"] = PRESETS[cfg.preset]
    spec["corpus_content"] = content_hash(json.dumps(rows, sort_keys=True))
    if cfg.words:  # the words themselves, not where they came from
        spec["words"] = load_words(cfg.words)
    return content_hash(json.dumps(spec, sort_keys=True))


def init_model(cfg: SeedConfig, tokenizer, out_dir: Path) -> int:
    """Save a randomly initialised Llama with the tokenizer; returns the parameter count."""
    # imported here, not at the top: SeedConfig is part of every job's config, and --help needs no torch
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(cfg.seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        max_position_embeddings=cfg.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        **PRESETS[cfg.preset],
    )
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return sum(p.numel() for p in model.parameters())


def build_seed_model(cfg: SeedConfig, progress: bool = True) -> SeedResult:
    """Return the cached seed model for cfg, building it first when it is not cached."""
    # TRL and transformers: only for a build (see init_model)
    from training.sft import SFTJobConfig, train_sft
    from training.tokenizer import train_tokenizer

    rows = load_corpus(cfg.corpus, cfg.n, cfg.seed, cfg.corpus_kwargs)
    key = cache_key(cfg, rows)
    cache = Path(cfg.cache_dir or ratchet_home() / "models")
    final = cache / f"seed-{cfg.preset}-{key}"
    if (final / SEED_INFO).exists():
        return SeedResult(str(final), True, json.loads((final / SEED_INFO).read_text()))
    if final.exists():  # a build killed after its rename, before its info: unfinished, build it again
        shutil.rmtree(final)

    started = time.time()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".init-") as init_dir:
        tokenizer = train_tokenizer((r["prompt"] + r["completion"] for r in rows), cfg.vocab_size,
                                    load_words(cfg.words))
        params = init_model(cfg, tokenizer, Path(init_dir))
        sft = SFTJobConfig(
            model_path=init_dir, output_dir=str(final), max_steps=cfg.max_steps,
            learning_rate=cfg.learning_rate, per_device_train_batch_size=cfg.batch_size,
            max_length=cfg.max_length, lr_scheduler_type="cosine", warmup_steps=min(50, cfg.max_steps // 10),
            seed=cfg.seed, disable_tqdm=not progress or progress_mode() != "bars", quiet=not progress,
            logging_steps=max(1, cfg.max_steps // 10),  # without a bar (not a terminal): 10 log lines
        )
        try:
            result = train_sft(sft, rows)
        except CheckpointExists:
            if (final / SEED_INFO).exists():  # another process built the same seed meanwhile
                return SeedResult(str(final), True, json.loads((final / SEED_INFO).read_text()))
            raise
    info = {
        "config": redact_secrets(asdict(cfg)),  # a checkpoint carries its config, never a secret
        "key": key, "parameters": params, "corpus_rows": len(rows),
        "build_s": round(time.time() - started, 2), "train": result.metrics,
    }
    (final / SEED_INFO).write_text(json.dumps(info, indent=2))
    return SeedResult(str(final), False, info)


def clear_cache(cfg: SeedConfig) -> None:
    cache = Path(cfg.cache_dir or ratchet_home() / "models")
    shutil.rmtree(cache, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m training.seed", description=__doc__.split("\n\n")[0])
    defaults = SeedConfig()
    parser.add_argument("--preset", default=defaults.preset, choices=sorted(PRESETS))
    parser.add_argument("--corpus", default=defaults.corpus, help="module:function or rows.jsonl")
    parser.add_argument("--corpus-kwargs", default="{}", help="JSON object of generator arguments")
    parser.add_argument("--n", type=int, default=defaults.n, help="corpus rows")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size)
    parser.add_argument("--words", default="", help="module:function returning whole-word tokens")
    parser.add_argument("--max-steps", type=int, default=defaults.max_steps)
    parser.add_argument("--max-length", type=int, default=defaults.max_length, help="tokens per training row")
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--cache-dir", default=None, help="default: $RATCHET_HOME/models")
    args = parser.parse_args(argv)
    setup_logging()
    try:
        corpus_kwargs = json.loads(args.corpus_kwargs)
    except ValueError as e:
        parser.error(f"--corpus-kwargs is not JSON: {e}")
    cfg = SeedConfig(
        preset=args.preset, corpus=args.corpus, corpus_kwargs=corpus_kwargs, n=args.n, seed=args.seed,
        vocab_size=args.vocab_size, words=args.words, max_steps=args.max_steps, max_length=args.max_length,
        learning_rate=args.learning_rate, batch_size=args.batch_size, cache_dir=args.cache_dir,
    )
    result = build_seed_model(cfg)
    train = result.info["train"]
    log.info("%s seed model %s", "reused cached" if result.cached else "built", result.path)
    log.info("preset %s: %s parameters, %d rows, %d steps, loss %s -> %s, built in %ss", cfg.preset,
             f"{result.info['parameters']:,}", result.info["corpus_rows"], train["steps"], train["first_loss"],
             train["last_loss"], result.info["build_s"])


if __name__ == "__main__":
    main()
