"""The redis sink end to end, as real processes: `binlog-bridge load` (SQLite upstream, MariaDB in one
variant; DDL during DML, primary-key changes, unique-slot swaps, scratch tables created and dropped)
→ three pumps → a drainer whose only sink is redis → Redis. Every test ends by comparing Redis with
the upstream.

How "exactly the keys of rows that changed are gone" is derived from the upstream itself:

1. a first, short load fills the upstream; the drainer catches up past it;
2. the test snapshots every upstream table (``bridge.apps.diff``'s sources, as ``diff`` reads
   them) and writes every key each row renders to (rendered here by hand, not by the sink's code);
3. the second load runs (with the test's fault). A load's workers change only rows they inserted
   themselves (and the shared accounts), so beside it the test's own producer (the real
   ``TxnWriter`` and pump client) changes rows of the first load, in transactions of their own:
   updates, deletes, primary-key changes, slot swaps through a temporary value, and updates that
   write the values the row already has. Then the drainer catches up past a fresh timestamp;
4. a second snapshot: a row whose values differ between the snapshots (a column that exists in
   only one of them reads as NULL: the load adds and drops empty columns), or that exists in only
   one, *changed*; every key of its old and its new image must be gone. Every other written key
   must still be there, and no other key with the test's prefix may exist.

An UPDATE that writes the values a row already had is invisible to the snapshots; the sink does
not invalidate on it either (no cached key or value changed). A row changed and changed back
between the snapshots would look untouched while its keys were rightly deleted: the load's updates
draw fresh random values (balances, versions, timestamps, texts), so this does not happen in
practice, and such a key would be listed by name in the failure.

Key templates: every keyed table by its primary key (a ``/regex/`` table pattern; the keyless
load_events is skipped), load_slots also by its unique ``slot``, load_accounts also by id and the
nullable ``region`` (NULL renders as the null token). The drainer SIGKILL and the Redis outage
tests use a private redis-server each (the outage one SIGKILLs it and keeps it down for 20 s;
its append-only file, fsynced on every write, keeps the keys written before across the restart);
the others share the suite's Redis (and Redis Cluster) under a key prefix of their own.
A load with a fault is interrupted (SIGINT) once the fault is over and the load went on past it;
its ``seconds`` only bound it. Timeouts are hang guards only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from bridge.apps.demo.cluster import Cluster, ClusterSpec, resolver_for
from bridge.apps.demo.workload import LoadProcess
from bridge.apps.diff.open import open_source
from bridge.dsn import Dsn
from tests.e2e.test_pipeline import mysql_text, mysql_upstream, wait_for, wait_for_transactions
from tests.support.process import discard
from tests.support.redis_mutator import Mutator
from tests.support.redis_server import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.timeout(420)]

__all__ = ["mysql_upstream"]  # a fixture of tests/e2e/test_pipeline.py, used here

HANG_GUARD = 180.0
# the second load of the tests without a fault: long enough for a dozen DDLs and for the mutator's
# hundred-odd transactions to run beside it (about 5 s of them here)
MAIN_LOAD_SECONDS = 6
# the first load (RedisPipeline.seed): at least this long, and on until its rows give this many keys
SEED_SECONDS = 4
SEED_KEYS = 500
LOAD_FLAGS = [
    "--concurrency",
    "4",
    "--ddl-interval",
    "0.5",
    "--mix",
    "swap=15,rekey=10,large=2",
    "--large-size",
    "200",
]
Snapshot = dict[str, dict[tuple[object, ...], dict[str, object]]]  # table -> key -> row
Client = redis.Redis | RedisCluster
Fault = Callable[[Cluster, LoadProcess], None]


def redis_rules(prefix: str) -> list[dict[str, Any]]:
    return [
        {"table": "/load_.*/", "keys": [f"{prefix}:{{db}}:{{table}}:{{pk}}"]},
        {"table": "load_slots", "keys": [f"{prefix}:slot:{{slot}}"]},
        {"table": "load_accounts", "keys": [f"{prefix}:acct:{{id}}:{{region}}"]},
    ]


def rules_toml(rules: list[dict[str, Any]]) -> str:
    """``rules`` as ``[[sink.redis.rules]]`` tables."""
    out = []
    for rule in rules:
        out.append("\n[[sink.redis.rules]]")
        out += [f"{name} = {json.dumps(value)}" for name, value in rule.items()]
    return "\n".join(out) + "\n"


def row_keys(prefix: str, db: str, table: str, row: dict[str, object]) -> list[str]:
    """The keys :func:`redis_rules` render for ``row``, written out independently of the sink."""
    if "id" not in row:  # load_events: no key, no rule applies
        return []
    keys = [f"{prefix}:{db}:{table}:{row['id']}"]
    if table == "load_slots":
        keys.append(f"{prefix}:slot:{row['slot']}")
    if table == "load_accounts":
        keys.append(f"{prefix}:acct:{row['id']}:{'null' if row['region'] is None else row['region']}")
    return keys


def snapshot(upstream: str) -> tuple[str, Snapshot]:
    """Every row of every upstream table, by primary key (keyless tables are left out)."""
    source = open_source(upstream, "upstream")
    try:
        out: Snapshot = {}
        db = ""
        for db, table in source.tables():
            info = source.table_info(db, table)
            if not info.key:
                continue
            names = [column.name for column in info.columns]
            positions = [names.index(name) for name in info.key]
            out[table] = {
                tuple(values[i] for i in positions): dict(zip(names, values, strict=True))
                for values in source.rows(db, table, names)
            }
        return db, out
    finally:
        source.close()


def changed_keys(prefix: str, db: str, before: Snapshot, after: Snapshot) -> set[str]:
    """The keys of every row that changed between the snapshots (old and new images)."""
    gone: set[str] = set()
    for table in set(before) | set(after):
        old_rows, new_rows = before.get(table, {}), after.get(table, {})
        for key in set(old_rows) | set(new_rows):
            old, new = old_rows.get(key), new_rows.get(key)
            if old is not None and new is not None:
                names = set(old) | set(new)
                if all(old.get(name) == new.get(name) for name in names):
                    continue
            for image in (old, new):
                if image is not None:
                    gone.update(row_keys(prefix, db, table, image))
    return gone


class RedisPipeline:
    """The cluster, the Redis it invalidates and the keys this test wrote."""

    def __init__(
        self,
        workdir: Path,
        upstream: str,
        prefix: str,
        redis_settings: dict[str, Any],
        client: Client,
        rules: list[dict[str, Any]] | None = None,
    ) -> None:
        self.upstream = upstream
        self.prefix = prefix
        self.client = client
        sink = {"batch-interval": "20ms", **redis_settings}
        spec = ClusterSpec(workdir / "cluster", pumps=3, sinks=("redis",), resolver=resolver_for(upstream),
                           drainer_settings={"sink": {"redis": sink}, "flush-interval": "200ms"})  # fmt: skip
        self.cluster = Cluster(spec)
        self.rules = redis_rules(prefix) if rules is None else rules
        self.written: set[str] = set()
        self.db = ""
        self.before: Snapshot = {}

    def start(self) -> None:
        self.cluster.write_configs()
        with self.cluster.config_path("drainer").open("a", encoding="utf-8") as config:
            config.write(rules_toml(self.rules))  # the demo's TOML writer has no [[arrays]]
        try:
            self.cluster.start()
        except BaseException:
            self.cluster.stop()
            raise

    def catch_up(self) -> None:
        self.cluster.wait_caught_up(self.cluster.timestamp(), timeout=HANG_GUARD)

    def seed(self) -> None:
        """The first load, caught up; then every row's keys written (the cache as the app fills it).

        The load runs its :data:`SEED_SECONDS` and on until the upstream's rows give more than
        :data:`SEED_KEYS` keys, then is interrupted: a starved machine writes fewer rows a second
        (two test workers at load ~25: 461-477 keys after 4 s), and what the tests need is the
        rows, not the seconds. Its ``seconds`` are a hang guard only."""

        def rows_enough(cluster: Cluster, load: LoadProcess) -> None:
            checked = [0.0]

            def enough() -> bool:
                progress = load.progress()
                if not load.running:
                    return True  # it ended by itself: run_load checks how, the assertion below what
                if progress is None or progress.elapsed < SEED_SECONDS or time.monotonic() - checked[0] < 1:
                    return False
                checked[0] = time.monotonic()
                return len(self.upstream_keys()[2]) > SEED_KEYS

            wait_for(enough, f"a first load whose rows give more than {SEED_KEYS} keys", cluster)

        run_load(self.cluster, self.upstream, seconds=HANG_GUARD / 2, seed=11, fault=rows_enough)
        self.catch_up()
        self.db, self.before, self.written = self.upstream_keys()
        pipe = self.client.pipeline()
        for key in self.written:
            pipe.set(key, "cached")
        pipe.execute()
        assert len(self.written) > SEED_KEYS, f"the first load left few rows: {len(self.written)} keys"

    def upstream_keys(self) -> tuple[str, Snapshot, set[str]]:
        """The upstream's rows now and every key :func:`redis_rules` render for them."""
        db, rows = snapshot(self.upstream)
        keys = {
            key
            for table, by_key in rows.items()
            for row in by_key.values()
            for key in row_keys(self.prefix, db, table, row)
        }
        return db, rows, keys

    def keys(self) -> set[str]:
        return {k.decode() for k in self.client.scan_iter(match=f"{self.prefix}:*", count=1000)}

    def assert_exact(self) -> None:
        """Catch up; the keys of changed rows are gone, every other key written is there."""
        self.catch_up()
        _, after = snapshot(self.upstream)
        gone = changed_keys(self.prefix, self.db, self.before, after)
        expected = self.written - gone
        actual = self.keys()
        stale = sorted(actual & gone)
        lost = sorted(expected - actual)
        assert not stale, f"{len(stale)} keys of changed rows survived, e.g. {stale[:10]}"
        assert not lost, f"{len(lost)} keys of untouched rows are gone, e.g. {lost[:10]}"
        assert actual == expected, f"unexpected keys: {sorted(actual - expected)[:10]}"
        # both sides of the property must have been exercised: a 25-40 s load on a loaded machine
        # touches every shared account and leaves only the first load's own rows untouched (53
        # keys of 562 in one run), so the floor on the untouched side is lower
        assert len(self.written & gone) > 100 and len(expected) > 20, (
            len(self.written & gone),
            len(expected),
        )
        slots = [k for k in self.written & gone if k.startswith(f"{self.prefix}:slot:")]
        assert slots, "no load_slots slot key was invalidated: no unique-column change happened"

    def cleanup(self) -> None:
        discard(self.cluster)
        keys = list(self.keys())
        for start in range(0, len(keys), 500):
            for key in keys[start : start + 500]:
                self.client.delete(key)


def run_load(
    cluster: Cluster, upstream: str, seconds: float, seed: int, fault: Fault | None = None
) -> dict[str, Any]:
    flags = [*LOAD_FLAGS, "--seed", str(seed)]
    load = LoadProcess(
        cluster.data_dir / "logs", cluster.meta_addr, upstream, seconds, flags, name=f"load-{seed}"
    )
    load.start()
    try:
        if fault is not None:
            fault(cluster, load)
            load.interrupt()  # the fault is over and the load went on past it: no need to run out its time
        wait_for(lambda: not load.running, "end of the load", cluster)
        status = load.wait(timeout=10)
    finally:
        load.stop()
    summary = load.result()
    assert status == 0 and summary["errors"] == 0 and summary["transactions"] > 0, summary
    return summary


def run_main_load(pipe: RedisPipeline, seconds: float, fault: Fault | None = None) -> None:
    """The second load, with the mutator changing first-load rows meanwhile."""
    mutator = Mutator(pipe.upstream, pipe.cluster.meta_addr, pipe.before)
    mutator.start()
    summary = run_load(pipe.cluster, pipe.upstream, seconds=seconds, seed=7, fault=fault)
    mutator.join()
    assert summary["ddl"] > 3, f"no DDL during the DML: {summary}"
    assert mutator.done == mutator.planned >= 30, (mutator.done, mutator.planned)


@pytest.fixture
def upstream(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'upstream.db'}"


@pytest.fixture
def shared(tmp_path: Path, upstream: str, redis_url: str, unique_name: str) -> Iterator[RedisPipeline]:
    pipe = RedisPipeline(tmp_path, upstream, unique_name, {"url": redis_url}, redis.Redis.from_url(redis_url))
    try:
        pipe.start()
        yield pipe
    finally:
        pipe.cleanup()


def test_load_invalidates_exactly_the_keys_of_changed_rows(shared: RedisPipeline) -> None:
    shared.seed()
    run_main_load(shared, seconds=MAIN_LOAD_SECONDS)
    shared.assert_exact()


@pytest.mark.mysql
def test_the_same_with_a_mariadb_upstream(
    tmp_path: Path, mysql_upstream: Dsn, redis_url: str, unique_name: str
) -> None:
    upstream = mysql_text(mysql_upstream)
    pipe = RedisPipeline(tmp_path, upstream, unique_name, {"url": redis_url}, redis.Redis.from_url(redis_url))
    try:
        pipe.start()
        pipe.seed()
        assert pipe.db == mysql_upstream.database
        run_main_load(pipe, seconds=MAIN_LOAD_SECONDS)
        pipe.assert_exact()
    finally:
        pipe.cleanup()


def test_the_same_against_a_redis_cluster(
    tmp_path: Path, upstream: str, redis_cluster_nodes: list[str], unique_name: str
) -> None:
    client = RedisCluster(startup_nodes=[ClusterNode(*n.rsplit(":", 1)) for n in redis_cluster_nodes])
    settings = {
        "url": f"redis://{redis_cluster_nodes[0]}/0",
        "cluster": True,
        "cluster-nodes": redis_cluster_nodes[1:],
    }
    pipe = RedisPipeline(tmp_path, upstream, unique_name, settings, client)
    try:
        pipe.start()
        pipe.seed()
        nodes = {client.get_node_from_key(key).name for key in list(pipe.written)[:200]}
        assert len(nodes) == len(redis_cluster_nodes), nodes
        run_main_load(pipe, seconds=MAIN_LOAD_SECONDS)
        pipe.assert_exact()
    finally:
        pipe.cleanup()


@pytest.fixture
def private(tmp_path: Path, upstream: str, unique_name: str) -> Iterator[tuple[RedisPipeline, RedisServer]]:
    server = RedisServer(tmp_path / "redis", persistent=True)
    server.start()
    pipe = RedisPipeline(tmp_path, upstream, unique_name, {"url": server.url}, server.client())
    try:
        pipe.start()
        yield pipe, server
    finally:
        server.start_if_down()
        pipe.cleanup()
        server.kill()


def kill_drainer(cluster: Cluster, load: LoadProcess) -> None:
    wait_for_transactions(cluster, load, 60)
    cluster.kill("drainer")
    time.sleep(1.0)  # the load keeps writing meanwhile
    cluster.restart("drainer")
    before = load.progress()
    assert before is not None
    wait_for_transactions(cluster, load, before.transactions + 60)


@pytest.mark.slow
def test_drainer_sigkilled_mid_load_still_invalidates_exactly(
    private: tuple[RedisPipeline, RedisServer],
) -> None:
    pipe, _ = private
    pipe.seed()
    run_main_load(pipe, seconds=15, fault=kill_drainer)
    assert pipe.cluster.members["drainer"].process.starts == 2
    pipe.assert_exact()


def redis_down_for(seconds: float, server: RedisServer) -> Fault:
    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        server.kill()  # SIGKILL: connections drop mid-pipeline; the append-only file (fsync always) keeps
        time.sleep(seconds)  # what was acknowledged. The load and the pumps go on; the drainer retries
        cluster.check()  # the drainer still runs
        server.start()
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 60)

    return fault


@pytest.mark.slow
def test_redis_stopped_for_20_seconds_only_delays_invalidation(
    private: tuple[RedisPipeline, RedisServer],
) -> None:
    pipe, server = private
    pipe.seed()
    run_main_load(pipe, seconds=40, fault=redis_down_for(20, server))
    drainer = pipe.cluster.members["drainer"].process
    assert drainer.starts == 1
    output = drainer.output()
    assert "redis sink" in output and "Connection refused" in output, drainer.tail()
    pipe.client = server.client()
    pipe.assert_exact()
