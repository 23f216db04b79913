"""Type mapping round trips: values written through the writer, read back by the database, carried
in the Prewrite and decoded with the DDL binlog's schema — for MariaDB (marker ``mysql``) and SQLite.

Every row is also deleted again through a table *without* a key, whose rows the writer locates
by their full image: each value must survive the trip back into a WHERE clause as well. Each
upstream runs twice: with RETURNING (MariaDB 10.5+, SQLite 3.35+) and without (what MySQL gets).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from bridge import binlog as B
from bridge.dsn import Dsn
from bridge.producer import TxnWriter, open_upstream
from bridge.proto import row_pb2
from bridge.rowcodec import MySQLDate, RowCodec
from tests.integration import test_producer_writer as shared
from tests.integration.test_producer_writer import Services, admin, server_dsn

services = shared.services  # the fixture, shared with the writer tests
T = row_pb2.ColumnType
UTC8 = timezone(timedelta(hours=8))

MYSQL_COLUMNS = """
    ti TINYINT NULL, tiu TINYINT UNSIGNED NULL, si SMALLINT NULL, mi MEDIUMINT UNSIGNED NULL,
    i INT NULL, bi BIGINT NULL, biu BIGINT UNSIGNED NULL, dc DECIMAL(20,6) NULL, db DOUBLE NULL,
    bt BIT(12) NULL, yr YEAR NULL, dt DATE NULL, dtt DATETIME(6) NULL, ts TIMESTAMP(3) NULL, tm TIME(2) NULL,
    ch CHAR(4) NULL, vc VARCHAR(20) NULL, tx TEXT NULL, bn BINARY(3) NULL, vb VARBINARY(8) NULL, bl BLOB NULL,
    js JSON NULL, en ENUM('a','b b','c''q') NULL, st SET('x','y','z') NULL
"""
MYSQL_TYPES = {
    "ti": (T.TINYINT, False), "tiu": (T.TINYINT, True), "si": (T.SMALLINT, False), "mi": (T.MEDIUMINT, True),
    "i": (T.INT, False), "bi": (T.BIGINT, False), "biu": (T.BIGINT, True), "dc": (T.DECIMAL, False),
    "db": (T.DOUBLE, False), "bt": (T.BIT, False), "yr": (T.YEAR, False), "dt": (T.DATE, False),
    "dtt": (T.DATETIME, False), "ts": (T.TIMESTAMP, False), "tm": (T.TIME, False), "ch": (T.CHAR, False),
    "vc": (T.VARCHAR, False), "tx": (T.TEXT, False), "bn": (T.BINARY, False), "vb": (T.VARBINARY, False),
    "bl": (T.BLOB, False), "js": (T.JSON, False), "en": (T.ENUM, False), "st": (T.SET, False),
}  # fmt: skip
MYSQL_ROWS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (  # written, then as decoded
        {
            "ti": -128, "tiu": 255, "si": -32768, "mi": 16777215, "i": 2**31 - 1, "bi": -(2**63),
            "biu": 2**64 - 1, "dc": Decimal("-12345678901234.123456"), "db": 0.1 + 0.2, "bt": 4095,
            "yr": 2155, "dt": date(1000, 1, 1), "dtt": datetime(9999, 12, 31, 23, 59, 59, 999999),
            "ts": datetime(2038, 1, 19, 11, 14, 7, 999000, tzinfo=UTC8),
            "tm": -timedelta(hours=838, minutes=59, seconds=59),
            "ch": "äöü€", "vc": "emoji 😀 ok", "tx": "long text " * 500, "bn": b"\x00\x01\x02",
            "vb": b"\xff" * 8, "bl": bytes(range(256)), "js": {"k": [1, 2.5, {"n": None}], "é": "ü"},
            "en": "c'q", "st": {"z", "x"},
        },
        {
            "ts": datetime(2038, 1, 19, 3, 14, 7, 999000, tzinfo=UTC),
            "js": '{"k":[1,2.5,{"n":null}],"é":"ü"}',
            "st": "x,z",
        },
    ),
    (
        {"ti": 0, "dc": 1, "db": -0.0, "bt": 0, "yr": 0, "dt": MySQLDate(0, 0, 0),
         "tm": timedelta(microseconds=10000),
         "ch": "", "vc": "", "bn": b"ab", "en": "b b", "st": set(), "js": "[]"},
        {"dc": Decimal("1.000000"), "bn": b"ab\x00", "st": ""},
    ),
]  # fmt: skip

SQLITE_COLUMNS = """
    ti TINYINT NULL, si SMALLINT UNSIGNED NULL, i INT NULL, bi BIGINT NULL, bo BOOLEAN NULL,
    dc DECIMAL(15,4) NULL,
    fl FLOAT NULL, db DOUBLE PRECISION NULL, r REAL NULL, bt BIT(12) NULL, yr YEAR NULL, dt DATE NULL,
    dtt DATETIME(6) NULL, ts TIMESTAMP(3) NULL, tm TIME(2) NULL, ch CHAR(4) NULL, vc VARCHAR(20) NULL,
    tx TEXT NULL, cl CLOB NULL, bn BINARY(3) NULL, vb VARBINARY(8) NULL, bl BLOB NULL, js JSON NULL
"""
SQLITE_TYPES = {
    "ti": (T.TINYINT, False), "si": (T.SMALLINT, True), "i": (T.INT, False), "bi": (T.BIGINT, False),
    "bo": (T.TINYINT, False), "dc": (T.DECIMAL, False), "fl": (T.FLOAT, False), "db": (T.DOUBLE, False),
    "r": (T.DOUBLE, False), "bt": (T.BIT, False), "yr": (T.YEAR, False), "dt": (T.DATE, False),
    "dtt": (T.DATETIME, False), "ts": (T.TIMESTAMP, False), "tm": (T.TIME, False), "ch": (T.CHAR, False),
    "vc": (T.VARCHAR, False), "tx": (T.TEXT, False), "cl": (T.TEXT, False), "bn": (T.BINARY, False),
    "vb": (T.VARBINARY, False), "bl": (T.BLOB, False), "js": (T.JSON, False),
}  # fmt: skip
SQLITE_ROWS: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (
        {
            "ti": -128, "si": 65535, "i": -(2**31), "bi": 2**63 - 1, "bo": True,
            "dc": Decimal("-12345678901.1234"),
            "fl": 0.1, "db": 1e308, "r": -2.5, "bt": 4095, "yr": 1901, "dt": date(2024, 2, 29),
            "dtt": datetime(2024, 2, 29, 23, 59, 59, 123456),
            "ts": datetime(2024, 1, 1, 20, 0, 0, 5000, tzinfo=UTC8),
            "tm": -timedelta(hours=5, microseconds=10000), "ch": "äöü€", "vc": "emoji 😀 ok",
            "tx": "text " * 500,
            "cl": "", "bn": b"\x00\x01\x02", "vb": b"\xff" * 8, "bl": bytes(range(256)),
            "js": {"a": "é", "n": [1, None]},
        },
        {"bo": 1, "ts": datetime(2024, 1, 1, 12, 0, 0, 5000, tzinfo=UTC), "js": '{"a":"é","n":[1,null]}'},
    ),
    (
        {"dc": 100, "dt": MySQLDate(0, 0, 0), "dtt": datetime(2024, 1, 1), "js": "123", "tm": timedelta(0)},
        {"dc": Decimal("100.0000")},
    ),
]  # fmt: skip


def without_returning(upstream: Any) -> Any:
    """The same upstream with RETURNING unused: the statements a server without it gets (MySQL)."""
    connect = upstream.connect

    def plain_connect() -> Any:
        session = connect()
        session.returning = frozenset()
        return session

    upstream.connect = plain_connect
    return upstream


@pytest.fixture(
    params=[
        "sqlite",
        "sqlite-plain",
        pytest.param("mysql", marks=pytest.mark.mysql),
        pytest.param("mysql-plain", marks=pytest.mark.mysql),
    ]
)
def case(request: pytest.FixtureRequest, tmp_path: Any, unique_name: str) -> Iterator[tuple[Any, ...]]:
    plain = request.param.endswith("-plain")
    if request.param.startswith("sqlite"):
        upstream = open_upstream(Dsn("sqlite", path=str(tmp_path / "types.db")))
        yield without_returning(upstream) if plain else upstream, SQLITE_COLUMNS, SQLITE_TYPES, SQLITE_ROWS
        return
    dsn = server_dsn()
    conn = admin(dsn)
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{unique_name}`")
    try:
        upstream = open_upstream(dsn.with_database(unique_name))
        yield without_returning(upstream) if plain else upstream, MYSQL_COLUMNS, MYSQL_TYPES, MYSQL_ROWS
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}`")
        conn.close()


def expected_row(columns: list[str], written: dict[str, Any], decoded: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(decoded.get(name, written.get(name)) for name in columns)


def test_values_round_trip_through_upstream_and_binlog(services: Services, case: tuple[Any, ...]) -> None:
    upstream, columns_sql, types, rows = case
    writer = TxnWriter(upstream, services.pumps)
    created = writer.ddl(f"CREATE TABLE typed (id INT NOT NULL PRIMARY KEY, {columns_sql})")
    keyless = writer.ddl(
        f"CREATE TABLE typed_keyless (id INT NOT NULL, {columns_sql.replace('fl FLOAT NULL, ', '')})"
    )
    assert created is not None and keyless is not None
    schema = created.change.table_schema
    assert {c.name: (c.type, c.unsigned) for c in schema.columns[1:]} == types
    names = [c.name for c in schema.columns]
    with writer.transaction() as txn:
        for n, (written, _) in enumerate(rows, start=1):
            txn.insert("typed", {"id": n, **written})
            txn.insert(
                "typed_keyless",
                {
                    name: written.get(name)
                    for name in [c.name for c in keyless.change.table_schema.columns]
                    if name != "id"
                }
                | {"id": n},
            )
    (mutation, keyless_mutation) = B.read_prewrite_value(services.binlogs(txn.start_ts)[0]).mutations
    codec = RowCodec(schema)
    decoded = [codec.decode(r) for r in mutation.inserted_rows]
    assert decoded == [expected_row(names, {"id": n, **w}, d) for n, (w, d) in enumerate(rows, start=1)]

    # Each image must work as a WHERE clause again: delete the keyless rows by their full image.
    keyless_codec = RowCodec(keyless.change.table_schema)
    images = [keyless_codec.decode_named(r) for r in keyless_mutation.inserted_rows]
    with writer.transaction() as txn:
        assert [txn.delete("typed_keyless", image) for image in images] == [1] * len(rows)
    assert writer.read("SELECT COUNT(*) FROM typed_keyless") == [(0,)]
    writer.close()


def test_column_details_reach_the_schema(services: Services, case: tuple[Any, ...]) -> None:
    upstream, columns_sql, _, _ = case
    mysql = upstream.dialect.name == "mysql"
    writer = TxnWriter(upstream, services.pumps)
    created = writer.ddl(f"CREATE TABLE typed (id INT NOT NULL PRIMARY KEY, {columns_sql})")
    assert created is not None
    columns = {c.name: c for c in created.change.table_schema.columns}
    assert (columns["dc"].precision, columns["dc"].scale) == ((20, 6) if mysql else (15, 4))
    assert (columns["dtt"].fsp, columns["ts"].fsp, columns["tm"].fsp) == (6, 3, 2)
    assert (columns["ch"].length, columns["vc"].length, columns["bn"].length, columns["bt"].length) == (
        4,
        20,
        3,
        12,
    )
    assert not columns["id"].nullable and columns["vc"].nullable
    if mysql:
        assert list(columns["en"].elems) == ["a", "b b", "c'q"] and list(columns["st"].elems) == [
            "x",
            "y",
            "z",
        ]
        assert columns["ch"].charset == "utf8mb4"
    writer.close()
