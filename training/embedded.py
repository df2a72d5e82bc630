"""Embedded seed models: small checkpoints shipped in models/, each with its recipe manifest.

    make seeds                                        # = python -m training.embedded build
    python -m training.embedded build NAME [NAME ...] # rebuild some of them
    python -m training.embedded check                 # every manifest against its recipe

A demo cannot spend its minutes training a seed model, so the demos' seeds are built once,
trained longer than a demo could afford, and committed. A recipe is a `module:function`
returning a `SeedConfig`; the manifest records the recipe's hash (the seed cache key: corpus
content, preset, training fields, seed), the training figures, an optional held-out
measurement and the hash of every file. `check` fails when the code's recipe no longer
matches the manifest or a file no longer matches its hash, so a shipped checkpoint never
drifts silently from the code that claims to have made it. Rebuild only when a recipe
changes: every rebuild adds megabytes to the repository's history.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from common.logs import setup_logging
from training import pretrained
from training.corpora import load_corpus, named_function
from training.seed import SeedConfig, build_seed_model, cache_key

log = logging.getLogger(__name__)

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Recipe:
    seed: str = ""  # `module:function` returning the SeedConfig (a model trained from scratch)
    evaluate: str = ""  # optional `module:function(checkpoint_path) -> dict` held-out measurement
    # or a LoRA adapter on a pretrained base: `module:function` returning its recipe (a dataclass
    # with hashable() -> dict), and `module:function(recipe, out_dir) -> dict` that builds it into
    # out_dir (adapter files and whatever it ships beside them) and returns its figures
    adapter: str = ""
    build: str = ""

    @property
    def kind(self) -> str:
        return "adapter" if self.adapter else "seed"

    @property
    def source(self) -> str:
        return self.adapter or self.seed


# name -> recipe (named by string, as corpora are: training imports no workload package);
# the workloads' configs point at models/<name>.
RECIPES: dict[str, Recipe] = {
    # SOAR demo: configs/soar-demo.yaml's model.seed, shipped so the demo does not build it
    "soar-demo-seed": Recipe(seed="evolution.seeds:demo_seed", evaluate="evolution.seeds:evaluate_demo_seed"),
    # TPO demo: configs/tpo-demo.yaml's model (direct answers, careful working and a careless 'Rough:' habit)
    "tpo-arith-seed": Recipe(seed="thinking.arith:demo_seed"),
    # scaling demo: configs/scaling-demo.yaml's model (solves, verifies and compares arithmetic word problems)
    "scaling-arith-seed": Recipe(seed="scaling.config:demo_seed"),
    # real-model scaling demo: configs/scaling-smollm-verifier.yaml's verifier, a LoRA adapter on
    # SmolLM2-135M-Instruct taught to check its own answers (built in .venv-vllm: it samples them with vLLM)
    "smollm2-verifier-lora": Recipe(adapter="scaling.verifier_adapter:smollm2_verifier",
                                    build="scaling.verifier_adapter:build_embedded"),
    # real-model SOAR: configs/soar-smollm-arc.yaml's model, a LoRA adapter on SmolLM2-135M-Instruct taught the
    # seed corpus as chat prompts (the task format and the DSL), so SOAR starts from a model that writes programs
    "smollm2-arc-lora": Recipe(adapter="evolution.arc_adapter:smollm2_arc", build="evolution.arc_adapter:build_embedded"),
}


def recipe_config(name: str) -> SeedConfig:
    if name not in RECIPES:
        raise KeyError(f"no embedded model recipe named {name!r}; known: {sorted(RECIPES)}")
    if RECIPES[name].kind != "seed":
        raise ValueError(f"models/{name} is an adapter recipe, not a seed model's")
    cfg = named_function(RECIPES[name].seed, "seed")()
    if not isinstance(cfg, SeedConfig):
        raise TypeError(f"recipe {RECIPES[name].seed!r} must return a SeedConfig, got {type(cfg).__name__}")
    return replace(cfg, cache_dir=None)


def recipe_hash(cfg: SeedConfig) -> str:
    return cache_key(cfg, load_corpus(cfg.corpus, cfg.n, cfg.seed, cfg.corpus_kwargs))


def adapter_recipe(name: str) -> Any:
    return named_function(RECIPES[name].adapter, "adapter")()


def adapter_hash(recipe: Any) -> str:
    """An adapter recipe's hash: its fields and, for a `pretrained:` base, the pinned file's hash."""
    fields = recipe.hashable()
    base = fields.get("base", "")
    if base.startswith(pretrained.PREFIX):
        fields["base_file_sha256"] = pretrained.spec(base[len(pretrained.PREFIX):]).file_sha256
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]


def current_hash(name: str) -> str:
    """What the code's recipe for models/<name> hashes to now."""
    if RECIPES[name].kind == "adapter":
        return adapter_hash(adapter_recipe(name))
    return recipe_hash(recipe_config(name))


def file_hashes(path: Path) -> dict[str, str]:  # an embedded model is a flat dir
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.iterdir()) if p.is_file() and p.name != MANIFEST}


def build(name: str, models_dir: Path = MODELS_DIR, cache_dir: str | None = None) -> dict[str, Any]:
    """Train the recipe from scratch and write models/<name> with its manifest. `cache_dir`: a seed
    cache (training.seed) where a build of exactly this recipe (same hash) may already be, e.g. from
    trying the recipe out; it is reused instead of trained again, and a missing one is built there."""
    if RECIPES[name].kind == "adapter":
        return build_adapter(name, models_dir)
    cfg = recipe_config(name)
    with tempfile.TemporaryDirectory(prefix="ratchet-seed-") as tmp:
        result = build_seed_model(replace(cfg, cache_dir=cache_dir or tmp))
        target = models_dir / name
        staging = models_dir / f".{name}.tmp"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(result.path, staging)
    manifest: dict[str, Any] = {
        "name": name,
        "recipe": RECIPES[name].seed,
        "config": {k: v for k, v in asdict(cfg).items() if k != "cache_dir"},
        "recipe_hash": result.info["key"],
        "parameters": result.info["parameters"],
        "corpus_rows": result.info["corpus_rows"],
        "build_s": result.info["build_s"],
        "train": result.info["train"],
    }
    if RECIPES[name].evaluate:
        manifest["heldout"] = named_function(RECIPES[name].evaluate, "evaluate")(str(staging))
    manifest["files"] = file_hashes(staging)
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return manifest


def build_adapter(name: str, models_dir: Path = MODELS_DIR) -> dict[str, Any]:
    """Build an adapter recipe into models/<name> (staged, then renamed into place) with its manifest."""
    recipe = adapter_recipe(name)
    target, staging = models_dir / name, models_dir / f".{name}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    started = time.time()
    info = named_function(RECIPES[name].build, "build")(recipe, staging)
    manifest: dict[str, Any] = {"name": name, "recipe": RECIPES[name].adapter, "config": recipe.hashable(),
                                "recipe_hash": adapter_hash(recipe), "build_s": round(time.time() - started, 1),
                                **info, "files": file_hashes(staging)}
    (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return manifest


def problems(name: str, models_dir: Path = MODELS_DIR) -> list[str]:
    """What is wrong with models/<name> against its recipe (empty: it matches)."""
    path = models_dir / name
    if not (path / MANIFEST).exists():
        return [f"models/{name} has no {MANIFEST}: run `make seeds`"]
    manifest = json.loads((path / MANIFEST).read_text())
    found = []
    want = current_hash(name)
    if manifest.get("recipe_hash") != want:
        found.append(f"models/{name}: recipe {RECIPES[name].source} now hashes to {want}, the manifest says "
                     f"{manifest.get('recipe_hash')}: the recipe changed; rebuild with "
                     f"`python -m training.embedded build {name}`")
    if manifest.get("files") != file_hashes(path):
        found.append(f"models/{name}: its files do not match the hashes in its manifest")
    return found


def is_embedded(path: str | Path) -> bool:
    """Whether `path` is an embedded model: a checkpoint dir with its recipe manifest."""
    return (Path(path) / MANIFEST).exists()


def verified(path: str) -> str:
    """`path` itself; when it is an embedded model (it has a manifest), after checking its files."""
    p = Path(path)
    if is_embedded(p):
        return checkpoint(p.name, p.parent)
    return path


def checkpoint(name: str, models_dir: Path = MODELS_DIR) -> str:
    """The path of an embedded model, after checking its files against its manifest."""
    path = models_dir / name
    if not (path / MANIFEST).exists():
        raise FileNotFoundError(f"embedded model models/{name} is missing: run `make seeds`")
    manifest = json.loads((path / MANIFEST).read_text())
    if manifest.get("files") != file_hashes(path):
        raise ValueError(f"models/{name}: files do not match its manifest; rebuild with `make seeds`")
    return str(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m training.embedded", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["build", "check", "list"])
    parser.add_argument("names", nargs="*", help="recipes (default: all of --kind)")
    parser.add_argument("--kind", choices=["seed", "adapter", "all"], default="all",
                        help="which recipes by default: seed models (trained from scratch) or adapters")
    parser.add_argument("--from-cache", default=None, metavar="DIR",
                        help="build: reuse a seed cache's build of the same recipe hash instead of training again")
    args = parser.parse_args(argv)
    setup_logging()
    names = args.names or sorted(n for n, r in RECIPES.items() if args.kind in ("all", r.kind))
    if args.command == "list":
        for n in names:
            print(f"{n}: {RECIPES[n].kind} {RECIPES[n].source}")
    elif args.command == "build":
        for n in names:
            m = build(n, cache_dir=args.from_cache)
            size = f"{m['parameters']:,} parameters" if "parameters" in m else f"adapter of {m.get('base')}"
            log.info("models/%s: %s, %s steps, loss %s, built in %ss%s", n, size,
                     m["train"].get("steps"), m["train"].get("last_loss"), m["build_s"],
                     f", held-out {m['heldout']}" if "heldout" in m else "")
    else:
        bad = [p for n in names for p in problems(n)]
        for p in bad:
            log.error("%s", p)
        if bad:
            raise SystemExit(1)
        print(f"{len(names)} embedded models match their recipes")


if __name__ == "__main__":
    main()
