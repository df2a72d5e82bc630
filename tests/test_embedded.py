"""Embedded seed models: every shipped manifest matches its recipe; a changed recipe is caught."""

from __future__ import annotations

import json

import pytest

from training import embedded
from training.embedded import Recipe


@pytest.mark.parametrize("name", sorted(embedded.RECIPES))
def test_shipped_model_matches_its_recipe(name):
    assert embedded.problems(name) == []


def toy_recipe():
    from training.seed import SeedConfig

    return SeedConfig(preset="tiny", corpus="training.corpora:digit_map", n=64, max_steps=2, batch_size=8,
                      max_length=64)


def toy_recipe_changed():
    from dataclasses import replace

    return replace(toy_recipe(), max_steps=3)


def test_manifest_catches_a_changed_recipe_and_a_changed_file(tmp_path, monkeypatch):
    monkeypatch.setitem(embedded.RECIPES, "toy", Recipe(seed=f"{__name__}:toy_recipe"))
    manifest = embedded.build("toy", models_dir=tmp_path)
    assert manifest["train"]["steps"] == 2
    assert json.loads((tmp_path / "toy" / embedded.MANIFEST).read_text())["recipe_hash"] == manifest["recipe_hash"]
    assert embedded.problems("toy", models_dir=tmp_path) == []
    assert embedded.checkpoint("toy", models_dir=tmp_path) == str(tmp_path / "toy")

    monkeypatch.setitem(embedded.RECIPES, "toy", Recipe(seed=f"{__name__}:toy_recipe_changed"))
    [problem] = embedded.problems("toy", models_dir=tmp_path)
    assert "recipe changed" in problem

    monkeypatch.setitem(embedded.RECIPES, "toy", Recipe(seed=f"{__name__}:toy_recipe"))
    (tmp_path / "toy" / "config.json").write_text("{}")
    assert any("do not match" in p for p in embedded.problems("toy", models_dir=tmp_path))
    with pytest.raises(ValueError, match="do not match"):
        embedded.checkpoint("toy", models_dir=tmp_path)


def test_missing_model_says_how_to_build_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="make seeds"):
        embedded.checkpoint("nothing-here", models_dir=tmp_path)
