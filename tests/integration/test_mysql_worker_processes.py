"""The mysql sink with ``worker-processes = 2`` (keyed workers in child processes) against real MariaDB.

The helpers are test_mysql_sink's: the same workloads, the same model rows. A
mixed workload (keyed and keyless tables, unique keys moving between rows,
conflicts) ends equal to an upstream copy of the model rows (``diff``); a child
killed with SIGKILL mid-run makes the next flush fail (never a silent success),
the same sink goes on with a new child, and a sink restarted from the
checkpoint (safe mode from the progress rows) ends equal.
"""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pymysql
import pytest
from prometheus_client import REGISTRY

from bridge.apps.diff import diff
from bridge.dsn import parse_dsn
from bridge.errors import ConfigError
from bridge.proto import row_pb2
from bridge.sink.driver import SinkDriver
from bridge.sink.errors import SinkUnavailable
from bridge.sink.events import Event, TxnEvent
from drainer.sinks.mysql.config import MySQLSinkConfig, auto_processes, usable_cores
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
    # Every third transaction without the raw rows (as events not built by the drainer's
    # EventBuilder come): the dispatcher decodes and plans those, the children the others.
    events = [
        dataclasses.replace(e, raw=None) if isinstance(e, TxnEvent) and i % 3 == 0 else e
        for i, e in enumerate(events)
    ]
    txns = [e for e in events if isinstance(e, TxnEvent)]
    assert any(e.raw is None for e in txns) and any(e.raw is not None for e in txns)
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


def test_worker_processes_auto_follows_the_core_count() -> None:
    dsn = "mysql://root@127.0.0.1:3306/"
    assert MySQLSinkConfig(dsn=dsn).worker_processes == "auto"  # the default
    assert [auto_processes(cores, 16) for cores in (1, 2, 3, 4, 8, 12, 16, 64)] == [0, 0, 0, 1, 2, 3, 4, 4]
    assert auto_processes(64, 2) == 2  # never more than worker-count
    config = MySQLSinkConfig(dsn=dsn, worker_count=4)
    config.validate()
    assert config.processes() == auto_processes(usable_cores(), 4)
    with pytest.raises(ConfigError, match=r'sink\.mysql\.worker-processes: "auto" or a number'):
        MySQLSinkConfig(dsn=dsn, worker_processes="many").validate()


def alive(pid: int) -> bool:
    """``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def wait_gone(pids: Sequence[int], what: str) -> None:
    deadline = time.monotonic() + 30  # hang guard only
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(alive(pid) for pid in pids), f"{what} outlived their parent: {pids}"


SINK_PROCESS = """
import sys
from bridge.dsn import parse_dsn
from tests.integration.test_mysql_sink import Downstream, keyed_and_keyless, load
from tests.support.binlog_events import EventStream

if __name__ == "__main__":  # the sink's children are spawned: they import this module again
    down = Downstream(parse_dsn(sys.argv[1]), None, sys.argv[2])
    down.cluster_id = int(sys.argv[3])
    stream = EventStream()
    ddl = keyed_and_keyless(stream, down.db)
    events = load(stream, down.db, 60)
    sink = down.sink(safe_mode_duration="0s", worker_count=4, worker_processes=2, batch_rows=4, txn_rows=7)
    sink.write([*ddl, *events[:30]])
    print("checkpoint", sink.flush(), *[g.pid for g in sink._pool.groups], flush=True)
    sys.stdin.readline()  # the test holds a lock the next changes wait for
    sink.write(events[30:])
    print("written", flush=True)
    sys.stdin.readline()  # until SIGKILL
"""


def test_worker_processes_die_with_a_sigkilled_sink_process_and_hold_no_lock(
    down: Downstream, tmp_path: Path
) -> None:
    """A sink process SIGKILLed while a worker in its child waits for a row lock: the children exit
    with it (before the lock is freed, so none of them can commit late), and a sink started again
    from the checkpoint applies the rest and ends equal."""
    script = tmp_path / "sink_process.py"
    script.write_text(SINK_PROCESS)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen(
        [sys.executable, str(script), down.url, down.name, str(down.cluster_id)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    lock = pymysql.connect(
        host=down.dsn.host, port=down.dsn.port, user=down.dsn.user, password=down.dsn.password or ""
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        words = proc.stdout.readline().split()
        assert words[:1] == ["checkpoint"], words
        checkpoint, children = int(words[1]), [int(pid) for pid in words[2:]]
        assert len(children) == 2 and all(alive(pid) for pid in children)
        with lock.cursor() as cur:  # an uncommitted row with a key the next inserts carry
            cur.execute(f"INSERT INTO `{down.db}`.k VALUES (302, 'held')")
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "written"
        waiting = (
            "SELECT COUNT(*) FROM information_schema.innodb_trx "
            f"WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE '%%{down.db}%%'"
        )
        deadline = time.monotonic() + 30  # hang guard only
        while down.query(waiting) == [(0,)] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert down.query(waiting) != [(0,)], "no worker waited for the held row"
        proc.kill()
        proc.wait(timeout=30)
        wait_gone(children, "worker processes")
        # Had a child survived, its insert would go on now and it could commit. (The server notices
        # the closed connection when the lock wait ends and rolls that transaction back.)
        lock.rollback()
    finally:
        lock.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    stream = EventStream()
    keyed_and_keyless(stream, down.db)
    events = load(stream, down.db, 60)
    assert checkpoint == events[29].commit_ts
    again = down.sink(checkpoint, safe_mode_duration="0s", worker_count=4, worker_processes=2, batch_rows=4)
    try:
        again.write(events[30:])
        assert again.flush() == events[-1].commit_ts
    finally:
        again.close()
    keyed, keyless = expected_rows(60)
    assert_equal(down, {"k": list(keyed), "n": list(keyless)})
