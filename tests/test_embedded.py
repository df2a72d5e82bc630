"""Embedded models (seed models and adapters): every shipped manifest matches its recipe; a changed
recipe is caught."""

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


def toy_adapter_recipe():
    from scaling.verifier_adapter import VerifierRecipe

    return VerifierRecipe(candidates=4)


def toy_adapter_recipe_changed():
    from dataclasses import replace

    return replace(toy_adapter_recipe(), learning_rate=1e-3)


def toy_adapter_build(recipe, out):
    """Stands in for the build's sampling and training (the tests of verifier_adapter train a real one)."""
    (out / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": recipe.base}))
    return {"train": {"steps": recipe.candidates}}


def test_an_adapter_recipe_is_checked_like_a_seed_models(tmp_path, monkeypatch):
    monkeypatch.setitem(embedded.RECIPES, "toy-lora", Recipe(adapter=f"{__name__}:toy_adapter_recipe",
                                                             build=f"{__name__}:toy_adapter_build"))
    manifest = embedded.build("toy-lora", models_dir=tmp_path)
    assert manifest["config"]["candidates"] == 4 and manifest["train"]["steps"] == 4
    assert embedded.problems("toy-lora", models_dir=tmp_path) == []
    monkeypatch.setitem(embedded.RECIPES, "toy-lora", Recipe(adapter=f"{__name__}:toy_adapter_recipe_changed",
                                                             build=f"{__name__}:toy_adapter_build"))
    [problem] = embedded.problems("toy-lora", models_dir=tmp_path)
    assert "recipe changed" in problem


def test_an_adapter_recipe_hashes_its_pinned_base_file(monkeypatch):
    """Same fields over another pinned file (a new wheel of the base) are another recipe."""
    from dataclasses import replace

    from scaling.verifier_adapter import VerifierRecipe
    from training import pretrained

    recipe = VerifierRecipe()
    before = embedded.adapter_hash(recipe)
    real = pretrained.spec
    monkeypatch.setattr(pretrained, "spec", lambda name: replace(real(name), file_sha256="0" * 64))
    assert embedded.adapter_hash(recipe) != before


def test_missing_model_says_how_to_build_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="make seeds"):
        embedded.checkpoint("nothing-here", models_dir=tmp_path)
