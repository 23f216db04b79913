"""Schema fidelity end to end (issue 19): DDL that computes values gives the same values downstream.

One pipeline for every case: the writer on a MariaDB upstream database of its own, one pump, a
drainer with the mysql sink (into the private downstream MariaDB, ``downstream_mysql``) and the
kafka sink; ``consume --apply`` of the Kafka topics into a second private MariaDB and into a SQLite
directory are two more downstreams. Each case is a table with rows, then an ALTER, then an update
of the rows; at the end the downstream data (``bridge.apps.diff``) and ``information_schema``
(columns: type, default, nullability, extra, generation expression, comment, charset and
collation; index prefixes; table comment; partitioning) must equal the upstream's.

Phase 1 holds the cases SQLite can express too (generated columns over integer arithmetic, an
expression default over columns, CURRENT_TIMESTAMP(6) and NOW() defaults added to tables with rows,
ON UPDATE). Its end is a timestamp ``t1``: ``consume --apply --until-ts t1`` builds the SQLite
downstream, whose tables phase 2 leaves alone. Phase 2 holds what only MariaDB can recreate (NOW()
inside a larger default expression, a string-valued generated column, comments, partitioning, index
prefixes, a per-column charset) and what the writer refuses before it runs (RAND(), UUID()).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from bridge.apps.demo.cluster import Cluster, ClusterSpec, resolver_for
from bridge.apps.diff import diff
from bridge.dsn import Dsn, parse_dsn
from bridge.producer import TxnWriter, open_upstream
from bridge.producer.errors import UnsupportedSchema
from bridge.producer.mysql import create_database
from bridge.pumpclient import PumpsClient
from tests.e2e.test_pipeline import mysql_text, mysql_upstream
from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import free_port

pytestmark = [pytest.mark.mysql, pytest.mark.kafka, pytest.mark.timeout(300)]

__all__ = ["mysql_upstream"]  # a fixture of tests/e2e/test_pipeline.py, used here

HANG_GUARD = 120.0
PHASE_1 = ("gen", "dflt", "clock")
PHASE_2 = ("wide", "parts")
COLUMNS_SQL = (
    "SELECT TABLE_NAME, ORDINAL_POSITION, COLUMN_NAME, COLUMN_TYPE, COLUMN_DEFAULT, IS_NULLABLE, EXTRA, "
    "GENERATION_EXPRESSION, COLUMN_COMMENT, CHARACTER_SET_NAME, COLLATION_NAME "
    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN %s "
    "ORDER BY TABLE_NAME, ORDINAL_POSITION"
)
INDEXES_SQL = (
    "SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, SUB_PART, NON_UNIQUE "
    "FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s AND TABLE_NAME IN %s "
    "ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX"
)
TABLES_SQL = (
    "SELECT t.TABLE_NAME, t.TABLE_COMMENT, t.TABLE_COLLATION, p.PARTITION_NAME, p.PARTITION_METHOD, "
    "p.PARTITION_EXPRESSION FROM information_schema.TABLES t LEFT JOIN information_schema.PARTITIONS p "
    "ON p.TABLE_SCHEMA = t.TABLE_SCHEMA AND p.TABLE_NAME = t.TABLE_NAME "
    "WHERE t.TABLE_SCHEMA = %s AND t.TABLE_NAME IN %s ORDER BY t.TABLE_NAME, p.PARTITION_NAME"
)


def query(host: str, port: int, user: str, password: str, sql: str, params: Any = None) -> list[Any]:
    conn = pymysql.connect(host=host, port=port, user=user, password=password)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
    finally:
        conn.close()


def definitions(dsn: Dsn, tables: tuple[str, ...]) -> dict[str, list[Any]]:
    """What information_schema says about ``tables`` of ``dsn``'s database."""
    where = (dsn.host, dsn.port, dsn.user, dsn.password or "")
    return {
        name: query(*where, sql, (dsn.database, tables))
        for name, sql in (("columns", COLUMNS_SQL), ("indexes", INDEXES_SQL), ("tables", TABLES_SQL))
    }


def assert_same_definitions(up: Dsn, down: Dsn, tables: tuple[str, ...]) -> dict[str, list[Any]]:
    upstream, downstream = definitions(up, tables), definitions(down, tables)
    for part in ("columns", "indexes", "tables"):
        assert downstream[part] == upstream[part], part
    return upstream


def assert_equal_data(upstream: str, downstream: str, tables: tuple[str, ...]) -> None:
    report = diff(upstream, downstream, tables=list(tables))
    assert {t.name.split(".", 1)[1] for t in report.tables} == set(tables), report.lines()
    assert report.equal, "\n".join(report.lines())


@pytest.fixture
def cluster(
    tmp_path: Path,
    mysql_upstream: Dsn,
    downstream_mysql: MariaDBInstance,
    kafka_bootstrap: str,
    unique_name: str,
) -> Iterator[Cluster]:
    """meta, one pump, a drainer with the mysql sink (downstream server) and the kafka sink."""
    create_database(mysql_upstream)
    mysql_sink = {
        "dsn": downstream_mysql.dsn,
        "progress-schema": f"ckpt_{unique_name}",
        "safe-mode-duration": "0s",
    }
    kafka = {"bootstrap-servers": kafka_bootstrap, "prefix": unique_name, "resolved-interval": "300ms"}
    spec = ClusterSpec(
        tmp_path / "cluster",
        pumps=1,
        sinks=("mysql", "kafka"),
        resolver=resolver_for(mysql_text(mysql_upstream)),
        drainer_settings={"sink": {"mysql": mysql_sink, "kafka": kafka}, "resolved-interval": "300ms"},
    )
    running = Cluster(spec)
    try:
        running.start()
        yield running
    finally:
        running.stop()
        downstream_mysql.drop_database(mysql_upstream.database)
        downstream_mysql.drop_database(f"ckpt_{unique_name}")


@pytest.fixture
def apply_target(tmp_path: Path) -> Iterator[MariaDBInstance]:
    """A private MariaDB for ``consume --apply`` (the downstream one holds the drainer's copy)."""
    server = MariaDBInstance(tmp_path / "apply-mariadb", free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def consume_apply(bootstrap: str, prefix: str, target: str, until_ts: int) -> None:
    argv = [sys.executable, "-m", "bridge.cli", "consume", "--bootstrap-servers", bootstrap]
    argv += ["--prefix", prefix, "--apply", target, "--until-ts", str(until_ts), "--idle-timeout", "60"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD, check=False)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-4000:]}"


def run_phase_1(writer: TxnWriter) -> None:
    rows = [{"id": i, "a": i} for i in (1, 2, 3)]
    for table in PHASE_1:
        writer.ddl(f"CREATE TABLE {table} (id INT NOT NULL PRIMARY KEY, a INT NOT NULL)")
        with writer.transaction() as txn:
            txn.insert_many(table, rows)
    # generated columns added to rows, then their expression changed: every existing value moves
    writer.ddl("ALTER TABLE gen ADD COLUMN g INT AS (a * 10) VIRTUAL, ADD COLUMN s BIGINT AS (a + 1) STORED")
    writer.ddl("ALTER TABLE gen MODIFY g INT AS (a * 100) VIRTUAL")
    # an expression default over a column: existing rows read 1001.. upstream
    writer.ddl("ALTER TABLE dflt ADD COLUMN d INT DEFAULT (a + 1000)")
    # time-dependent defaults on rows that exist: the DDL's session time, not the downstream's clock
    writer.ddl(
        "ALTER TABLE clock ADD COLUMN ts DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) "
        "ON UPDATE CURRENT_TIMESTAMP(6), ADD COLUMN seen DATETIME DEFAULT (NOW())"
    )
    with writer.transaction() as txn:
        for table in PHASE_1:
            txn.update(table, {"id": 2}, {"a": 20})
            txn.insert(table, {"id": 4, "a": 4})
            txn.delete(table, {"id": 3})


def run_phase_2(writer: TxnWriter) -> None:
    writer.ddl(
        "CREATE TABLE wide (id INT NOT NULL PRIMARY KEY, a INT NOT NULL, "
        "c VARCHAR(20) CHARACTER SET latin1 NOT NULL, KEY by_c (c(3))) COMMENT 'wide rows'"
    )
    writer.ddl(
        "CREATE TABLE parts (id INT NOT NULL, a INT NOT NULL, PRIMARY KEY (id)) "
        "PARTITION BY HASH (id) PARTITIONS 2"
    )
    with writer.transaction() as txn:
        txn.insert_many("wide", [{"id": i, "a": i, "c": f"name-{i}"} for i in (1, 2, 3)])
        txn.insert_many("parts", [{"id": i, "a": i} for i in (1, 2, 3)])
    writer.ddl(
        "ALTER TABLE wide ADD COLUMN due DATETIME DEFAULT (NOW() + INTERVAL 1 DAY) COMMENT 'a day on', "
        "ADD COLUMN label VARCHAR(40) AS (CONCAT(c, ':', a)) STORED, COMMENT 'wider rows'"
    )
    writer.ddl("ALTER TABLE parts PARTITION BY HASH (id) PARTITIONS 3")
    for refused in (
        "ALTER TABLE wide ADD COLUMN r DOUBLE DEFAULT (RAND())",
        "ALTER TABLE wide ADD COLUMN u CHAR(36) DEFAULT (UUID())",
    ):
        with pytest.raises(UnsupportedSchema, match="refused before it ran"):
            writer.ddl(refused)
    with writer.transaction() as txn:
        txn.update("wide", {"id": 1}, {"a": 10, "c": "renamed"})
        txn.update("parts", {"id": 2}, {"a": 200})


def sqlite_columns(target: Path, db: str, table: str) -> list[tuple[Any, ...]]:
    """(name, declared type, hidden) per column: hidden 2 = VIRTUAL generated, 3 = STORED."""
    conn = sqlite3.connect(target / f"{db}.db")
    try:
        return [(r[1], r[2], r[6]) for r in conn.execute(f"PRAGMA table_xinfo('{table}')")]
    finally:
        conn.close()


def test_computed_columns_defaults_and_definitions_reach_mariadb_and_sqlite(
    cluster: Cluster, mysql_upstream: Dsn, downstream_mysql: MariaDBInstance, kafka_bootstrap: str,
    unique_name: str, tmp_path: Path, apply_target: MariaDBInstance,
) -> None:  # fmt: skip
    upstream = mysql_text(mysql_upstream)
    with PumpsClient(cluster.meta_addr) as client:
        writer = TxnWriter(open_upstream(mysql_upstream), client)
        try:
            run_phase_1(writer)
            t1 = cluster.timestamp()
            run_phase_2(writer)
        finally:
            writer.close()
    final_ts = cluster.timestamp()
    cluster.wait_caught_up(final_ts, timeout=HANG_GUARD)

    # MariaDB downstream: the same rows and the same table definitions
    down = parse_dsn(downstream_mysql.dsn).with_database(mysql_upstream.database)
    tables = PHASE_1 + PHASE_2
    assert_equal_data(upstream, mysql_text(down), tables)
    seen = assert_same_definitions(mysql_upstream, down, tables)
    extra = {(r[0], r[2]): (r[4], r[6], r[7]) for r in seen["columns"]}
    assert extra["gen", "g"] == ("NULL", "VIRTUAL GENERATED", "`a` * 100")
    assert extra["gen", "s"] == ("NULL", "STORED GENERATED", "`a` + 1")
    assert extra["clock", "ts"] == ("current_timestamp(6)", "on update current_timestamp(6)", None)
    assert extra["wide", "due"][0] == "(current_timestamp() + interval 1 day)"
    assert {r[2] for r in seen["columns"] if r[0] == "wide"} == {"id", "a", "c", "due", "label"}
    assert {(r[0], r[4]) for r in seen["tables"]} >= {("parts", "HASH")}
    assert len([r for r in seen["tables"] if r[0] == "parts"]) == 3

    # MariaDB through Kafka and consume --apply: the same again
    consume_apply(kafka_bootstrap, unique_name, apply_target.dsn, final_ts)
    applied = parse_dsn(apply_target.dsn).with_database(mysql_upstream.database)
    assert_equal_data(upstream, mysql_text(applied), tables)
    assert_same_definitions(mysql_upstream, applied, tables)

    # SQLite downstream through Kafka and consume --apply, as of the end of phase 1
    target = tmp_path / "replica"
    consume_apply(kafka_bootstrap, unique_name, f"sqlite://{target}", t1)
    assert_equal_data(upstream, f"sqlite://{target}", PHASE_1)
    gen = {name: hidden for name, _, hidden in sqlite_columns(target, mysql_upstream.database, "gen")}
    assert gen == {"id": 0, "a": 0, "g": 2, "s": 3}
