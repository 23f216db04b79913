"""`binlog-bridge capture` against a real binlog-enabled MariaDB, one real pump and the meta service.

What the capture writes is checked by replaying the pump's committed binlogs (in commit_ts
order, with the schemas of their DDL binlogs) and comparing every table with the source as
the SQL producer reads it: rows that existed before (snapshot), rows written afterwards by a
plain SQL client (inserts, updates including key changes, deletes, multi-statement
transactions, keyless tables, DDL), and a stop and restart in between.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bridge import binlog as B
from bridge.proto import row_pb2
from bridge.pumpclient import PumpsClient
from bridge.tso import physical_ms
from tests.support.capture_source import CaptureProcess, model_rows, replay, source_rows
from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import ChildProcess, free_port, run_cli, wait_until
from tests.support.pump_server import PumpProcess, start_meta

pytestmark = pytest.mark.mysql

Change = row_pb2.SchemaChange


@dataclass
class Cluster:
    source: MariaDBInstance
    meta: ChildProcess
    meta_addr: str
    pump: PumpProcess

    def now(self) -> int:
        with PumpsClient(self.meta_addr) as client:
            return client.get_timestamp()

    def sql(self, db: str, *statements: str) -> None:
        """Run ``statements`` in order on one autocommit connection (BEGIN/COMMIT make transactions)."""
        conn = self.source.connect(db or None)
        try:
            with conn.cursor() as cursor:
                for statement in statements:
                    cursor.execute(statement)
        finally:
            conn.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("capture")
    source = MariaDBInstance(workdir / "source", free_port(), binlog=True)
    source.start()
    meta, meta_addr = start_meta(workdir)
    pump = PumpProcess(workdir, meta_addr)
    try:
        pump.start()
        yield Cluster(source, meta, meta_addr, pump)
    finally:
        if pump.child is not None:
            pump.stop()
        meta.stop()
        source.stop()


@pytest.fixture
def captures() -> Iterator[list[CaptureProcess]]:
    """Capture children a test starts; SIGKILLed at teardown if still running."""
    started: list[CaptureProcess] = []
    yield started
    for capture in started:
        capture.kill()


def _create(cluster: Cluster, db: str) -> None:
    cluster.sql(
        "",
        f"CREATE DATABASE `{db}`",
        f"CREATE TABLE `{db}`.accounts (id INT NOT NULL PRIMARY KEY, owner VARCHAR(40) NOT NULL, "
        "balance DECIMAL(12,2) NOT NULL, opened DATE, seen TIMESTAMP(3) NULL, flags BIT(5), "
        "kind ENUM('a','b','c'), tags SET('x','y','z'), ratio DOUBLE, note TEXT, raw VARBINARY(20), "
        "code BINARY(4), born YEAR, span TIME(2), meta JSON, small TINYINT UNSIGNED, approx FLOAT)",
        f"CREATE TABLE `{db}`.events (ref INT NOT NULL, body VARCHAR(20))",  # no key
    )


def _seed(cluster: Cluster, db: str, first: int, count: int) -> None:
    values = ", ".join(
        f"({i}, 'owner{i}', {i}.25, '2024-01-{1 + i % 28:02d}', '2024-05-06 07:08:09.{i % 1000:03d}', "
        f"b'{i % 32:05b}', '{'abc'[i % 3]}', '{'x,z' if i % 2 else 'y'}', {i}.5, 'note {i}', "
        f"x'{i:04x}', x'ab', {1990 + i % 50}, '{i % 24:02d}:01:02.5', '{{\"n\": {i}}}', {i % 256}, 1.1)"
        for i in range(first, first + count)
    )
    cluster.sql(db, f"INSERT INTO accounts VALUES {values}")
    cluster.sql(db, "INSERT INTO events VALUES " + ", ".join(f"({i % 7}, 'e{i % 3}')" for i in range(count)))


def _workload(cluster: Cluster, db: str) -> None:
    """A plain SQL client: single statements, transactions, key changes, deletes, DDL between them."""
    cluster.sql(
        db,
        "UPDATE accounts SET balance = balance + 1, seen = NULL WHERE id % 3 = 0",
        "BEGIN",
        "INSERT INTO accounts (id, owner, balance) VALUES (1000, 'new', 5)",
        "UPDATE accounts SET id = 2000 WHERE id = 1",
        "DELETE FROM accounts WHERE id = 2",
        "INSERT INTO events VALUES (99, 'in txn')",
        "COMMIT",
        "DELETE FROM events WHERE ref = 3 LIMIT 1",
        "UPDATE events SET body = 'changed' WHERE ref = 4",
        "ALTER TABLE accounts ADD COLUMN extra VARCHAR(10) NULL AFTER owner",
        "UPDATE accounts SET extra = 'set' WHERE id < 10",
        "CREATE TABLE later (k BIGINT NOT NULL PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO later VALUES (1, 'one'), (2, 'two'), (3, 'three')",
        "BEGIN",
        "UPDATE later SET v = 'uno' WHERE k = 1",
        "DELETE FROM later WHERE k = 2",
        "ROLLBACK",
        "RENAME TABLE later TO renamed",
        "UPDATE renamed SET v = 'tres' WHERE k = 3",
        "ALTER TABLE accounts DROP COLUMN note",
        "CREATE TABLE dropped (k INT PRIMARY KEY)",
        "INSERT INTO dropped VALUES (1)",
        "DROP TABLE dropped",
    )


def _check(cluster: Cluster, db: str, since: int, tables: list[str]) -> list[B.Binlog]:
    model, binlogs = replay(cluster.meta_addr, [cluster.pump], since)
    live = sorted(s.table for s in model.schemas.values() if s.db == db)
    assert live == sorted(tables)
    for table in tables:
        assert model_rows(model, db, table) == source_rows(cluster.source, db, table), table
    return binlogs


def _table_t(cluster: Cluster, db: str) -> int:
    """Database ``db`` with a table t (id, v) holding (1, 1) and (2, 2); a timestamp after them."""
    cluster.sql("", f"CREATE DATABASE `{db}`", f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY, v INT)")
    cluster.sql(db, "INSERT INTO t VALUES (1, 1), (2, 2)")
    return cluster.now()


def _capture_t(
    cluster: Cluster, tmp_path: Path, db: str, captures: list[CaptureProcess], **settings: Any
) -> tuple[CaptureProcess, int]:
    """:func:`_table_t`, then a capture of ``db`` started (``settings``: CaptureProcess fields)."""
    since = _table_t(cluster, db)
    capture = CaptureProcess(tmp_path, cluster.source, cluster.meta_addr, [db], **settings)
    captures.append(capture)
    capture.start()
    return capture, since


def _schema_changes(binlogs: list[B.Binlog]) -> list[row_pb2.SchemaChange]:
    """The SchemaChange of each DDL binlog, in order (every DDL binlog the capture writes has one)."""
    changes = [B.read_schema_change(b) for b in binlogs if B.is_ddl(b)]
    assert None not in changes, "a DDL binlog without its SchemaChange"
    return [c for c in changes if c is not None]


def _snapshot_flags(binlogs: list[B.Binlog]) -> list[bool]:
    return [m.snapshot for b in binlogs if not B.is_ddl(b) for m in B.read_prewrite_value(b).mutations]


def test_snapshot_then_stream_then_restart_rebuild_the_source(
    cluster: Cluster, tmp_path: Path, unique_name: str, captures: list[CaptureProcess]
) -> None:
    db = unique_name
    _create(cluster, db)
    _seed(cluster, db, 1, 120)
    since = cluster.now()
    capture = CaptureProcess(tmp_path, cluster.source, cluster.meta_addr, [db])
    captures.append(capture)
    capture.start()
    _workload(cluster, db)
    capture.wait_caught_up()
    binlogs = _check(cluster, db, since, ["accounts", "events", "renamed"])
    flags = _snapshot_flags(binlogs)
    assert flags[: 3 + 3] == [True] * 6  # 120 + 120 rows in chunks of 50: 3 chunks per table
    assert not any(flags[6:])
    status = capture.status()
    assert status["state"] == "streaming" and status["snapshot"] == "done"
    metrics = capture.metrics()
    assert "bridge_capture_row_changes_total" in metrics
    # /status and /metrics count the same transactions, the snapshot's chunks included
    assert status["transactions"] == _metric(metrics, "bridge_capture_transactions_total") > 6
    assert capture.child is not None
    output = capture.child.output
    assert f"capture source mysql://root@127.0.0.1:{cluster.source.port}/" in output, output
    assert "(from capture.upstream of " in output, output
    assert "config: source " in output and "capture ready: source=" in output, output

    assert capture.stop() == 0
    assert "capture stopped on SIGTERM" in capture.child.output
    cluster.sql(db, "INSERT INTO accounts (id, owner, balance) VALUES (3000, 'while down', 1)")
    cluster.sql(db, "DELETE FROM events WHERE ref = 5")
    capture.start()
    cluster.sql(db, "UPDATE renamed SET v = 'after' WHERE k = 1")
    capture.wait_caught_up()
    _check(cluster, db, since, ["accounts", "events", "renamed"])
    assert capture.stop() == 0


def test_never_announces_the_tables_and_streams_from_now(
    cluster: Cluster, tmp_path: Path, unique_name: str, captures: list[CaptureProcess]
) -> None:
    db = unique_name
    capture, since = _capture_t(cluster, tmp_path, db, captures, snapshot="never")
    cluster.sql(db, "INSERT INTO t VALUES (3, 3)", "UPDATE t SET v = 30 WHERE id = 3")
    capture.wait_caught_up()
    model, _ = replay(cluster.meta_addr, [cluster.pump], since)
    assert sorted(model_rows(model, db, "t")) == [(3, 30)]  # rows from before were not copied
    assert capture.stop() == 0


def test_a_source_without_full_row_metadata_is_refused_naming_the_variable(
    cluster: Cluster, tmp_path: Path, unique_name: str, captures: list[CaptureProcess]
) -> None:
    cluster.sql("", "SET GLOBAL binlog_row_metadata = 'MINIMAL'")
    try:
        capture = CaptureProcess(tmp_path, cluster.source, cluster.meta_addr, [unique_name])
        captures.append(capture)
        child = capture.launch()
        assert child.wait(timeout=60) == 2
        assert "binlog_row_metadata = MINIMAL" in child.output
        assert "SET GLOBAL binlog_row_metadata = 'FULL'" in child.output
    finally:
        cluster.sql("", "SET GLOBAL binlog_row_metadata = 'FULL'")


def test_config_errors_name_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(
        '[capture]\nupstream = "mysql://root@127.0.0.1:1/"\ndatabases = ["d"]\nsnapshot = "sometimes"\n'
    )
    result = run_cli("capture", "--config", str(config))
    assert result.returncode == 2
    assert "capture.snapshot" in result.stderr and "sometimes" in result.stderr


def test_a_snapshot_stopped_halfway_is_taken_again_after_emptying_what_it_announced(
    cluster: Cluster, tmp_path: Path, unique_name: str, captures: list[CaptureProcess]
) -> None:
    db = unique_name
    cluster.sql(
        "",
        f"CREATE DATABASE `{db}`",
        f"CREATE TABLE `{db}`.big (id INT PRIMARY KEY, v VARCHAR(20))",
        f"CREATE TABLE `{db}`.a_gone (id INT PRIMARY KEY)",  # announced and copied first
        f"INSERT INTO `{db}`.a_gone VALUES (1)",
    )
    for first in range(0, 6000, 1000):
        values = ", ".join(f"({i}, 'v{i}')" for i in range(first, first + 1000))
        cluster.sql(db, f"INSERT INTO big VALUES {values}")
    since = cluster.now()
    capture = CaptureProcess(tmp_path, cluster.source, cluster.meta_addr, [db], chunk=5)
    captures.append(capture)
    child = capture.launch()
    child.wait_for_line("snapshot at", timeout=60)
    assert capture.stop() == 0  # SIGTERM: stops between two chunks
    assert "capture streaming from" not in child.output
    cluster.sql(db, "DELETE FROM big WHERE id < 100", "UPDATE big SET v = 'later' WHERE id >= 5900")
    cluster.sql(
        db, "ALTER TABLE big ADD COLUMN w INT", "UPDATE big SET w = id WHERE id < 200", "DROP TABLE a_gone"
    )
    child = capture.start()
    assert "truncated downstream" in child.output
    capture.wait_caught_up()
    model, binlogs = replay(cluster.meta_addr, [cluster.pump], since)
    assert model_rows(model, db, "big") == source_rows(cluster.source, db, "big")
    kinds = [(c.kind, c.table) for c in _schema_changes(binlogs)]
    # where the SIGTERM landed decides what the first attempt announced; the second empties
    # exactly that, drops what is gone and brings what changed up to date (ALTER) or announces it
    restart = kinds.index(next(k for k in kinds if k[0] == Change.TRUNCATE_TABLE))
    announced = {table for kind, table in kinds[:restart] if kind == Change.CREATE_TABLE}
    assert announced and set(kinds[:restart]) == {(Change.CREATE_TABLE, t) for t in announced}
    assert set(kinds[restart : restart + len(announced)]) == {(Change.TRUNCATE_TABLE, t) for t in announced}
    later = kinds[restart + len(announced) :]
    assert ((Change.DROP_TABLE, "a_gone") in later) == ("a_gone" in announced)
    assert (Change.ALTER_TABLE if "big" in announced else Change.CREATE_TABLE, "big") in later
    assert capture.stop() == 0


def test_a_purged_position_stops_the_capture_unless_snapshot_is_when_needed(
    cluster: Cluster, tmp_path: Path, unique_name: str, captures: list[CaptureProcess]
) -> None:
    db = unique_name
    capture, since = _capture_t(cluster, tmp_path, db, captures)
    capture.wait_caught_up()
    assert capture.stop() == 0
    cluster.sql(db, "FLUSH BINARY LOGS", "INSERT INTO t VALUES (3, 3)", "DELETE FROM t WHERE id = 1")
    conn = cluster.source.connect()
    with conn.cursor() as cursor:
        cursor.execute("FLUSH BINARY LOGS")
        cursor.execute("SHOW MASTER STATUS")
        status = cursor.fetchone()
        assert status is not None
        current = status[0]

        def purged() -> bool:  # the server keeps a file a lingering dump thread still reads
            cursor.execute(f"PURGE BINARY LOGS TO '{current}'")
            cursor.execute("SHOW BINARY LOGS")
            return [row[0] for row in cursor.fetchall()] == [current]

        wait_until(purged, timeout=60, what="the old binlogs to be purged", interval=0.5)
    conn.close()

    child = capture.launch()
    assert child.wait(timeout=60) == 2
    assert "no longer has binlog" in child.output and "when-needed" in child.output

    capture.snapshot = "when-needed"
    child = capture.start()
    assert "taking a new snapshot" in child.output
    capture.wait_caught_up()
    model, _ = replay(cluster.meta_addr, [cluster.pump], since)
    assert model_rows(model, db, "t") == source_rows(cluster.source, db, "t")
    assert capture.stop() == 0


def _metric(text: str, name: str) -> float:
    """The value of the unlabelled sample ``name`` in a Prometheus text exposition."""
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no sample {name} in the metrics")


def test_filters_select_tables_and_status_reports_the_gtid_position_and_lag(
    cluster: Cluster, tmp_path: Path, unique_name: str, captures: list[CaptureProcess]
) -> None:
    """``tables`` narrows ``databases``: rows and DDL of an unselected table of a captured database,
    and of another database, are not written (not even inside a transaction that also changes a
    selected table). ``/status`` and ``/metrics`` say where the capture is: the journaled GTID
    position reaches the source's ``gtid_binlog_pos``, and the lag drops to 0 on the heartbeat."""
    db, other = unique_name, f"{unique_name}_other"
    create = "(id INT NOT NULL PRIMARY KEY, v INT)"
    cluster.sql("", f"CREATE DATABASE `{db}`", f"CREATE DATABASE `{other}`",
                f"CREATE TABLE `{db}`.kept {create}", f"CREATE TABLE `{db}`.skipped {create}",
                f"CREATE TABLE `{other}`.kept {create}")  # fmt: skip
    for target in (f"`{db}`.kept", f"`{db}`.skipped", f"`{other}`.kept"):
        cluster.sql("", f"INSERT INTO {target} VALUES (1, 1), (2, 2), (3, 3)")
    since = cluster.now()
    only = f'tables = ["{db}.kept"]'
    capture = CaptureProcess(tmp_path, cluster.source, cluster.meta_addr, [db], extra=only)
    captures.append(capture)
    capture.start()
    cluster.sql(
        "",
        "BEGIN",
        f"UPDATE `{db}`.kept SET v = v + 10 WHERE id = 1",
        f"UPDATE `{db}`.skipped SET v = v + 10",
        f"UPDATE `{other}`.kept SET v = v + 10",
        "COMMIT",
        f"INSERT INTO `{other}`.kept VALUES (4, 4)",  # a transaction with nothing captured
        f"ALTER TABLE `{db}`.skipped ADD COLUMN w INT",
        f"INSERT INTO `{db}`.skipped VALUES (5, 5, 5)",
        f"DELETE FROM `{db}`.kept WHERE id = 2",
        f"INSERT INTO `{db}`.kept VALUES (6, 6)",
    )
    capture.wait_caught_up()
    model, binlogs = replay(cluster.meta_addr, [cluster.pump], since)
    assert {(s.db, s.table) for s in model.schemas.values()} == {(db, "kept")}
    assert model_rows(model, db, "kept") == source_rows(cluster.source, db, "kept")
    assert sorted(model_rows(model, db, "kept")) == [(1, 11), (3, 3), (6, 6)]
    ddl = _schema_changes(binlogs)
    assert [(c.kind, c.table) for c in ddl] == [(Change.CREATE_TABLE, "kept")]  # the announcement only

    conn = cluster.source.connect()
    with conn.cursor() as cursor:
        cursor.execute("SELECT @@gtid_binlog_pos")
        row = cursor.fetchone()
        assert row is not None
        (source_gtid,) = row
    conn.close()

    def at_the_source() -> bool:
        status = capture.status()
        return status["position"]["gtid"] == source_gtid and status["lag_seconds"] == 0

    wait_until(at_the_source, timeout=60, what=f"the capture's journaled gtid to reach {source_gtid}")
    status = capture.status()
    assert status["state"] == "streaming"
    assert status["position"]["flavor"] == "mariadb" and status["position"]["mode"] == "gtid"
    metrics = capture.metrics()
    assert _metric(metrics, "bridge_capture_lag_seconds") == 0
    assert _metric(metrics, "bridge_capture_position_timestamp_seconds") >= physical_ms(since) // 1000
    assert _metric(metrics, "bridge_capture_skipped_transactions_total") >= 1
    assert capture.stop() == 0


def test_file_positions_resume_exactly_after_a_sigkill(
    cluster: Cluster, tmp_path: Path, unique_name: str, captures: list[CaptureProcess]
) -> None:
    """``position = "file"``: the journal holds binlog file and offset (no GTID used); a capture
    SIGKILLed between transactions resumes there, without losing or repeating one (the model
    refuses an insert over a live key)."""
    db = unique_name
    capture, since = _capture_t(cluster, tmp_path, db, captures, extra='position = "file"')
    cluster.sql(db, "INSERT INTO t VALUES (3, 3)", "UPDATE t SET v = 20 WHERE id = 2")
    capture.wait_caught_up()
    position = capture.status()["position"]
    assert position["mode"] == "file" and position["file"] and position["offset"] > 0
    capture.kill()
    cluster.sql(db, "FLUSH BINARY LOGS", "INSERT INTO t VALUES (4, 4)", "DELETE FROM t WHERE id = 1")
    capture.start()
    cluster.sql(db, "UPDATE t SET v = 30 WHERE id = 3")
    capture.wait_caught_up()
    assert capture.status()["position"]["file"] > position["file"]  # followed the rotation
    model, _ = replay(cluster.meta_addr, [cluster.pump], since)
    assert model_rows(model, db, "t") == source_rows(cluster.source, db, "t")
    assert sorted(model_rows(model, db, "t")) == [(2, 20), (3, 30), (4, 4)]
    assert capture.stop() == 0
