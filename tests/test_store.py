"""The Redis store against a real redis-server: registries, archive, cache, durability."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from store import Store, StoreUnavailable, code_hash, connect
from store.connection import ENV_URL
from store.server import ensure_local_server, stop_local_server


def test_code_hash_ignores_comments_and_formatting():
    a = "def transform(g):\n    # flip\n    return g[::-1]\n"
    b = "def transform(g):  \n\n    return g[::-1]"
    assert code_hash(a) == code_hash(b)
    assert code_hash(a) != code_hash("def transform(g):\n    return g[::1]\n")
    assert code_hash("def broken(:\n  x") == code_hash("def broken(:\n  x   \n")


def test_experiment_registry_create_get_list_status(store: Store, experiment_name: str):
    reg = store.experiments
    exp = reg.create(experiment_name, "soar", {"lr": 0.1})
    assert reg.get(experiment_name).config == {"lr": 0.1}
    with pytest.raises(ValueError, match="already exists"):
        reg.create(experiment_name, "soar", {})
    assert reg.create(experiment_name, "soar", {}, exist_ok=True).created == exp.created
    with pytest.raises(ValueError, match="is a 'soar' experiment"):
        reg.create(experiment_name, "tpo", {}, exist_ok=True)
    reg.set_status(experiment_name, "running")  # no driver declared: taken as written
    assert reg.get(experiment_name).status == "running"
    lease = store.leases(experiment_name).acquire()  # a driver's "running" is believed while it holds the lease
    reg.set_status(experiment_name, "running", host="h", pid=1234, started=1.0)
    assert reg.get(experiment_name).status == "running"
    lease.release()
    assert reg.get(experiment_name).status == "killed"
    with pytest.raises(ValueError, match="status"):
        reg.set_status(experiment_name, "exploded")
    assert [e.name for e in reg.list()] == [experiment_name]
    with pytest.raises(KeyError, match="no experiment named"):
        reg.get("missing")
    with pytest.raises(ValueError, match="invalid"):
        reg.create("bad name with spaces", "soar", {})


def test_model_registry_versions_lineage_and_current(store: Store, experiment_name: str):
    models = store.models(experiment_name)
    assert models.current() is None
    v0 = models.publish("/ckpt/seed", metrics={"loss": 1.0})
    v1 = models.publish("/ckpt/it1", parent=v0.version, metrics={"loss": 0.5})
    assert (v0.version, v1.version) == ("v0", "v1")
    assert models.current().version == "v1"
    assert models.get("v1").parent == "v0" and models.get("v1").metrics == {"loss": 0.5}
    models.set_current("v0")
    assert models.current().checkpoint == "/ckpt/seed"
    with pytest.raises(KeyError, match="parent version 'v9'"):
        models.publish("/ckpt/x", parent="v9")
    assert [m.version for m in models.list()] == ["v0", "v1"]
    # no half-registered version was left by the failed publish
    assert len(models.list()) == 2


def test_a_publish_that_fails_before_its_transaction_burns_no_version(store: Store, experiment_name: str,
                                                                     monkeypatch):
    """Redis killed mid-publish: the retry publishes the same "vN", and no number is skipped
    (the counter was once incremented outside the transaction)."""
    from _breakers import fail_first_transaction

    models = store.models(experiment_name)
    models.publish("/ckpt/seed")
    calls = fail_first_transaction(monkeypatch)
    with pytest.raises(redis.ConnectionError):
        models.publish("/ckpt/it1", parent="v0", note="iteration 1")
    assert calls and [m.version for m in models.list()] == ["v0"]
    assert models.publish("/ckpt/it1", parent="v0", note="iteration 1").version == "v1"  # the retry
    assert models.publish("/ckpt/it2", parent="v1").version == "v2"
    assert [m.version for m in models.list()] == ["v0", "v1", "v2"]


def test_a_publish_whose_exec_reply_is_lost_is_published_once(store: Store, experiment_name: str, monkeypatch):
    """The connection dies after Redis applied the transaction: publish tries again, finds
    its own entry and returns it instead of registering the checkpoint a second time."""
    from _breakers import fail_first_transaction

    models = store.models(experiment_name)
    models.publish("/ckpt/seed")
    calls = fail_first_transaction(monkeypatch, after_exec=True)
    assert models.publish("/ckpt/it1", parent="v0", note="iteration 1").version == "v1"
    assert len(calls) == 1  # found, not written again
    assert [(m.version, m.checkpoint) for m in models.list()] == [("v0", "/ckpt/seed"), ("v1", "/ckpt/it1")]
    assert models.current().version == "v1" and models.publish("/ckpt/it2").version == "v2"


def test_event_stream_is_ordered_and_capped(store: Store, experiment_name: str):
    from store.events import EventLog

    log = EventLog(store.client, experiment_name, maxlen=100)
    for i in range(1000):
        log.emit("step", i=i)
    events = log.read()
    assert [e["i"] for e in events] == sorted(e["i"] for e in events)
    assert events[-1]["i"] == 999 and len(log) < 1000  # approximate trimming keeps ~maxlen
    later = log.read(after=events[-2]["id"])
    assert [e["i"] for e in later] == [999]


def test_archive_dedups_by_normalized_code_and_stores_code_once(store: Store, experiment_name: str):
    archive = store.archive(experiment_name)
    prog = "def transform(g):\n    return g\n"
    same = "def transform(g):\n    return g  # identity\n"
    other = "def transform(g):\n    return g[::-1]\n"
    new = archive.add_many([
        {"task_id": "t1", "code": prog, "model_version": "v0"},
        {"task_id": "t1", "code": same, "model_version": "v0"},
        {"task_id": "t1", "code": other, "model_version": "v0", "kind": "refine"},
        {"task_id": "t2", "code": prog, "model_version": "v1"},
    ], counters={"refined:t1:abc": 1}, marks={"it1:t1": {"h1": 4}})
    assert new == [True, False, True, True]
    assert archive.count("t1") == 2 and archive.samples("t1") == 3
    assert archive.samples("t1", "sample") == 2 and archive.samples("t1", "refine") == 1
    assert archive.counters(["refined:t1:abc", "never"]) == [1, 0]
    archive.add_many([], marks={"it1:t1": {"h1": 9, "h2": 5}})  # first value wins
    assert archive.marks("it1:t1") == {"h1": 4, "h2": 5}
    assert archive.counts() == {"t1": {"distinct": 2, "samples": 3}, "t2": {"distinct": 1, "samples": 1}}
    t2 = archive.get_task("t2")
    assert t2[0]["code"] == prog and t2[0]["model_version"] == "v1"
    assert store.client.hlen(f"ratchet:x:{experiment_name}:code") == 2  # code stored once per hash
    with pytest.raises(ValueError, match="task_id"):
        archive.add_many([{"code": prog}])


def test_exec_cache_roundtrip_many_tasks(store: Store):
    cache = store.exec_cache
    items = [(f"task{i % 3}", f"hash{i}") for i in range(10)]
    assert cache.get_many(items) == [None] * 10
    cache.set_many([(fp, h, {"ok": True, "n": i}) for i, (fp, h) in enumerate(items[:6])])
    got = cache.get_many(items)
    assert [g and g["n"] for g in got] == [0, 1, 2, 3, 4, 5, None, None, None, None]
    assert (cache.hits, cache.misses) == (6, 14)


def test_unreachable_url_fails_with_clear_error_without_leaking_the_password():
    with pytest.raises(StoreUnavailable, match=r"cannot reach Redis at redis://:\*\*\*@127\.0\.0\.1:1/0") as err:
        connect("redis://:secret@127.0.0.1:1/0")
    assert "secret" not in str(err.value)


def test_server_that_never_answers_is_an_error_not_a_hang():
    """A socket that accepts connections but never replies: the probe's timeout fires."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes handshakes; nobody ever reads or writes
        with pytest.raises(StoreUnavailable, match="cannot reach Redis"):
            connect(f"redis://127.0.0.1:{silent.getsockname()[1]}/0")


def test_malformed_url_is_reported():
    with pytest.raises(StoreUnavailable, match="not a Redis URL"):
        connect("http://example/0")


def test_wrong_password_is_reported(redis_server):
    with pytest.raises(StoreUnavailable, match="refused the credentials|cannot reach"):
        connect(f"unix://:wrong@{redis_server.socket}?db=0")


def test_local_server_is_private_and_reused(tmp_path):
    """A Unix socket in a 0700 directory and no TCP port: no other local process can take
    its port (and receive the password) or reach it."""
    data_dir = tmp_path / "redis"
    server = ensure_local_server(data_dir)
    try:
        for f in ("server.json", "redis.conf", "password"):
            assert stat.S_IMODE(os.stat(data_dir / f).st_mode) == 0o600, f
        assert stat.S_IMODE(os.stat(Path(server.socket).parent).st_mode) == 0o700
        assert connect(server.url).config_get("port") == {"port": "0"}
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(unix_socket_path=server.socket, retry=None).ping()
        again = ensure_local_server(data_dir)
        assert (again.socket, again.pid) == (server.socket, server.pid)  # reused, not restarted
    finally:
        stop_local_server(data_dir)


def _cwd(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:  # gone, or not ours to read
        return None


def test_a_second_redis_server_never_starts_on_the_same_files(tmp_path):
    """The running server holds a lock on its data dir: a process that cannot find (or
    reach) it through the state file waits for it rather than starting another on its AOF."""
    data_dir = tmp_path / "redis"
    server = ensure_local_server(data_dir)
    try:
        (data_dir / "server.json").unlink()  # lost, as after a crash of the process that wrote it
        again = ensure_local_server(data_dir)
        assert again.pid == server.pid
        servers = subprocess.run(["pgrep", "-x", "redis-server"], capture_output=True, text=True).stdout.split()
        assert [p for p in servers if _cwd(p) == str(data_dir.resolve())] == [str(server.pid)]
    finally:
        stop_local_server(data_dir)


def test_running_clients_reconnect_after_the_server_restarts(tmp_path):
    data_dir = tmp_path / "redis"
    server = ensure_local_server(data_dir)
    client = connect(server.url)
    try:
        client.set("k", "before")
        assert stop_local_server(data_dir, kill=True)
        restarted = ensure_local_server(data_dir)
        assert restarted.pid != server.pid and restarted.url == server.url  # same socket, same password
        assert client.get("k") == b"before"  # the running client reconnected by itself
    finally:
        stop_local_server(data_dir)


def test_a_server_still_loading_its_aof_is_waited_for_not_taken_for_dead(tmp_path, monkeypatch):
    import store.server

    data_dir = tmp_path / "redis"
    server = ensure_local_server(data_dir)
    client = connect(server.url)
    client.mset({f"k{i}": os.urandom(300).hex() for i in range(40)})
    client.bgrewriteaof()  # an RDB base: loaded key by key, each delayed below
    while client.info("persistence")["aof_rewrite_in_progress"]:
        pass
    stop_local_server(data_dir)
    monkeypatch.setattr(store.server, "START_TIMEOUT_S", 0.5)  # loading lasts longer than this
    slow = ["key-load-delay 50000", "loading-process-events-interval-bytes 1024"]  # 40 keys x 50 ms
    try:
        restarted = ensure_local_server(data_dir, extra_config=slow)
        assert connect(restarted.url).dbsize() == 40
        log = (data_dir / "redis.log").read_text()
        assert log.count("Redis is starting") == 2  # one start, one restart: never a second server
    finally:
        stop_local_server(data_dir)


def test_acknowledged_writes_survive_sigkill_of_the_server(tmp_path):
    data_dir = tmp_path / "redis"
    server = ensure_local_server(data_dir)
    s = Store.connect(server.url)
    s.experiments.create("durable", "soar", {"a": 1})
    s.models("durable").publish("/ckpt/v0")
    s.archive("durable").add_many([{"task_id": "t", "code": f"x = {i}"} for i in range(500)])
    assert stop_local_server(data_dir, kill=True)  # SIGKILL: no shutdown, no final save
    restarted = ensure_local_server(data_dir)
    try:
        assert restarted.pid != server.pid
        s2 = Store.connect(restarted.url)
        assert s2.experiments.get("durable").config == {"a": 1}
        assert s2.models("durable").current().checkpoint == "/ckpt/v0"
        assert s2.archive("durable").count("t") == 500
    finally:
        stop_local_server(data_dir)


def test_store_url_prints_the_password_only_when_asked(tmp_path):
    env = os.environ | {"RATCHET_HOME": str(tmp_path), "PYTHONPATH": str(Path(__file__).parents[1])}
    env.pop(ENV_URL, None)
    try:
        password = ensure_local_server(tmp_path / "redis").password  # `url` starts none (tests/test_cli.py)
        shown = subprocess.run([sys.executable, "-m", "store", "url"], env=env, capture_output=True, text=True,
                               check=True).stdout.strip()
        full = subprocess.run([sys.executable, "-m", "store", "url", "--show-password"], env=env,
                              capture_output=True, text=True, check=True).stdout.strip()
        assert password in full and password not in shown
        assert shown == full.replace(password, "***")
    finally:
        stop_local_server(tmp_path / "redis")


def test_the_url_can_come_from_a_file_so_no_password_enters_a_job_record(redis_server, tmp_path, monkeypatch):
    from store.connection import ENV_URL_FILE

    url_file = tmp_path / "redis-url"
    url_file.write_text(redis_server.url + "\n")
    url_file.chmod(0o600)
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.setenv(ENV_URL_FILE, str(url_file))
    assert connect().ping()
    url_file.write_text("")
    with pytest.raises(StoreUnavailable, match="RATCHET_REDIS_URL_FILE.*empty"):
        connect()
    with pytest.raises(StoreUnavailable, match="RATCHET_REDIS_URL_FILE.*does not exist"):
        monkeypatch.setenv(ENV_URL_FILE, str(tmp_path / "missing"))
        connect()


def test_a_url_file_others_may_read_is_refused_as_every_secret_file_is(redis_server, tmp_path, monkeypatch):
    """The URL carries Redis's password: its file is read with common.secrets' checks, as
    `ratchet serve`'s key file is (deploy/rayjob.yaml mounts it 0400, docs/cluster.md writes it 600)."""
    from store.connection import ENV_URL_FILE

    url_file = tmp_path / "redis-url"
    url_file.write_text(redis_server.url + "\n")
    url_file.chmod(0o644)
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.setenv(ENV_URL_FILE, str(url_file))
    with pytest.raises(StoreUnavailable, match=r"RATCHET_REDIS_URL_FILE.*mode 0644.*chmod 400"):
        connect()


def test_an_experiment_recorded_before_config_hashes_refuses_another_config(store, experiment_name):
    """A record without a hash (written before run identities existed) is adopted only when its
    stored config is the new one; another config refuses, as a hashed record does."""
    from store.experiments import ConfigChanged

    old = {"search": {"samples_per_task": 64}, "iterations": 2}
    store.experiments.create(experiment_name, "soar", old)  # no config_hash: a legacy record
    with pytest.raises(ConfigChanged, match="search.samples_per_task"):
        store.experiments.create(experiment_name, "soar", {"search": {"samples_per_task": 40}, "iterations": 2},
                                 exist_ok=True, config_hash="h-new")
    assert store.experiments.get(experiment_name).config_hash == ""  # nothing adopted
    adopted = store.experiments.create(experiment_name, "soar", old, exist_ok=True, config_hash="h-old")
    assert adopted.config_hash == "h-old" and adopted.config_changes == []


def test_a_changed_config_names_only_the_fields_that_changed(store, experiment_name):
    """The stored config comes back from JSON with lists where the dataclasses hold tuples: those
    are the same config, not changes (a resumed SOAR run listed filters.refine_ignores and
    learn.hindsight.drop among its changes, and a legacy record with a tuple was never adopted)."""
    from store.experiments import ConfigChanged

    def config(micro_batch):
        return {"filters": {"refine_ignores": ()}, "learn": {"drop": ("identity", "long_line"), "micro_batch": micro_batch}}

    store.experiments.create(experiment_name, "soar", config(None), config_hash="h1")
    with pytest.raises(ConfigChanged, match=r"changed: learn\.micro_batch null -> 2\)"):
        store.experiments.create(experiment_name, "soar", config(2), exist_ok=True, config_hash="h2")
    legacy = f"{experiment_name}-legacy"
    store.experiments.create(legacy, "soar", config(None))  # no hash: adopted when its config is the same
    assert store.experiments.create(legacy, "soar", config(None), exist_ok=True, config_hash="h1").config_hash == "h1"
