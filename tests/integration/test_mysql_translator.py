"""The MySQL dialect against real MariaDB: every type lands as a direct insert would put it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pymysql
import pytest

from bridge.apps.diff import diff
from bridge.dsn import Dsn, parse_dsn
from bridge.proto import row_pb2
from bridge.sink.events import RowChange
from drainer.sinks.sql.mysql import MySQLDialect
from drainer.sinks.sql.sql import Translator
from tests.support import all_types
from tests.support.binlog_events import table_schema

pytestmark = pytest.mark.mysql
T = row_pb2.ColumnType


@pytest.fixture
def server(unique_name: str) -> Iterator[tuple[Dsn, Any]]:
    dsn = parse_dsn(os.environ.get("BRIDGE_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/"))
    conn = pymysql.connect(
        host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password, autocommit=True
    )
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        for suffix in ("direct", "translated"):
            cur.execute(f"CREATE DATABASE `{unique_name}_{suffix}`")
    try:
        yield dsn, conn
    finally:
        with conn.cursor() as cur:
            for suffix in ("direct", "translated"):
                cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}_{suffix}`")
        conn.close()


def run(conn: Any, translator: Translator, changes: list[RowChange], safe: bool = False) -> None:
    with conn.cursor() as cur:
        for change in changes:
            for statement, params in translator.statements(change, safe):
                cur.execute(statement, params)


def test_every_type_and_change_kind_matches_direct_statements(
    server: tuple[Dsn, Any], unique_name: str
) -> None:
    dsn, conn = server
    direct, translated = f"{unique_name}_direct", f"{unique_name}_translated"
    schema = all_types.schema(translated)
    first, second, third = all_types.ROWS
    moved = (10, *first[1:])
    with conn.cursor() as cur:
        for db in (direct, translated):
            cur.execute(all_types.mysql_ddl(db))
        marks = ", ".join(["%s"] * len(all_types.COLUMNS))
        for row in (moved, third):
            cur.execute(
                f"INSERT INTO `{direct}`.all_types VALUES ({marks})", [all_types.mysql_value(v) for v in row]
            )
    changes = [
        RowChange("insert", schema, None, first),
        RowChange("insert", schema, None, second),
        RowChange("insert", schema, None, third),
        RowChange("update", schema, first, moved),
        RowChange("delete", schema, second, None),
    ]
    translator = Translator(MySQLDialect())
    run(conn, translator, changes)
    run(conn, translator, changes, safe=True)  # a replay in safe mode changes nothing
    server_dsn = f"mysql://{dsn.user}@{dsn.host}:{dsn.port}"
    report = diff(f"{server_dsn}/{direct}", f"{server_dsn}/{translated}")
    assert report.equal and report.rows == 2, report.lines()


def test_keyless_rows_are_changed_one_at_a_time_null_safely(
    server: tuple[Dsn, Any], unique_name: str
) -> None:
    _, conn = server
    db = f"{unique_name}_translated"
    schema = table_schema(db, "n", [("a", T.INT), ("b", T.VARCHAR)])
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.n (a INT, b VARCHAR(10))")
    rows = [(1, "a"), (1, "a"), (None, "b")]
    run(
        conn,
        Translator(MySQLDialect()),
        [RowChange("insert", schema, None, r) for r in rows]
        + [RowChange("update", schema, (1, "a"), (2, "a")), RowChange("delete", schema, (None, "b"), None)],
    )
    with conn.cursor() as cur:
        cur.execute(f"SELECT a, b FROM `{db}`.n ORDER BY a")
        assert cur.fetchall() == ((1, "a"), (2, "a"))
