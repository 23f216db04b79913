"""``binlog-bridge diff``: equal tables, each kind of difference, keyless tables, SQLite against MariaDB."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from bridge.apps.diff import diff
from bridge.dsn import Dsn, parse_dsn
from bridge.sink.contract import SinkContext
from drainer.sinks.sqlite.sink import SQLiteSink
from tests.support import all_types
from tests.support.binlog_events import EventStream

ROOT = Path(__file__).resolve().parents[2]
DSN_ENV = "BRIDGE_TEST_MYSQL_DSN"
DEFAULT_DSN = "mysql://root@127.0.0.1:3306/"


def make_db(path: Path, rows: int = 2000, keyless: list[tuple[int, str]] | None = None) -> str:
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR(20), price DECIMAL(10,2), at DATETIME(3))"
    )
    conn.executemany(
        "INSERT INTO t VALUES (?, ?, ?, ?)",
        [(i, f"n{i}", f"{i}.50", f"2024-01-01 00:00:{i % 60:02d}.5") for i in range(rows)],
    )
    conn.execute("CREATE TABLE nokey (a INT, b TEXT)")
    conn.executemany("INSERT INTO nokey VALUES (?, ?)", keyless or [(1, "a"), (1, "a"), (2, "b")])
    conn.execute("CREATE TABLE bridge_txn_status (start_ts INTEGER PRIMARY KEY, commit_ts INTEGER)")
    conn.execute("INSERT INTO bridge_txn_status VALUES (1, 2)")
    conn.commit()
    conn.close()
    return f"sqlite://{path}"


def execute(dsn: str, *statements: str) -> None:
    conn = sqlite3.connect(dsn.removeprefix("sqlite://"))
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def test_equal_tables_despite_storage_differences(tmp_path: Path) -> None:
    up = make_db(tmp_path / "up.db")
    down = make_db(tmp_path / "down.db")
    # Same values, other storage: REAL vs text decimals, fewer fraction digits, internal tables differ.
    execute(down, "UPDATE t SET price = price + 0.0, at = substr(at, 1, 21)", "DELETE FROM bridge_txn_status")
    report = diff(up, down, chunk_size=100)
    assert report.equal, report.lines()
    assert [t.name for t in report.tables] == ["main.nokey", "main.t"]
    assert report.tables[1].chunks > 10 and report.rows == 2003


def test_missing_extra_and_different_rows_are_named_by_key(tmp_path: Path) -> None:
    up = make_db(tmp_path / "up.db")
    down = make_db(tmp_path / "down.db")
    execute(
        down,
        "DELETE FROM t WHERE id = 5",
        "INSERT INTO t VALUES (5000, 'new', 1, NULL)",
        "UPDATE t SET name = 'changed', price = 9.99 WHERE id = 1500",
    )
    report = diff(up, down, ["t"], chunk_size=100)
    (table,) = report.tables
    assert not report.equal
    assert (table.missing, table.extra, table.different) == (1, 1, 1)
    assert table.differing_chunks == 3 and table.upstream_rows == table.downstream_rows == 2000
    text = "\n".join(report.lines())
    assert "missing downstream: id=5" in text and "extra downstream: id=5000" in text
    assert (
        "different: id=1500: name: 'n1500' upstream, 'changed' downstream; price: '1500.5' upstream" in text
    )


def test_tables_without_keys_compare_as_multisets(tmp_path: Path) -> None:
    up = make_db(tmp_path / "up.db", keyless=[(1, "a"), (1, "a"), (2, "b")])
    same = make_db(tmp_path / "same.db", keyless=[(2, "b"), (1, "a"), (1, "a")])
    assert diff(up, same, ["nokey"]).equal
    down = make_db(tmp_path / "down.db", keyless=[(1, "a"), (2, "b"), (2, "b")])
    (table,) = diff(up, down, ["main.nokey"]).tables
    assert (table.missing, table.extra) == (1, 1)
    assert "missing downstream (1x, no key): a=1, b='a'" in table.examples


def test_text_keys_and_structural_differences(tmp_path: Path) -> None:
    up, down = f"sqlite://{tmp_path}/up.db", f"sqlite://{tmp_path}/down.db"
    for dsn in (up, down):
        execute(dsn, "CREATE TABLE s (code VARCHAR(10) NOT NULL, v INT, UNIQUE (code))")
        execute(dsn, *[f"INSERT INTO s VALUES ('k{i:03d}', {i})" for i in range(300)])
    execute(up, "CREATE TABLE only_up (a INT)", "ALTER TABLE s ADD COLUMN extra INT")
    execute(down, "UPDATE s SET v = -1 WHERE code = 'k123'")
    report = diff(up, down, chunk_size=50)
    lines = "\n".join(report.lines())
    assert "main.only_up: DIFFERENT: the table exists only upstream (0 rows)" in lines
    assert "column extra is missing downstream" in lines
    assert "different: code='k123': v: 123 upstream, -1 downstream" in lines


def test_command_exit_status_and_output(tmp_path: Path) -> None:
    up = make_db(tmp_path / "up.db", rows=10)
    down = make_db(tmp_path / "down.db", rows=10)
    command = [sys.executable, "-m", "bridge.cli", "diff", "--upstream", up, "--downstream", down]
    equal = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert equal.returncode == 0, equal.stderr
    assert (
        equal.stdout.splitlines()[-1].startswith(f"diff sqlite:{tmp_path}/up.db -> ")
        and ": equal (" in equal.stdout
    )
    execute(down, "DELETE FROM t WHERE id = 3")
    differs = subprocess.run([*command, "--tables", "t", "--quiet"], cwd=ROOT, capture_output=True, text=True)
    assert differs.returncode == 1 and "missing downstream: id=3" in differs.stdout
    bad = subprocess.run([*command[:-1], "postgres://x"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown scheme" in bad.stderr


@pytest.fixture
def mariadb(unique_name: str) -> Iterator[Dsn]:
    server = parse_dsn(os.environ.get(DSN_ENV, DEFAULT_DSN))
    conn = pymysql.connect(host=server.host, port=server.port, user=server.user, password=server.password)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique_name}`")
    try:
        yield server.with_database(unique_name)
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}`")
        conn.close()


@pytest.mark.mysql
def test_mariadb_upstream_equals_the_sqlite_sink_for_every_type(mariadb: Dsn, tmp_path: Path) -> None:
    db = mariadb.database
    conn = pymysql.connect(host=mariadb.host, port=mariadb.port, user=mariadb.user, password=mariadb.password)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(all_types.mysql_ddl(db))
        marks = ", ".join(["%s"] * len(all_types.COLUMNS))
        cur.executemany(
            f"INSERT INTO `{db}`.all_types VALUES ({marks})",
            [tuple(all_types.mysql_value(v) for v in row) for row in all_types.ROWS],
        )
    conn.commit()
    stream = EventStream()
    sink = SQLiteSink({"path": str(tmp_path)}, tmp_path)
    sink.open(SinkContext())
    sink.write([stream.create(all_types.schema(db)), stream.inserts(f"{db}.all_types", all_types.ROWS)])
    sink.flush()
    sink.close()
    upstream, downstream = (
        f"mysql://{mariadb.user}@{mariadb.host}:{mariadb.port}/{db}",
        f"sqlite://{tmp_path}",
    )
    report = diff(upstream, downstream)
    assert report.equal and report.rows == 3, report.lines()
    with conn.cursor() as cur:
        cur.execute(f"UPDATE `{db}`.all_types SET `dec` = `dec` + 0.000001, ts = NULL WHERE id = 1")
    conn.commit()
    conn.close()
    (table,) = diff(upstream, downstream).tables
    assert table.different == 1
    assert "dec: '-12345678901234.123455' upstream, '-12345678901234.123456' downstream" in table.examples[0]
