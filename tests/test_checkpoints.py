"""Checkpoints never collide: one directory per experiment under a shared storage_path, never
replaced once written, fsynced before the rename, hashed at publish and checked before a
sampler loads them; a killed training's scratch is cleaned when the next run starts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from evolution.config import SoarConfig
from evolution.loop import SoarLoop
from training import checkpoints
from training.checkpoints import CheckpointError, finalize_checkpoint, publish


def fake_checkpoint(path: Path, value: float) -> Path:
    """A directory validate_checkpoint accepts (no model needed to test the file handling)."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (path / "tokenizer.json").write_text("{}")
    save_file({"w": torch.full((4,), value)}, str(path / "model.safetensors"))
    return path


def weights(path: Path) -> float:
    from safetensors.torch import load_file

    return float(load_file(str(path / "model.safetensors"))["w"][0])


def test_a_finished_checkpoint_is_never_replaced(tmp_path):
    final = tmp_path / "checkpoints" / "it1"
    final.parent.mkdir()
    finalize_checkpoint(fake_checkpoint(tmp_path / ".it1.tmp-aaaaaaaa", 1.0), final)
    second = fake_checkpoint(tmp_path / ".it1.tmp-bbbbbbbb", 2.0)
    with pytest.raises(CheckpointError, match="never replaced"):  # CheckpointExists
        finalize_checkpoint(second, final)
    assert weights(final) == 1.0  # experiment A's weights are still A's
    assert (final / "ratchet_manifest.json").exists()
    assert not second.exists()  # the refused scratch copy does not linger


def test_files_are_fsynced_before_the_rename(tmp_path, monkeypatch):
    events: list[str] = []
    real_fsync, real_rename = os.fsync, os.rename
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    monkeypatch.setattr(os, "rename", lambda a, b: (events.append(f"rename {a}"), real_rename(a, b)))
    tmp = fake_checkpoint(tmp_path / ".it1.tmp-cccccccc", 1.0)
    finalize_checkpoint(tmp, tmp_path / "it1")
    renamed = events.index(f"rename {tmp}")
    synced = set(events[:renamed])
    assert {str(tmp / f) for f in ("model.safetensors", "config.json", "ratchet_manifest.json")} <= synced
    assert str(tmp) in synced  # the directory's entries too
    assert str(tmp_path) in events[renamed + 1:]  # and the rename, in the parent


def test_publish_records_file_hashes_and_a_changed_checkpoint_is_refused(store, experiment_name, tmp_path):
    from store.models import CheckpointChanged, verify_files

    final = finalize_checkpoint(fake_checkpoint(tmp_path / ".a.tmp-dddddddd", 1.0), tmp_path / "a")
    mv = publish(store, experiment_name, final, parent=None, metrics={})
    assert set(mv.files) == {"config.json", "tokenizer.json", "model.safetensors"}
    assert store.models(experiment_name).get(mv.version).files == mv.files
    verify_files(final, mv.files)
    save_file({"w": torch.full((4,), 9.0)}, str(final / "model.safetensors"))  # someone overwrote it
    with pytest.raises(CheckpointChanged, match=r"model.safetensors.*differ from the hashes recorded at publish"):
        verify_files(final, mv.files)
    with pytest.raises(CheckpointChanged):  # nor can it be published again as if nothing happened
        publish(store, experiment_name, final, parent=None, metrics={})
    base = publish(store, experiment_name, fake_checkpoint(tmp_path / "user-model", 3.0), parent=None, metrics={})
    assert "model.safetensors" in base.files  # a checkpoint without a manifest is hashed at publish


def _loop(store, tmp_path: Path, experiment: str, storage: str) -> SoarLoop:
    cfg = SoarConfig(experiment=experiment, storage_path=storage, runs_dir=str(tmp_path / "runs"))
    return SoarLoop(cfg, store=store, tasks={}, heldout={}, base=None, sampler=None, verifier=None,
                    run_dir=tmp_path / "runs" / experiment)


def test_two_experiments_on_one_storage_path_keep_their_own_checkpoints(store, tmp_path):
    shared = str(tmp_path / "shared")
    a, b = _loop(store, tmp_path, "exp-a", shared), _loop(store, tmp_path, "exp-b", shared)
    assert a.storage == tmp_path / "shared" / "exp-a" and b.storage == tmp_path / "shared" / "exp-b"
    assert _loop(store, tmp_path, "exp-c", "").storage == tmp_path / "runs" / "exp-c"


def test_a_killed_trainings_scratch_is_cleaned_when_the_loop_starts(store, tmp_path):
    ckpts = tmp_path / "shared" / "exp-a" / "checkpoints"
    work, tmp = ckpts / ".it1.work-0123abcd", ckpts / ".it1.tmp-89abcdef"
    for d in (work, tmp, ckpts / "it1", ckpts / ".keep"):
        d.mkdir(parents=True)
    other = tmp_path / "shared" / "exp-b" / "checkpoints" / ".it1.work-0123abcd"  # another experiment's
    other.mkdir(parents=True)
    _loop(store, tmp_path, "exp-a", str(tmp_path / "shared"))
    assert not work.exists() and not tmp.exists()
    assert (ckpts / "it1").exists() and (ckpts / ".keep").exists() and other.exists()


def test_an_unpublished_leftover_is_discarded_but_a_published_checkpoint_never(store, experiment_name, tmp_path):
    left = fake_checkpoint(tmp_path / "it1", 1.0)  # written by a run killed before it published
    assert checkpoints.discard_unpublished(left, store.models(experiment_name).list())
    assert not left.exists()
    kept = publish(store, experiment_name, fake_checkpoint(tmp_path / "it2", 2.0), parent=None, metrics={})
    with pytest.raises(CheckpointError, match="published as v0"):
        checkpoints.discard_unpublished(tmp_path / "it2", store.models(experiment_name).list())
    assert Path(kept.checkpoint).exists()


def test_a_rerun_finds_its_base_unpacked_under_another_path_by_its_files(store, experiment_name, tmp_path):
    """A SOAR job submitted again to a new Ray head unpacks its working dir (and a base model in it)
    under another session's path: the same files there are the same base, read from where they are
    now; the stored path is gone."""
    import shutil

    from common.config import load_config
    from evolution.loop import base_model

    root = Path(__file__).resolve().parents[1]
    first, again = tmp_path / "session_1" / "base", tmp_path / "session_2" / "base"
    shutil.copytree(root / "models" / "soar-demo-seed", first)

    def cfg(path: Path) -> SoarConfig:
        return load_config(None, SoarConfig, [f"experiment={experiment_name}", f"model.checkpoint={path}"])

    v0 = base_model(cfg(first), store, [])
    assert v0.note == "base" and v0.checkpoint == str(first)
    shutil.copytree(first, again)
    shutil.rmtree(first)
    found = base_model(cfg(again), store, [])
    assert (found.version, found.checkpoint, found.files) == (v0.version, str(again), v0.files)
    assert len(store.models(experiment_name).list()) == 1
