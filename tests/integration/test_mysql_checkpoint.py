"""MySQLCheckpoint against the real MariaDB: round trip, consistent flag, clusters, failures.

Each test keeps its checkpoint table in a database of its own (dropped afterwards).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from bridge.dsn import parse_dsn
from bridge.errors import ConfigError
from drainer.checkpoint import CheckpointError, CheckpointState, RetriableCheckpointError, build_checkpoint
from drainer.checkpoint.mysql import MySQLCheckpoint
from tests.support.process import free_port

pytestmark = pytest.mark.mysql

MYSQL_DSN_ENV = "BRIDGE_TEST_MYSQL_DSN"
DEFAULT_MYSQL_DSN = "mysql://root@127.0.0.1:3306/"


@pytest.fixture
def server_dsn() -> str:
    return os.environ.get(MYSQL_DSN_ENV, DEFAULT_MYSQL_DSN)


@pytest.fixture
def schema(server_dsn: str, unique_name: str) -> Iterator[str]:
    name = f"ck_{unique_name}"
    yield name
    dsn = parse_dsn(server_dsn)
    conn = pymysql.connect(host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


def open_checkpoint(server_dsn: str, schema: str, cluster_id: int, tmp_path: Path) -> MySQLCheckpoint:
    table = {"type": "mysql", "dsn": server_dsn, "schema": schema}
    checkpoint = build_checkpoint(table, tmp_path, cluster_id)
    assert isinstance(checkpoint, MySQLCheckpoint)
    return checkpoint


def query(server_dsn: str, sql: str) -> list[tuple[object, ...]]:
    dsn = parse_dsn(server_dsn)
    conn = pymysql.connect(host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
            return list(cursor.fetchall())
    finally:
        conn.close()


def test_round_trip_creates_the_table_and_replaces_the_row(
    server_dsn: str, schema: str, tmp_path: Path
) -> None:
    checkpoint = open_checkpoint(server_dsn, schema, 7001, tmp_path)
    try:
        assert checkpoint.load() is None  # creates database and table, no row yet
        snapshot = bytes(range(256)) * 4000  # ~1 MB of binary, every byte value
        checkpoint.save(CheckpointState(425_000_000_000_000_001, snapshot, consistent=False))
        assert checkpoint.load() == CheckpointState(425_000_000_000_000_001, snapshot, False)
        checkpoint.save(CheckpointState(425_000_000_000_000_002, b"s2", consistent=True))
        assert checkpoint.load() == CheckpointState(425_000_000_000_000_002, b"s2", True)
    finally:
        checkpoint.close()
    rows = query(server_dsn, f"SELECT cluster_id, commit_ts, consistent FROM `{schema}`.`checkpoint`")
    assert rows == [(7001, 425_000_000_000_000_002, 1)]
    columns = query(server_dsn, f"SHOW COLUMNS FROM `{schema}`.`checkpoint`")
    assert [c[0] for c in columns] == [
        "cluster_id",
        "commit_ts",
        "schema_snapshot",
        "consistent",
        "updated_at",
    ]


def test_consistent_flag_is_what_was_saved_last(server_dsn: str, schema: str, tmp_path: Path) -> None:
    checkpoint = open_checkpoint(server_dsn, schema, 1, tmp_path)
    try:
        checkpoint.save(CheckpointState(10, b"", consistent=True))
        checkpoint.save(CheckpointState(20, b"", consistent=False))
        state = checkpoint.load()
        assert state is not None and (state.commit_ts, state.consistent) == (20, False)
    finally:
        checkpoint.close()
    # A new process (a fresh connection) reads the same row.
    again = open_checkpoint(server_dsn, schema, 1, tmp_path)
    try:
        assert again.load() == CheckpointState(20, b"", False)
    finally:
        again.close()


def test_two_clusters_in_one_table_never_mix(server_dsn: str, schema: str, tmp_path: Path) -> None:
    first = open_checkpoint(server_dsn, schema, 18_446_744_073_709_551_615, tmp_path)  # largest unsigned
    second = open_checkpoint(server_dsn, schema, 42, tmp_path)
    try:
        first.save(CheckpointState(100, b"first", consistent=True))
        assert second.load() is None
        second.save(CheckpointState(200, b"second", consistent=False))
        assert first.load() == CheckpointState(100, b"first", True)
        assert second.load() == CheckpointState(200, b"second", False)
    finally:
        first.close()
        second.close()
    assert len(query(server_dsn, f"SELECT * FROM `{schema}`.`checkpoint`")) == 2


def test_custom_table_name(server_dsn: str, schema: str, tmp_path: Path) -> None:
    checkpoint = build_checkpoint(
        {"type": "mysql", "dsn": server_dsn, "schema": schema, "table": "drainer-ck"}, tmp_path, 3
    )
    try:
        checkpoint.save(CheckpointState(5))
        assert "drainer-ck" in checkpoint.describe()
    finally:
        checkpoint.close()
    assert query(server_dsn, f"SELECT cluster_id, commit_ts FROM `{schema}`.`drainer-ck`") == [(3, 5)]


def test_server_gone_mid_session_reconnects(server_dsn: str, schema: str, tmp_path: Path) -> None:
    checkpoint = open_checkpoint(server_dsn, schema, 9, tmp_path)
    try:
        checkpoint.save(CheckpointState(1))
        conn = checkpoint._conn
        assert conn is not None
        query(server_dsn, f"KILL {conn.thread_id()}")  # the server drops the drainer's connection
        checkpoint.save(CheckpointState(2))
        assert checkpoint.load() == CheckpointState(2)
    finally:
        checkpoint.close()


def test_unreachable_server_is_retriable(tmp_path: Path) -> None:
    dsn = f"mysql://root:secret-pw@127.0.0.1:{free_port()}/"
    checkpoint = build_checkpoint(
        {"type": "mysql", "dsn": dsn, "retry-timeout": "0.3s", "connect-timeout": "1s"}, tmp_path, 1
    )
    try:
        with pytest.raises(RetriableCheckpointError) as raised:
            checkpoint.save(CheckpointState(1))
        assert "2003" in str(raised.value)
        assert "secret-pw" not in str(raised.value) and "secret-pw" not in checkpoint.describe()
        with pytest.raises(RetriableCheckpointError):
            checkpoint.load()
    finally:
        checkpoint.close()


def test_a_table_of_another_shape_is_not_retriable(server_dsn: str, schema: str, tmp_path: Path) -> None:
    query(server_dsn, f"CREATE DATABASE `{schema}`")
    query(server_dsn, f"CREATE TABLE `{schema}`.`checkpoint` (id INT PRIMARY KEY)")
    checkpoint = open_checkpoint(server_dsn, schema, 1, tmp_path)
    try:
        with pytest.raises(CheckpointError) as raised:
            checkpoint.load()
        assert not raised.value.retriable
        assert f"{schema}.checkpoint" in str(raised.value)
    finally:
        checkpoint.close()


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({}, "checkpoint.dsn"),
        ({"dsn": "sqlite:///x.db"}, "checkpoint.dsn"),
        ({"dsn": DEFAULT_MYSQL_DSN, "schema": "a`b"}, "checkpoint.schema"),
        ({"dsn": DEFAULT_MYSQL_DSN, "table": ""}, "checkpoint.table"),
        ({"dsn": DEFAULT_MYSQL_DSN, "tabel": "x"}, "checkpoint.tabel"),
    ],
)
def test_bad_options_name_the_key(options: dict[str, str], key: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=key):
        build_checkpoint({"type": "mysql", **options}, tmp_path, 1)


def test_dsn_defaults_to_the_mysql_sinks() -> None:
    from drainer.config import config_from_dict

    sink = {"type": "mysql", "mysql": {"dsn": "mysql://bridge:pw@db.internal:3307/"}}
    config = config_from_dict({"checkpoint": {"type": "mysql"}, "sink": sink})
    assert config.checkpoint.table() == {"type": "mysql", "dsn": "mysql://bridge:pw@db.internal:3307/"}
    own = config_from_dict({"checkpoint": {"type": "mysql", "dsn": DEFAULT_MYSQL_DSN}, "sink": sink})
    assert own.checkpoint.options["dsn"] == DEFAULT_MYSQL_DSN
    # Without a mysql sink there is nothing to default to: the checkpoint asks for its dsn.
    lone = config_from_dict({"checkpoint": {"type": "mysql"}, "sink": {"type": "sqlite"}})
    with pytest.raises(ConfigError, match=r"checkpoint\.dsn: required"):
        build_checkpoint(lone.checkpoint.table(), Path("."), 1)


def test_a_drainer_keeps_its_checkpoint_downstream(tmp_path: Path, server_dsn: str, schema: str) -> None:
    """A real drainer process with ``[checkpoint] type = "mysql"``: consistent = 0 while it
    runs, 1 after SIGTERM (a clean stop: no warning), and the next start resumes from the row."""
    from tests.support.drainer_cluster import DrainerProcess, Producer, table
    from tests.support.process import wait_until
    from tests.support.pump_server import PumpProcess, start_meta

    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr, node_id="pump-1")
    extra = f'[checkpoint]\ntype = "mysql"\ndsn = "{server_dsn}"\nschema = "{schema}"\n'
    drainer = DrainerProcess(tmp_path, meta_addr, extra_config=extra)
    producer: Producer | None = None
    try:
        pump.start()
        drainer.start()
        cluster_id = int(drainer.status()["cluster_id"])
        producer = Producer(meta_addr)
        producer.create(table("orders", 1))
        written = producer.txn([("insert", "orders", None, (1, "a"))])

        def row() -> tuple[int, int] | None:
            rows = query(
                server_dsn,
                f"SELECT commit_ts, consistent FROM `{schema}`.`checkpoint` WHERE cluster_id = {cluster_id}",
            )
            return (int(rows[0][0]), int(rows[0][1])) if rows else None  # type: ignore[call-overload]

        wait_until(lambda: (row() or (0, 0))[0] >= written.commit_ts, timeout=60, what="the checkpoint row")
        assert (row() or (0, 1))[1] == 0  # running: not consistent
        assert drainer.stop() == 0
        warnings = [line for line in drainer.output.splitlines() if " WARNING " in line]
        assert not warnings, warnings  # the final save ran before the connection was shut down
        stopped = row()
        assert stopped is not None and stopped[0] >= written.commit_ts and stopped[1] == 1
        drainer.start()
        assert f"checkpoint in mysql table {schema}.checkpoint" in drainer.output
        assert f"resuming after commit_ts {stopped[0]} (clean stop)" in drainer.output
    finally:
        if producer is not None:
            producer.close()
        drainer.kill()
        pump.kill()
        meta.kill()
