"""The MySQL sink end to end: a MariaDB upstream, three pumps, a drainer writing into a second
MariaDB server (``downstream_mysql``), its checkpoint kept in that downstream.

The upstream is a database of its own on the shared server (``BRIDGE_TEST_MYSQL_DSN``);
``binlog-bridge load`` writes it with DDL during DML, primary-key changes, unique-key swaps
inside one transaction and a table without keys. Each test ends the same way: the producers
stop, a fresh timestamp is taken (above every commit_ts handed out so far), the drainer's
checkpoint must reach it, and ``bridge.apps.diff`` must find the downstream database equal to the
upstream. The databases are dropped on both servers afterwards.

The sink runs in normal mode (``safe-mode-duration = "0s"``): a replay after a fault is made
idempotent only by the sink's record of what it applied. Faults: the drainer SIGKILLed six times
during the load (restarted each time; each kill and restart costs about six seconds here, most of
it the drainer's start), the downstream server stopped for 20 seconds mid-run (twice the sink's
longest reconnect backoff, ``retry-max`` 10 s: replication is only delayed), and a one-million-row
transaction. A load with a fault is interrupted once the fault is over. Timeouts are hang guards
only.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from prometheus_client import REGISTRY

from bridge.apps.demo.cluster import Cluster, ClusterSpec, resolver_for
from bridge.apps.demo.workload import LoadProcess
from bridge.apps.diff import diff
from bridge.dsn import Dsn, parse_dsn
from bridge.producer import TxnWriter, open_upstream
from bridge.pumpclient import PumpsClient
from tests.e2e.test_pipeline import wait_for, wait_for_transactions
from tests.e2e.test_relay_recovery import worker_process_pids
from tests.integration.test_mysql_worker_processes import wait_gone
from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import discard

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(300)]

MYSQL_DSN_ENV = "BRIDGE_TEST_MYSQL_DSN"
DEFAULT_MYSQL_DSN = "mysql://root@127.0.0.1:3306/"
LOAD_TABLES = {"load_accounts", "load_orders", "load_events", "load_docs", "load_wide", "load_slots"}
HANG_GUARD = 180.0
# No safe-mode window after a start (its default, 60 s, would cover each test whole): changes are
# applied in normal mode, and replays after a kill or an outage rely on the sink's own record of
# what it applied (safe mode only up to that) - the steady state, and the harder case.
# worker-processes: 0 (threads) unless a test says otherwise, whatever "auto" would pick here.
SINK_SETTINGS = {"worker-count": 16, "batch-rows": 500, "txn-rows": 4096, "safe-mode-duration": "0s"}
SINK_SETTINGS["worker-processes"] = 0
# every transaction kind; swaps and rekeys more often than by default
LOAD_FLAGS = ["--concurrency", "4", "--ddl-interval", "0.5", "--mix", "swap=15,rekey=10,large=2"]
LOAD_FLAGS += ["--large-size", "300"]

Fault = Callable[[Cluster, LoadProcess], None]


def dsn_text(dsn: Dsn) -> str:
    auth = dsn.user + (f":{dsn.password}" if dsn.password else "")
    return f"mysql://{auth}@{dsn.host}:{dsn.port}/{dsn.database}"


def on_server(dsn: Dsn, sql: str) -> None:
    """Run one statement on the server ``dsn`` names (no database selected)."""
    conn = pymysql.connect(host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password or "")
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
    finally:
        conn.close()


class Pipeline:
    """The upstream database, the downstream server and the cluster between them."""

    def __init__(self, upstream: Dsn, downstream: MariaDBInstance, workdir: Path) -> None:
        self.upstream_dsn = upstream
        self.downstream = downstream
        self.workdir = workdir
        self.cluster: Cluster | None = None
        self.login = ""  # how the sink and the checkpoint log in downstream ("": as root)
        self.checkpoint_options: dict[str, Any] = {}

    @property
    def upstream(self) -> str:
        return dsn_text(self.upstream_dsn)

    @property
    def database(self) -> str:
        return self.upstream_dsn.database

    @property
    def downstream_db(self) -> str:
        """The downstream database the sink writes the upstream's tables into (same name)."""
        return f"{self.downstream.dsn}{self.database}"

    def start(self, **sink: Any) -> Cluster:
        # the sink's progress table and the checkpoint in a database of this test's own
        own = f"ckpt_{self.database}"
        login = self.login or self.downstream.dsn
        mysql_sink = {"dsn": login, "progress-schema": own, **SINK_SETTINGS, **sink}
        checkpoint = {"type": "mysql", "dsn": login, "schema": own, **self.checkpoint_options}
        spec = ClusterSpec(
            self.workdir / "cluster",
            pumps=3,
            sinks=("mysql",),
            resolver=resolver_for(self.upstream),
            drainer_settings={"sink": {"mysql": mysql_sink}, "checkpoint": checkpoint},
        )
        self.cluster = Cluster(spec)
        try:
            self.cluster.start()
        except BaseException:
            self.cluster.stop()
            raise
        return self.cluster


@pytest.fixture
def pipeline(unique_name: str, downstream_mysql: MariaDBInstance, tmp_path: Path) -> Iterator[Pipeline]:
    """A database of its own on the shared server as the upstream; its copy, and the checkpoint's
    database, on the downstream server: all dropped afterwards (the downstream restarted first
    if the test left it down)."""
    server = parse_dsn(os.environ.get(MYSQL_DSN_ENV, DEFAULT_MYSQL_DSN), key=MYSQL_DSN_ENV)
    pipe = Pipeline(server.with_database(f"e2e_{unique_name}"), downstream_mysql, tmp_path)
    on_server(server, f"CREATE DATABASE `{pipe.database}`")
    try:
        yield pipe
    finally:
        if pipe.cluster is not None:
            discard(pipe.cluster)
        on_server(server, f"DROP DATABASE IF EXISTS `{pipe.database}`")
        downstream_mysql.start()
        downstream_mysql.drop_database(pipe.database)
        downstream_mysql.drop_database(f"ckpt_{pipe.database}")


def checkpoint_ts(cluster: Cluster) -> int:
    status = cluster.drainer_status()
    return int(status.get("checkpoint_ts") or 0) if status else 0


def run_load(pipe: Pipeline, seconds: float, fault: Fault | None = None, seed: int = 7) -> dict[str, Any]:
    """``binlog-bridge load`` with DDL every half second for ``seconds``; ``fault`` runs meanwhile,
    and a load still running when it returns is interrupted (it finishes what is in flight)."""
    cluster = pipe.cluster
    assert cluster is not None
    flags = [*LOAD_FLAGS, "--seed", str(seed)]
    load = LoadProcess(cluster.data_dir / "logs", cluster.meta_addr, pipe.upstream, seconds, flags)
    load.start()
    try:
        if fault is not None:
            fault(cluster, load)
            load.interrupt()
        wait_for(lambda: not load.running, "end of the load", cluster)
        status = load.wait(timeout=10)
    finally:
        load.stop()
    summary = load.result()
    assert status == 0, f"load exited with {status}: {summary}\n{load.process.tail()}"
    assert summary["transactions"] > 0 and summary["errors"] == 0, summary
    assert summary["ddl"] > len(LOAD_TABLES) + 2, f"no DDL during the DML: {summary}"
    return summary


def assert_replicated(pipe: Pipeline, tables: set[str] = LOAD_TABLES) -> None:
    """Catch up past every commit so far, then the downstream database must equal the upstream."""
    cluster = pipe.cluster
    assert cluster is not None
    cluster.wait_caught_up(cluster.timestamp(), timeout=HANG_GUARD)
    report = diff(pipe.upstream, pipe.downstream_db)
    names = {table.name.split(".", 1)[1] for table in report.tables}
    assert names >= tables, report.lines()
    assert report.equal, "\n".join(report.lines())


def slot_swaps(pipe: Pipeline) -> int:
    """How many load_slots rows hold a slot other than their first (moved by a swap)."""
    conn = pymysql.connect(
        host=pipe.upstream_dsn.host,
        port=pipe.upstream_dsn.port,
        user=pipe.upstream_dsn.user,
        password=pipe.upstream_dsn.password or "",
        database=pipe.database,
    )
    try:
        with conn.cursor() as cursor:
            cursor.execute("SELECT COUNT(*) FROM `load_slots` WHERE `slot` <> `id`")
            row = cursor.fetchone()
    finally:
        conn.close()
    assert row is not None
    return int(row[0])


def test_load_with_ddl_key_changes_swaps_and_a_keyless_table(pipeline: Pipeline) -> None:
    pipeline.start()
    summary = run_load(pipeline, seconds=10)
    assert slot_swaps(pipeline) > 0, "the load swapped no unique slot"
    assert_replicated(pipeline)
    assert summary["rows"] > summary["transactions"]


def kill_drainer_repeatedly(times: int, seed: int = 3) -> Fault:
    """SIGKILL the drainer ``times`` times while the load runs: each time once it has restarted
    and moved its checkpoint on (so it was applying), after a random extra moment. The sink's
    worker processes (``worker-processes`` > 0) must be gone before the drainer starts again."""
    rng = random.Random(seed)

    def moved_past(cluster: Cluster, ts: int) -> Callable[[], bool]:
        return lambda: checkpoint_ts(cluster) > ts

    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 40)
        seen = checkpoint_ts(cluster)
        for _ in range(times):
            wait_for(moved_past(cluster, seen), "drainer checkpoint progress", cluster)
            time.sleep(rng.uniform(0.0, 0.6))
            assert load.running, "the load ended before the faults did; give it more --seconds"
            seen = checkpoint_ts(cluster)
            cluster.kill("drainer")
            wait_gone(worker_process_pids(cluster.members["drainer"].process.output()), "worker processes")
            cluster.restart("drainer")

    return fault


@pytest.mark.slow
def test_drainer_sigkilled_six_times_during_the_load(pipeline: Pipeline) -> None:
    cluster = pipeline.start()
    run_load(pipeline, seconds=150, fault=kill_drainer_repeatedly(6))
    drainer = cluster.members["drainer"].process
    assert drainer.starts == 7
    log = drainer.log_path.read_text(encoding="utf-8", errors="replace")  # every start's output
    assert log.count(": resuming after commit_ts ") == 6, drainer.tail()  # from the downstream's checkpoint
    assert_replicated(pipeline)


@pytest.mark.slow
def test_drainer_with_worker_processes_sigkilled_during_the_load(pipeline: Pipeline) -> None:
    """The keyed workers in two child processes of the drainer: each SIGKILL of the drainer ends
    its children too (no worker of a dead drainer applies or commits anything), and the drainer
    restarted from its checkpoint ends equal."""
    cluster = pipeline.start(**{"worker-processes": 2})
    run_load(pipeline, seconds=30, fault=kill_drainer_repeatedly(3))
    drainer = cluster.members["drainer"].process
    assert drainer.starts == 4
    log = drainer.log_path.read_text(encoding="utf-8", errors="replace")  # every start's output
    assert len(worker_process_pids(log)) == 2 * 4, drainer.tail()
    assert_replicated(pipeline)


def downstream_down_for(seconds: float, downstream: MariaDBInstance) -> Fault:
    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        downstream.stop()
        time.sleep(seconds)  # the load and the pumps go on; the drainer retries
        cluster.check()  # the drainer is still running
        downstream.start()
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 60)

    return fault


@pytest.mark.slow
def test_downstream_stopped_for_20_seconds_only_delays_replication(pipeline: Pipeline) -> None:
    cluster = pipeline.start(**{"worker-processes": 2})  # the keyed workers' retries in two children
    run_load(pipeline, seconds=150, fault=downstream_down_for(20, pipeline.downstream))
    drainer = cluster.members["drainer"].process
    assert drainer.starts == 1
    assert "Connection refused" in drainer.output(), drainer.tail()  # the outage was noticed, and retried
    assert_replicated(pipeline)


MILLION = 1_000_000


@pytest.mark.slow
def test_a_one_million_row_transaction(pipeline: Pipeline) -> None:
    """The producer's pump client writes it in parts (its default chunk-bytes); the drainer's peak
    RSS stays under 512 MiB (issue 16 item 7) and the downstream equals the upstream."""
    cluster = pipeline.start()
    chunked = "bridge_pump_client_chunked_txns_total"
    chunked_before = REGISTRY.get_sample_value(chunked) or 0.0
    with PumpsClient(cluster.meta_addr) as client:
        writer = TxnWriter(open_upstream(pipeline.upstream_dsn), client)
        try:
            writer.ddl("CREATE TABLE narrow (id BIGINT NOT NULL PRIMARY KEY, v INT NOT NULL)")
            with writer.transaction() as txn:
                inserted = txn.insert_many("narrow", ({"id": i, "v": i % 997} for i in range(MILLION)))
            assert inserted == MILLION and txn.rows == MILLION
            with writer.transaction() as txn:  # and an ordinary transaction after it
                txn.update("narrow", {"id": 7}, {"v": -7})
        finally:
            writer.close()
    assert (REGISTRY.get_sample_value(chunked) or 0.0) - chunked_before == 1  # it went in parts
    assert_replicated(pipeline, tables={"narrow"})
    status = Path(f"/proc/{cluster.members['drainer'].process.pid}/status").read_text()
    peak_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    assert peak_kib < 512 * 1024, f"drainer peak RSS {peak_kib // 1024} MiB for a million-row transaction"
