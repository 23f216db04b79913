"""The whole pipeline as real processes: `binlog-bridge meta`, three `pump`s, a `drainer`
(sqlite + file sinks) and `binlog-bridge load` with DDL during DML, against a SQLite or
a MariaDB upstream; with a pump or the drainer SIGKILLed mid-run and restarted.

Every test ends the same way: the producers stop, a fresh timestamp is taken
(above every commit_ts handed out so far), the drainer's checkpoint must
reach it, and ``bridge.apps.diff`` must find the sqlite sink equal to the upstream.
Timeouts are hang guards only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from bridge.apps.demo.cluster import Cluster, ClusterSpec, resolver_for
from bridge.apps.demo.workload import LoadProcess
from bridge.apps.diff import diff
from bridge.dsn import Dsn, parse_dsn
from tests.support.faults import skip_heal
from tests.support.process import discard

pytestmark = pytest.mark.timeout(300)

MYSQL_DSN_ENV = "BRIDGE_TEST_MYSQL_DSN"
DEFAULT_MYSQL_DSN = "mysql://root@127.0.0.1:3306/"
LOAD_TABLES = {"load_accounts", "load_orders", "load_events", "load_docs", "load_wide"}
HANG_GUARD = 60.0 if skip_heal() else 180.0  # the proof that a heal is needed need not wait long

Fault = Callable[[Cluster, LoadProcess], None]


def mysql_text(dsn: Dsn) -> str:
    auth = dsn.user + (f":{dsn.password}" if dsn.password else "")
    return f"mysql://{auth}@{dsn.host}:{dsn.port}/{dsn.database}"


@pytest.fixture
def mysql_upstream(unique_name: str) -> Iterator[Dsn]:
    """A database of its own on the test MariaDB, dropped afterwards."""
    server = parse_dsn(os.environ.get(MYSQL_DSN_ENV, DEFAULT_MYSQL_DSN), key=MYSQL_DSN_ENV)
    dsn = server.with_database(f"e2e_{unique_name}")
    yield dsn
    conn = pymysql.connect(host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{dsn.database}`")
    finally:
        conn.close()


def start_cluster(workdir: Path, **spec: Any) -> Cluster:
    cluster = Cluster(ClusterSpec(workdir / "cluster", pumps=3, **spec))
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture
def sqlite_upstream(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'upstream.db'}"


@pytest.fixture
def cluster(tmp_path: Path, sqlite_upstream: str) -> Iterator[Cluster]:
    """meta, three pumps (resolving lost commits from the SQLite upstream) and a drainer
    (sqlite + file sinks), each with its own ports and data dir.

    A pump SIGKILLed after storing a Prewrite but before answering leaves it unpaired: the
    producer writes the Prewrite again to another pump and the Commit there. The orphan holds
    the pump's watermark, and the merge, until ``max-txn-timeout`` (10 minutes by default) lets
    the resolver settle it; 20 s keeps that inside the catch-up guard and far above the time any
    load transaction stays open upstream (a shorter timeout could discard a Prewrite whose
    transaction has not committed yet)."""
    cluster = start_cluster(
        tmp_path, resolver=resolver_for(sqlite_upstream), pump_settings={"max-txn-timeout": "20s"}
    )
    yield cluster
    discard(cluster)


def wait_for(predicate: Callable[[], object], what: str, cluster: Cluster) -> None:
    """Poll ``predicate`` while every member that should run is running; fail after the guard."""
    deadline = time.monotonic() + HANG_GUARD
    while not predicate():
        cluster.check()
        assert time.monotonic() < deadline, f"hang guard: no {what} after {HANG_GUARD:g}s"
        time.sleep(0.2)


def wait_for_transactions(cluster: Cluster, load: LoadProcess, count: int) -> None:
    def committed() -> bool:
        progress = load.progress()
        if not load.running:  # it ended: run_load checks how
            return True
        return progress is not None and progress.transactions >= count

    wait_for(committed, f"{count} committed load transactions", cluster)


def run_load(
    cluster: Cluster, upstream: str, seconds: float, fault: Fault | None = None, interrupt: bool = True
) -> dict[str, Any]:
    """``binlog-bridge load`` with DDL every half second; ``fault`` runs while it does. ``seconds``
    bounds a load with a fault: once the fault has run (the load went on past it), the load is
    interrupted (SIGINT: it finishes what is in flight) rather than left to run out its time,
    unless ``interrupt`` is false (a test that needs the volume of the whole load)."""
    flags = ["--concurrency", "4", "--ddl-interval", "0.5", "--seed", "7"]
    load = LoadProcess(cluster.data_dir / "logs", cluster.meta_addr, upstream, seconds, flags)
    load.start()
    try:
        if fault is not None:
            fault(cluster, load)
            if interrupt:
                load.interrupt()
        wait_for(lambda: not load.running, "end of the load", cluster)
        status = load.wait(timeout=10)
    finally:
        load.stop()
    summary = load.result()
    assert status == 0, f"load exited with {status}: {summary}\n{load.process.tail()}"
    assert summary["transactions"] > 0 and summary["errors"] == 0, summary
    assert summary["ddl"] > len(LOAD_TABLES), f"no DDL during the DML: {summary}"
    return summary


def assert_replicated(cluster: Cluster, upstream: str) -> None:
    """Catch up past every commit so far, then the downstream must equal the upstream."""
    target = cluster.timestamp()
    cluster.wait_caught_up(target, timeout=HANG_GUARD)
    report = diff(upstream, cluster.downstream_dsn)
    names = {table.name.split(".", 1)[1] for table in report.tables}
    assert names >= LOAD_TABLES, report.lines()
    assert report.equal, "\n".join(report.lines())


def test_sqlite_upstream_through_three_pumps(cluster: Cluster, sqlite_upstream: str) -> None:
    run_load(cluster, sqlite_upstream, seconds=8)
    status = cluster.drainer_status()
    assert status is not None and len(status["pumps"]) == 3, status
    assert_replicated(cluster, sqlite_upstream)


@pytest.mark.mysql
def test_mariadb_upstream_through_three_pumps(tmp_path: Path, mysql_upstream: Dsn) -> None:
    upstream = mysql_text(mysql_upstream)
    cluster = start_cluster(tmp_path, resolver=resolver_for(upstream))
    try:
        run_load(cluster, upstream, seconds=8)
        assert_replicated(cluster, upstream)
    finally:
        discard(cluster)


def kill_and_restart(name: str, down_seconds: float = 2.0) -> Fault:
    """SIGKILL ``name`` once the load is well under way; start it again a little later."""

    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        cluster.kill(name)
        time.sleep(down_seconds)  # the load keeps writing meanwhile
        cluster.restart(name)
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 60)

    return fault


@pytest.mark.slow
def test_sigkilled_pump_restarted_mid_run_loses_nothing(cluster: Cluster, sqlite_upstream: str) -> None:
    upstream = sqlite_upstream
    run_load(cluster, upstream, seconds=20, fault=kill_and_restart("pump-2"))
    assert cluster.members["pump-2"].process.starts == 2
    assert_replicated(cluster, upstream)


@pytest.mark.slow
def test_sigkilled_drainer_restarted_mid_run_loses_nothing(cluster: Cluster, sqlite_upstream: str) -> None:
    upstream = sqlite_upstream
    run_load(cluster, upstream, seconds=20, fault=kill_and_restart("drainer"))
    drainer = cluster.members["drainer"].process
    assert drainer.starts == 2
    assert "checkpoint in" in drainer.output(), drainer.tail()  # resumed from its checkpoint
    assert_replicated(cluster, upstream)
