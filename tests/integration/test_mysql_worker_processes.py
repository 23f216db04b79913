"""The mysql sink with ``worker-processes = 2`` (keyed workers in child processes) against real MariaDB.

The helpers are test_mysql_sink's: the same workloads, the same model rows. A
mixed workload (keyed and keyless tables, unique keys moving between rows,
conflicts) ends equal to an upstream copy of the model rows (``diff``); a child
killed with SIGKILL mid-run makes the next flush fail (never a silent success),
the same sink goes on with a new child, and a sink restarted from the
checkpoint (safe mode from the progress rows) ends equal.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Iterator

import pymysql
import pytest
from prometheus_client import REGISTRY

from bridge.apps.diff import diff
from bridge.dsn import parse_dsn
from bridge.errors import ConfigError
from bridge.proto import row_pb2
from bridge.sink.driver import SinkDriver
from bridge.sink.errors import SinkUnavailable
from bridge.sink.events import Event
from drainer.sinks.mysql.config import MySQLSinkConfig
from drainer.sinks.mysql.procs import WorkerProcess
from drainer.sinks.mysql.sink import MySQLSink
from tests.integration.test_mysql_sink import (
    Downstream,
    expected_rows,
    keyed_and_keyless,
    load,
    random_history,
)
from tests.support.binlog_events import EventStream, table_schema

pytestmark = pytest.mark.mysql
T = row_pb2.ColumnType


@pytest.fixture
def down(unique_name: str) -> Iterator[Downstream]:
    dsn = parse_dsn(os.environ.get("BRIDGE_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/"))
    conn = pymysql.connect(
        host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password, autocommit=True, charset="utf8mb4"
    )
    target = Downstream(dsn, conn, unique_name)
    target.cluster_id = random.randrange(1, 1 << 40)
    try:
        yield target
    finally:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE %s", (f"{unique_name}%",))
            for (name,) in cur.fetchall():
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


def upstream_copy(down: Downstream, tables: dict[str, list[tuple[object, ...]]]) -> str:
    """A database ``<name>_up`` with each table shaped like the sink's and holding the model rows."""
    up = f"{down.name}_up"
    down.execute(f"CREATE DATABASE `{up}`")
    with down.conn.cursor() as cur:
        for table, rows in tables.items():
            cur.execute(f"CREATE TABLE `{up}`.`{table}` LIKE `{down.db}`.`{table}`")
            if rows:
                marks = ", ".join(["%s"] * len(rows[0]))
                cur.executemany(f"INSERT INTO `{up}`.`{table}` VALUES ({marks})", rows)
    return up


def assert_equal(down: Downstream, tables: dict[str, list[tuple[object, ...]]]) -> None:
    up = upstream_copy(down, tables)
    auth = f"mysql://{down.dsn.user}@{down.dsn.host}:{down.dsn.port}"
    report = diff(f"{auth}/{up}", f"{auth}/{down.db}")
    assert report.equal, report.lines()
    assert report.rows == sum(len(rows) for rows in tables.values())


def test_worker_processes_is_validated_against_worker_count() -> None:
    dsn = "mysql://root@127.0.0.1:3306/"
    MySQLSinkConfig(dsn=dsn, worker_count=4, worker_processes=4).validate()
    for bad in (5, -1):
        with pytest.raises(ConfigError, match=r"sink\.mysql\.worker-processes"):
            MySQLSinkConfig(dsn=dsn, worker_count=4, worker_processes=bad).validate()


def test_a_mixed_workload_through_two_worker_processes_ends_equal(down: Downstream) -> None:
    stream = EventStream()
    ddl = keyed_and_keyless(stream, down.db)
    columns = [
        row_pb2.Column(name="id", type=T.INT),
        row_pb2.Column(name="uk", type=T.INT),
        row_pb2.Column(name="v", type=T.VARCHAR, length=20, nullable=True),
    ]
    ddl.append(stream.create(table_schema(down.db, "moves", columns, key=["id"], unique=["uk"], table_id=3)))
    moves, model = random_history(stream, f"{down.db}.moves", seed=5, txns=300)
    events: list[Event] = [*ddl, *moves, *load(stream, down.db, 150)]  # in commit_ts order
    sink = down.sink(
        safe_mode_duration="0s",
        worker_count=8,
        worker_processes=2,
        batch_rows=16,
        txn_rows=40,
        serial_unique_tables=False,  # conflicts between workers of both processes
    )
    statements = REGISTRY.get_sample_value("bridge_sink_mysql_statement_seconds_count") or 0
    groups = [g for g in sink._pool.groups if isinstance(g, WorkerProcess)]
    assert len(groups) == 2 and all(g.alive() for g in groups)
    driver = SinkDriver(sink, threading.Event(), retry_initial=0.01, retry_max=0.1)
    try:
        for start in range(0, len(events), 41):
            driver.write(events[start : start + 41])
            if start % 2 == 0:
                driver.flush()
        assert driver.flush() == events[-1].commit_ts
    finally:
        sink.close()
    assert not any(g.alive() for g in groups)  # close() stopped the children
    # what the children's workers counted reached this process's metrics at the barriers
    inserted = REGISTRY.get_sample_value(
        "bridge_sink_mysql_rows_total", {"table": f"{down.db}.k", "kind": "insert"}
    )
    assert inserted == 150 * 5
    assert (REGISTRY.get_sample_value("bridge_sink_mysql_statement_seconds_count") or 0) > statements
    assert sink.conflict_flushes > 0
    keyed, keyless = expected_rows(150)
    assert_equal(
        down,
        {
            "k": list(keyed),
            "n": list(keyless),
            "moves": [(i, uk, v) for i, (uk, v) in sorted(model.items())],
        },
    )


def test_a_killed_worker_process_fails_the_next_flush_and_a_restart_ends_equal(down: Downstream) -> None:
    stream = EventStream()
    ddl = keyed_and_keyless(stream, down.db)
    events = load(stream, down.db, 120)

    def sink(resume_ts: int = 0) -> MySQLSink:
        return down.sink(
            resume_ts, safe_mode_duration="0s", worker_count=4, worker_processes=2, txn_rows=7, batch_rows=4
        )

    first = sink()
    try:
        first.write([*ddl, *events[:40]])
        checkpoint = first.flush()
        assert checkpoint == events[39].commit_ts
        groups = first._pool.groups
        assert len(groups) == 2 and all(isinstance(g, WorkerProcess) for g in groups)
        victim = groups[0]
        assert isinstance(victim, WorkerProcess) and victim.pid is not None
        first.write(events[40:70])
        os.kill(victim.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30  # hang guard only
        while victim.alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not victim.alive()
        first.write(events[70:80])
        with pytest.raises(SinkUnavailable, match=r"worker process 0 .* is gone"):
            first.flush()
        # The sink rolled back to the checkpoint and started the child again: it goes on.
        assert victim.pid is not None and victim.error is None
        first.write(events[40:60])
        checkpoint = first.flush()
        assert checkpoint == events[59].commit_ts
        first.write(events[60:100])  # partly committed by txn-rows, never flushed: the "crash"
    finally:
        first.close()
    second = sink(checkpoint)
    try:
        for start in range(60, len(events), 9):
            second.write(events[start : start + 9])
        assert second.flush() == events[-1].commit_ts
    finally:
        second.close()
    keyed, keyless = expected_rows(120)
    assert down.query(f"SELECT id, v FROM `{down.db}`.k ORDER BY id") == keyed
    assert_equal(down, {"k": list(keyed), "n": list(keyless)})
