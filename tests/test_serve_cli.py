"""`ratchet serve`'s command line: who may listen where without a key, where the key comes from
(never into a repr), limits, reasoning markers, and one-line errors that exit 2."""

from __future__ import annotations

import pytest
from _capture import own_lines

from ray_jobs.serve import parse
from search.serve.guard import api_key_digest


def test_cli_refuses_a_non_loopback_host_without_a_key(monkeypatch, tmp_path):
    monkeypatch.delenv("RATCHET_API_KEY", raising=False)
    monkeypatch.delenv("RATCHET_API_KEY_FILE", raising=False)
    with pytest.raises(SystemExit):
        parse(["model=models/tpo-arith-seed", "host=0.0.0.0"])
    assert parse(["model=models/tpo-arith-seed", "host=0.0.0.0", "allow_no_auth=true"])[0].api_key_sha256 is None
    assert parse(["model=models/tpo-arith-seed", "host=127.0.0.1"])[0].api_key_sha256 is None
    monkeypatch.setenv("RATCHET_API_KEY", "k1")
    assert parse(["model=models/tpo-arith-seed", "host=0.0.0.0"])[0].api_key_sha256 == api_key_digest("k1")


def test_cli_reads_the_key_from_an_owner_only_file(monkeypatch, tmp_path):
    monkeypatch.delenv("RATCHET_API_KEY", raising=False)
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    key_file.chmod(0o644)
    with pytest.raises(SystemExit):  # others could read it
        parse(["model=models/tpo-arith-seed", f"api_key_file={key_file}"])
    key_file.chmod(0o400)
    assert parse(["model=models/tpo-arith-seed", f"api_key_file={key_file}"])[0].api_key_sha256 == api_key_digest("from-file")
    monkeypatch.setenv("RATCHET_API_KEY_FILE", str(key_file))
    assert parse(["model=models/tpo-arith-seed", "host=0.0.0.0"])[0].api_key_sha256 == api_key_digest("from-file")


def test_cli_parses_limits():
    settings = parse(["model=models/tpo-arith-seed", 'limits={"max_n": 8, "max_body_bytes": 4096}'])[0]
    assert (settings.limits.max_n, settings.limits.max_body_bytes, settings.limits.max_prompts) == (8, 4096, 64)
    with pytest.raises(SystemExit):
        parse(["model=models/tpo-arith-seed", 'limits={"max_m": 8}'])


def test_cli_parses_serve_arguments(monkeypatch):
    monkeypatch.setenv("MY_KEY", "s3")
    settings, host, port = parse(["experiment=demo", "version=v2", "api_key_env=MY_KEY",
                                  "sampler.num_actors=2", "port=9001", "thought_marker=Work:", "response_marker=So:"])
    assert (settings.api_key_sha256, settings.version, settings.pool.num_actors, port) == (
        api_key_digest("s3"), "v2", 2, 9001)
    assert settings.served_name == "demo" and "s3" not in repr(settings)
    assert (settings.reasoning.thought_marker, settings.reasoning.response_marker) == ("Work:", "So:")


@pytest.mark.parametrize("argv, message", [
    (["model=models/tpo-arith-seed", "version=v1"], "version names a registry version"),
    (["model=models/tpo-arith-seed", "api_key_env=UNSET_VARIABLE_XYZ"], "api_key_env=UNSET_VARIABLE_XYZ: that "
                                                                          "environment variable is empty"),
    (["model=/no/such/ckpt"], "model='/no/such/ckpt': no such checkpoint directory"),
    (["experiment=demo", "actors=2"], "field 'actors' was renamed: use 'sampler.num_actors'"),
    (["experiment=demo", "--actors", "2"], "--actors is gone: write sampler.num_actors=N"),
    (["--model", "/ckpt"], "--model is gone: write model=PATH"),
    (["experiment=demo", "sampler.num_actor=2"], "did you mean 'sampler.num_actors'"),
])
def test_serve_config_errors_are_one_line_and_exit_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse(argv)
    err = own_lines(capsys.readouterr().err)
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("ratchet serve: error: ")
    assert message in err, err


def test_cli_parses_reasoning_markers():
    settings, _, _ = parse(["model=models/tpo-arith-seed", "thought_marker=Work:", "response_marker=So:"])
    assert settings.reasoning.thought_marker == "Work:" and settings.reasoning.response_marker == "So:"
    assert parse(["model=models/tpo-arith-seed"])[0].reasoning is None
