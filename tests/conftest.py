"""Shared fixtures: a real private redis-server per test session and a real local Ray."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import Store
from store.connection import ENV_URL
from store.server import LocalServer, ensure_local_server, stop_local_server

pytest_plugins = ["_vllm_stand_in"]  # the vLLM stand-in's fixtures, for tests/test_vllm_*.py


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A redis-server of the test session's own (AOF, fsync always), torn down at the end.

    Its URL goes into $RATCHET_REDIS_URL so code under test (and Ray workers started
    afterwards, which inherit the environment) reach it and never the user's server.
    """
    data_dir = tmp_path_factory.mktemp("redis")
    server = ensure_local_server(data_dir)
    previous = os.environ.get(ENV_URL)
    os.environ[ENV_URL] = server.url
    yield server
    stop_local_server(data_dir)
    if previous is None:
        os.environ.pop(ENV_URL, None)
    else:
        os.environ[ENV_URL] = previous


@pytest.fixture
def store(redis_server: LocalServer) -> Store:
    s = Store.connect(redis_server.url)
    s.client.flushdb()
    return s


@pytest.fixture
def experiment_name() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def failpoints_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("failpoints")


@pytest.fixture(scope="session")
def ray_local(redis_server: LocalServer, failpoints_dir: Path) -> Iterator[None]:
    """A real local Ray (2 CPUs, no dashboard), shared by the session's Ray tests; workers set
    up their logging as a job's do (common.logs), and their output reaches this driver. Its
    processes look at the session's fail points (the `failpoints` fixture arms them)."""
    import ray

    from common.failpoints import ENV_DIR
    from common.logs import ray_runtime_env

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=True,
             runtime_env=ray_runtime_env({ENV_URL: redis_server.url, ENV_DIR: str(failpoints_dir)}))
    yield
    ray.shutdown()


@pytest.fixture
def failpoints(failpoints_dir: Path):
    """The fail points ray_local's processes look at; whatever a test left armed is disarmed
    after it, and a process it left stopped at one is released."""
    from common.failpoints import FailPoints

    points = FailPoints(failpoints_dir)
    yield points
    for armed in failpoints_dir.glob("*.armed"):
        armed.unlink(missing_ok=True)
    for fifo in failpoints_dir.glob("*.release"):
        try:
            points.release(fifo.name.removesuffix(".release"))
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def ratchet_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ratchet_home")


SOAR_TEST_TASKS = ["3c9b0459", "6150a2bd"]  # 3x3 grids: short prompts; kept out of the seed corpus


@pytest.fixture(scope="session")
def soar_model(tmp_path_factory) -> str:
    """A tiny seed model trained briefly on short seed-corpus rows (one-step DSL programs):
    enough to write parseable DSL programs, which is all these tests need."""
    from training.seed import SeedConfig, build_seed_model

    cache = Path(os.environ.get("RATCHET_TEST_MODELS") or tmp_path_factory.getbasetemp() / "soar-models")
    cfg = SeedConfig(preset="tiny", corpus="evolution.seed_corpus:seed_corpus",
                     corpus_kwargs={"max_chars": 500, "max_grid": 6, "max_steps": 1, "exclude_tasks": SOAR_TEST_TASKS},
                     n=800, max_steps=80, batch_size=8, max_length=1024, learning_rate=3e-3, cache_dir=str(cache),
                     words="evolution.seed_corpus:program_words")
    return build_seed_model(cfg, progress=False).path


@pytest.fixture(scope="session")
def untrained_model(tmp_path_factory) -> str:
    """A random-weight tiny Llama with the arithmetic corpus' tokenizer: real, fast, noisy (its free
    text almost never holds a verdict line)."""
    from scaling.arith_problems import seed_corpus
    from training.seed import SeedConfig, init_model
    from training.tokenizer import train_tokenizer

    out = tmp_path_factory.mktemp("untrained-arith")
    rows = seed_corpus(n=50)
    init_model(SeedConfig(preset="tiny"), train_tokenizer((r["prompt"] + r["completion"] for r in rows), 259), out)
    return str(out)
