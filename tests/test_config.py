"""Typed YAML configs: unknown and mistyped fields are errors that name the field."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest
import yaml

from common.config import ConfigError, build_config, load_config
from common.redaction import redact_text
from training.seed import SeedConfig


@dataclass
class Inner:
    k: int = 3
    mode: Literal["a", "b"] = "a"


@dataclass
class Outer:
    name: str = "x"
    inner: Inner = field(default_factory=Inner)


def test_yaml_overrides_and_cli_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("inner:\n  k: 5\n")
    cfg = load_config(path, Outer, overrides=["inner.mode=b", "name=run1"])
    assert cfg == Outer(name="run1", inner=Inner(k=5, mode="b"))
    assert load_config(None, Outer) == Outer()


@pytest.mark.parametrize(
    "data, message",
    [
        ({"inner": {"kk": 1}}, "unknown field 'inner.kk'"),
        ({"nme": "x"}, "unknown field 'nme'"),
        ({"inner": {"k": "many"}}, "field 'inner.k'"),
        ({"inner": {"mode": "c"}}, "field 'inner.mode'"),
    ],
)
def test_bad_fields_are_named(data, message):
    with pytest.raises(ConfigError, match=message):
        build_config(Outer, data, "my.yaml")


def test_post_init_checks_surface_with_the_source():
    with pytest.raises(ConfigError, match="seed.yaml: n must be positive, got 0"):
        build_config(SeedConfig, {"n": 0}, "seed.yaml")
    with pytest.raises(ConfigError, match="seed.yaml: field 'preset'"):
        build_config(SeedConfig, {"preset": "huge"}, "seed.yaml")


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", Outer)
    bad = tmp_path / "bad.yaml"
    bad.write_text("inner: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad, Outer)
    with pytest.raises(ConfigError, match="field.sub=value"):
        load_config(None, Outer, overrides=["novalue"])


def test_secrets_are_redacted_wherever_a_config_is_written(tmp_path):
    from common.config import dump_yaml

    @dataclass
    class Sampler:
        engine_kwargs: dict = field(default_factory=dict)
        max_tokens: int = 64  # a count, not a secret

    @dataclass
    class Job:
        sampler: Sampler = field(default_factory=Sampler)
        base_url: str = ""
        hf_token: str = ""
        pad_token: str = "<pad>"  # a tokenizer's special token, not a secret

    cfg = Job(Sampler({"api_key": "sk-123456", "base_url": "http://u:pw9876@h:8000/v1"}),
              "rediss://:s3cret-pw@redis:6380/0", "hf_abcdef")
    dump_yaml(cfg, tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    for secret in ("sk-123456", "pw9876", "s3cret-pw", "hf_abcdef"):
        assert secret not in text
    data = yaml.safe_load(text)
    assert data == {"sampler": {"engine_kwargs": {"api_key": "***", "base_url": "http://u:***@h:8000/v1"},
                                "max_tokens": 64},
                    "base_url": "rediss://:***@redis:6380/0", "hf_token": "***", "pad_token": "<pad>"}
    assert cfg.sampler.engine_kwargs["api_key"] == "sk-123456"  # the running job keeps the value
    from common.redaction import redact_secrets

    assert redact_secrets({"api_key": None, "password": ""}) == {"api_key": None, "password": ""}


@pytest.mark.parametrize("text, expected", [
    ("unrecognized arguments: --sampler.engine_kwargs.api_key=sk-1 x=1",
     "unrecognized arguments: --sampler.engine_kwargs.api_key=*** x=1"),
    ("judge.kwargs={api_key: sk-1, model: m} max_tokens=4", "judge.kwargs={api_key: ***, model: m} max_tokens=4"),
    ("--api-key sk-1 --max-tokens 4 --hf.token t-1", "--api-key *** --max-tokens 4 --hf.token ***"),
    ("password='a b' pad_token=<pad> token=\"q\"", "password=*** pad_token=<pad> token=***"),
    ("base_url=http://u:pw-1@h/v1", "base_url=http://u:***@h/v1"),
])
def test_free_text_keeps_its_words_and_loses_its_secret_values(text, expected):
    assert redact_text(text) == expected
