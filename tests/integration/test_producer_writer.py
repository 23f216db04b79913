"""The transactional writer against real services: `binlog-bridge meta`, a stand-in pump
(tests/support/standin_pump.py, which records every binlog it takes and streams them all back
through PullBinlogs) and both upstreams: SQLite files and MariaDB (marker ``mysql``; each test
makes its own database and drops it).

The helpers here (``Services``, ``upstream_dsn``, ``admin``) are shared by the other producer
test modules.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import grpc
import pymysql
import pytest

from bridge import binlog as B
from bridge.dsn import Dsn, parse_dsn
from bridge.producer import (
    CommitFailed,
    PrewriteFailed,
    ProducerError,
    Transaction,
    TxnWriter,
    UnknownTable,
    UpstreamConflict,
    open_upstream,
)
from bridge.producer.mysql import MySQLSession, MySQLUpstream
from bridge.proto import pump_pb2, pump_pb2_grpc
from bridge.pumpclient import PumpClientConfig, PumpsClient
from bridge.rowcodec import RowCodec
from tests.support.process import ChildProcess, bridge_cli, free_port

ROOT = Path(__file__).resolve().parents[2]
MYSQL_DSN_ENV = "BRIDGE_TEST_MYSQL_DSN"
DEFAULT_MYSQL_DSN = "mysql://root@127.0.0.1:3306/"

pytestmark = pytest.mark.timeout(120)


def start_meta(workdir: Path) -> tuple[ChildProcess, str]:
    addr = f"127.0.0.1:{free_port()}"
    child = ChildProcess(
        bridge_cli("meta", "--data-dir", str(workdir / "meta"), "--addr", addr), workdir / "meta.out"
    )
    child.wait_for_line("meta ready")
    return child, addr


@dataclass
class Services:
    """A meta service, one stand-in pump and a pump client connected to them."""

    meta: ChildProcess
    meta_addr: str
    pump: ChildProcess
    pump_addr: str
    pumps: PumpsClient

    @classmethod
    def start(cls, workdir: Path) -> Services:
        meta, meta_addr = start_meta(workdir)
        pump_addr = f"127.0.0.1:{free_port()}"
        argv = [
            sys.executable,
            "-m",
            "tests.support.standin_pump",
            "--meta",
            meta_addr,
            "--node-id",
            "pump-1",
        ]
        argv += ["--addr", pump_addr, "--log", str(workdir / "pump-1.binlogs")]
        pump = ChildProcess(argv, workdir / "pump-1.out", env={"PYTHONPATH": str(ROOT)})
        pump.wait_for_line("standin pump ready")
        pumps = PumpsClient(meta_addr, PumpClientConfig(write_timeout=10.0))
        pumps.start()
        return cls(meta, meta_addr, pump, pump_addr, pumps)

    def stop(self) -> None:
        self.pumps.close()
        self.pump.stop()
        self.meta.stop()

    def binlogs(self, *start_ts: int) -> list[B.Binlog]:
        """What the stand-in recorded, in arrival order; only the given transactions when named."""
        with grpc.insecure_channel(self.pump_addr) as channel:
            stub = pump_pb2_grpc.PumpStub(channel)
            request = pump_pb2.PullBinlogReq(clusterID=self.pumps.cluster_id)
            recorded = [B.Binlog.FromString(r.entity.payload) for r in stub.PullBinlogs(request)]
        return [b for b in recorded if not start_ts or b.start_ts in start_ts]


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    started = Services.start(tmp_path_factory.mktemp("producer"))
    try:
        yield started
    finally:
        started.stop()


def server_dsn() -> Dsn:
    return parse_dsn(os.environ.get(MYSQL_DSN_ENV, DEFAULT_MYSQL_DSN))


def admin(dsn: Dsn) -> Any:
    return pymysql.connect(
        host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password, autocommit=True
    )


@pytest.fixture(params=["sqlite", pytest.param("mysql", marks=pytest.mark.mysql)])
def upstream_dsn(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> Iterator[Dsn]:
    """A fresh upstream of each kind: a SQLite file, or a MariaDB database dropped afterwards."""
    if request.param == "sqlite":
        yield parse_dsn(f"sqlite://{tmp_path / 'upstream.db'}")
        return
    dsn = server_dsn()
    conn = admin(dsn)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique_name}`")
    try:
        yield dsn.with_database(unique_name)
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}`")
        conn.close()


def dsn_text(dsn: Dsn) -> str:
    """The DSN as text with its password, for a child process."""
    if dsn.is_sqlite:
        return f"sqlite://{Path(dsn.path).resolve()}"
    auth = quote(dsn.user, safe="") + (f":{quote(dsn.password, safe='')}" if dsn.password else "")
    return f"mysql://{auth}@{dsn.host}:{dsn.port}/{dsn.database}"


def query(dsn: Dsn, sql: str) -> list[tuple[Any, ...]]:
    """Read the upstream directly, bypassing the writer."""
    if dsn.is_sqlite:
        with sqlite3.connect(dsn.path) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    conn = admin(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(f"USE `{dsn.database}`")
            cur.execute(sql)
            return [tuple(r) for r in cur.fetchall()]
    finally:
        conn.close()


@pytest.fixture
def writer(services: Services, upstream_dsn: Dsn) -> Iterator[TxnWriter]:
    made = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    try:
        yield made
    finally:
        made.close()


SEEDS_TABLE = "CREATE TABLE test (id INT NOT NULL PRIMARY KEY, name VARCHAR(24))"


def test_the_seeds_transaction(services: Services, writer: TxnWriter, upstream_dsn: Dsn) -> None:
    created = writer.ddl(SEEDS_TABLE)
    assert created is not None
    with writer.transaction() as txn:
        txn.insert("test", {"id": 1, "name": "a"})
        txn.insert("test", {"id": 2, "name": "b"})
        txn.update("test", {"id": 1}, {"name": "c"})
        txn.update("test", {"id": 2}, {"name": "d"})
        txn.delete("test", {"id": 2})
        txn.insert("test", {"id": 2, "name": "c"})

    prewrite, commit = services.binlogs(txn.start_ts)
    assert (prewrite.tp, commit.tp) == (B.BinlogType.Prewrite, B.BinlogType.Commit)
    assert commit.commit_ts == txn.commit_ts > txn.start_ts
    (mutation,) = B.read_prewrite_value(prewrite).mutations
    assert mutation.table_id == created.change.table_schema.table_id
    codec = RowCodec(created.change.table_schema)
    assert [codec.decode(r) for r in mutation.inserted_rows] == [(1, "a"), (2, "b"), (2, "c")]
    assert [codec.decode(r) for r in mutation.updated_rows] == [(1, "a"), (1, "c"), (2, "b"), (2, "d")]
    assert [codec.decode(r) for r in mutation.deleted_rows] == [(2, "d")]
    M = B.MutationType
    assert list(mutation.sequence) == [M.Insert, M.Insert, M.Update, M.Update, M.DeleteRow, M.Insert]
    assert query(upstream_dsn, "SELECT id, name FROM test ORDER BY id") == [(1, "c"), (2, "c")]


def test_status_row_is_written_in_the_same_transaction(
    services: Services, writer: TxnWriter, upstream_dsn: Dsn
) -> None:
    writer.ddl(SEEDS_TABLE)
    with writer.transaction() as txn:
        txn.insert("test", {"id": 7, "name": "x"})
    status = query(
        upstream_dsn, f"SELECT start_ts, commit_ts FROM bridge_txn_status WHERE start_ts = {txn.start_ts}"
    )
    assert status == [(txn.start_ts, txn.commit_ts)]
    assert [b.tp for b in services.binlogs(txn.start_ts)] == [B.BinlogType.Prewrite, B.BinlogType.Commit]


def test_an_exception_in_the_block_rolls_back_and_writes_no_binlog(
    services: Services, writer: TxnWriter, upstream_dsn: Dsn
) -> None:
    writer.ddl(SEEDS_TABLE)
    with pytest.raises(KeyError), writer.transaction() as txn:
        txn.insert("test", {"id": 1, "name": "a"})
        raise KeyError("the application gives up")
    assert query(upstream_dsn, "SELECT COUNT(*) FROM test") == [(0,)]
    assert services.binlogs(txn.start_ts) == []


def test_a_failed_change_makes_the_transaction_roll_back(
    services: Services, writer: TxnWriter, upstream_dsn: Dsn
) -> None:
    writer.ddl(SEEDS_TABLE)
    with pytest.raises(ProducerError), writer.transaction() as txn:
        txn.insert("test", {"id": 1, "name": "a"})
        with pytest.raises(ProducerError):
            txn.insert("test", {"id": 1, "name": "duplicate"})
        txn.insert("test", {"id": 2, "name": "b"})  # refused: the transaction already failed
    assert query(upstream_dsn, "SELECT COUNT(*) FROM test") == [(0,)]
    assert services.binlogs(txn.start_ts) == []
    with pytest.raises(UnknownTable):
        writer.run(lambda t: t.insert("never_created", {"id": 1}))


def test_run_retries_a_retriable_error_and_gives_up_after_attempts(
    services: Services, writer: TxnWriter, upstream_dsn: Dsn
) -> None:
    writer.ddl(SEEDS_TABLE)
    started: list[int] = []

    def conflicts_twice(txn: Transaction) -> int:
        started.append(txn.start_ts)
        txn.insert("test", {"id": len(started), "name": "x"})
        if len(started) < 3:
            raise UpstreamConflict("deadlock found when trying to get lock")  # as the upstream reports it
        return txn.start_ts

    last = writer.run(conflicts_twice)
    assert started[-1] == last and len(started) == 3
    assert query(upstream_dsn, "SELECT id FROM test") == [(3,)]  # the failed attempts rolled back
    assert services.binlogs(*started[:2]) == []
    assert [b.tp for b in services.binlogs(last)] == [B.BinlogType.Prewrite, B.BinlogType.Commit]

    started.clear()

    def always_conflicts(txn: Transaction) -> None:
        started.append(txn.start_ts)
        raise UpstreamConflict("lock wait timeout exceeded")

    with pytest.raises(UpstreamConflict):
        writer.run(always_conflicts, attempts=2)
    assert len(started) == 2 and services.binlogs(*started) == []


def test_prewrite_failure_rolls_back_upstream(
    services: Services, writer: TxnWriter, upstream_dsn: Dsn, tmp_path: Path
) -> None:
    writer.ddl(SEEDS_TABLE)
    lonely_meta, lonely_addr = start_meta(tmp_path)  # a cluster without any pump
    try:
        with PumpsClient(lonely_addr, PumpClientConfig(write_timeout=0.3)) as no_pumps:
            stranded = TxnWriter(open_upstream(upstream_dsn), no_pumps)
            with pytest.raises(PrewriteFailed, match="no pump"), stranded.transaction() as txn:
                txn.insert("test", {"id": 1, "name": "a"})
            stranded.close()
    finally:
        lonely_meta.stop()
    assert query(upstream_dsn, "SELECT COUNT(*) FROM test") == [(0,)]
    assert query(upstream_dsn, f"SELECT COUNT(*) FROM bridge_txn_status WHERE start_ts = {txn.start_ts}") == [
        (0,)
    ]
    assert txn.commit_ts == 0


def test_sqlite_commit_failure_writes_a_rollback_binlog(services: Services, tmp_path: Path) -> None:
    dsn = parse_dsn(f"sqlite://{tmp_path / 'fk.db'}")
    writer = TxnWriter(open_upstream(dsn), services.pumps)
    writer.ddl("CREATE TABLE parent (id INT NOT NULL PRIMARY KEY)")
    writer.ddl(
        "CREATE TABLE child (id INT NOT NULL PRIMARY KEY, "
        "parent_id INT NOT NULL REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    # A deferred foreign key is checked at COMMIT: the statement succeeds, the COMMIT fails.
    with pytest.raises(CommitFailed, match="FOREIGN KEY"), writer.transaction() as txn:
        txn.insert("child", {"id": 1, "parent_id": 99})
    writer.close()
    tps = [b.tp for b in services.binlogs(txn.start_ts)]
    assert tps == [B.BinlogType.Prewrite, B.BinlogType.Rollback]
    assert query(dsn, "SELECT COUNT(*) FROM child") == [(0,)]
    assert query(dsn, f"SELECT COUNT(*) FROM bridge_txn_status WHERE start_ts = {txn.start_ts}") == [(0,)]


class KilledAtCommit(MySQLSession):
    """A real session whose connection is killed by the server just before its COMMIT."""

    def commit(self) -> None:
        conn = admin(server_dsn())
        with conn.cursor() as cur:
            cur.execute("KILL CONNECTION %s", [self.thread_id()])
        conn.close()
        super().commit()


class KillingUpstream(MySQLUpstream):
    kill_next = False

    def connect(self) -> MySQLSession:
        if not self.kill_next:
            return super().connect()
        self.kill_next = False
        return KilledAtCommit(self.dsn, 10.0)


@pytest.mark.mysql
def test_mysql_commit_lost_with_its_connection_is_resolved_from_the_status_table(
    services: Services, unique_name: str
) -> None:
    conn = admin(server_dsn())
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique_name}`")
    dsn = server_dsn().with_database(unique_name)
    try:
        upstream = KillingUpstream(dsn)
        writer = TxnWriter(upstream, services.pumps)
        writer.ddl(SEEDS_TABLE)
        writer.pool.close()  # the next transaction opens the killable session
        upstream.kill_next = True
        with pytest.raises(CommitFailed, match="did not commit"), writer.transaction() as txn:
            txn.insert("test", {"id": 1, "name": "a"})
        writer.close()
        assert [b.tp for b in services.binlogs(txn.start_ts)] == [
            B.BinlogType.Prewrite,
            B.BinlogType.Rollback,
        ]
        assert query(dsn, "SELECT COUNT(*) FROM test") == [(0,)]
        assert query(dsn, f"SELECT COUNT(*) FROM bridge_txn_status WHERE start_ts = {txn.start_ts}") == [(0,)]
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}`")
        conn.close()


def test_keyless_table_rows_are_captured_one_by_one(services: Services, writer: TxnWriter) -> None:
    created = writer.ddl("CREATE TABLE log (kind VARCHAR(8) NOT NULL, n INT NULL, at DATETIME(3) NULL)")
    assert created is not None
    row = {"kind": "a", "n": None, "at": None}
    with writer.transaction() as txn:
        txn.insert("log", row)
        txn.insert("log", row)  # identical rows are legal without a key
        txn.insert("log", {"kind": "b", "n": 1, "at": None})
        assert txn.update("log", {"kind": "a"}, {"n": 5}) == 2
        assert txn.delete("log", {"kind": "a", "n": 5}) == 2
    (mutation,) = B.read_prewrite_value(services.binlogs(txn.start_ts)[0]).mutations
    codec = RowCodec(created.change.table_schema)
    assert [codec.decode(r) for r in mutation.updated_rows] == [("a", None, None), ("a", 5, None)] * 2
    assert [codec.decode(r) for r in mutation.deleted_rows] == [("a", 5, None)] * 2
    assert writer.read("SELECT kind, n FROM log") == [("b", 1)]


def test_primary_key_change_and_auto_increment(
    services: Services, writer: TxnWriter, upstream_dsn: Dsn
) -> None:
    auto = "INTEGER PRIMARY KEY" if upstream_dsn.is_sqlite else "BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY"
    created = writer.ddl(f"CREATE TABLE item (id {auto}, label VARCHAR(10) NOT NULL DEFAULT 'new')")
    assert created is not None
    with writer.transaction() as txn:
        first = txn.insert("item", {})
        second = txn.insert("item", {"label": "two"})
        assert txn.update("item", {"id": first["id"]}, {"id": 100, "label": "moved"}) == 1
    assert (first["label"], second["id"] - first["id"]) == ("new", 1)
    (mutation,) = B.read_prewrite_value(services.binlogs(txn.start_ts)[0]).mutations
    codec = RowCodec(created.change.table_schema)
    assert [codec.decode(r) for r in mutation.updated_rows] == [(first["id"], "new"), (100, "moved")]
    assert query(upstream_dsn, "SELECT id, label FROM item ORDER BY id") == [
        (second["id"], "two"),
        (100, "moved"),
    ]


def test_insert_many_in_multi_row_statements(
    services: Services, writer: TxnWriter, upstream_dsn: Dsn
) -> None:
    created = writer.ddl(
        "CREATE TABLE bulk (id INT NOT NULL PRIMARY KEY, v VARCHAR(10) NULL, n INT NOT NULL DEFAULT 7)"
    )
    assert created is not None
    rows: list[dict[str, object]] = [{"id": i, "v": f"r{i}"} for i in range(1, 1201)]
    rows.append({"v": "reordered", "id": 1201})  # the same columns in another order
    rows.append({"id": 5000, "n": 1})  # other columns: a batch of its own
    with writer.transaction() as txn:
        assert txn.insert_many("bulk", rows, batch=500) == 1202
        assert txn.rows == 1202
    (mutation,) = B.read_prewrite_value(services.binlogs(txn.start_ts)[0]).mutations
    codec = RowCodec(created.change.table_schema)
    expected = [(i, f"r{i}", 7) for i in range(1, 1201)] + [(1201, "reordered", 7), (5000, None, 1)]
    assert sorted(codec.decode(r) for r in mutation.inserted_rows) == expected
    assert list(mutation.sequence) == [B.MutationType.Insert] * 1202
    assert query(upstream_dsn, "SELECT COUNT(*), SUM(n) FROM bulk") == [(1202, 1201 * 7 + 1)]
