"""The SQL translation: statements per change kind, key kind and safe mode; SQLite values and DDL."""

from __future__ import annotations

import sqlite3
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from bridge.proto import row_pb2
from bridge.rowdefaults import fill_value, implicit_default
from bridge.rowtemporal import MySQLDate, MySQLDateTime
from bridge.sink.events import RowChange
from drainer.sinks.sql.dialect import Dialect
from drainer.sinks.sql.sql import Translator, build_table_sql
from drainer.sinks.sql.sqlite import SQLiteDialect, declared_type
from drainer.sinks.sql.sqlite_ddl import SQLiteDDL, schema_from_names, sql_literal
from tests.support.binlog_events import table_schema

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange

PK = table_schema("", "t", [("id", T.BIGINT), ("name", T.VARCHAR)], key=["id"])
NO_KEY = table_schema("", "t", [("a", T.INT), ("b", T.VARCHAR)])


def unique_schema() -> row_pb2.TableSchema:
    schema = table_schema("", "t", [("code", T.VARCHAR), ("name", T.VARCHAR)])
    schema.columns[0].nullable = False
    schema.indexes.add(name="nullable_uk", unique=True, columns=["name"])  # nullable: not a key
    schema.indexes.add(name="uk", unique=True, columns=["code"])
    return schema


def insert(schema: row_pb2.TableSchema, after: tuple[object, ...]) -> RowChange:
    return RowChange("insert", schema, None, after)


def update(schema: row_pb2.TableSchema, before: tuple[object, ...], after: tuple[object, ...]) -> RowChange:
    return RowChange("update", schema, before, after)


def delete(schema: row_pb2.TableSchema, before: tuple[object, ...]) -> RowChange:
    return RowChange("delete", schema, before, None)


def test_primary_key_statements() -> None:
    sql = build_table_sql(SQLiteDialect(), PK)
    assert sql.insert == 'INSERT INTO "t" ("id", "name") VALUES (?, ?)'
    assert sql.statements(update(PK, (1, "a"), (2, "b"))) == [
        ('UPDATE "t" SET "id" = ?, "name" = ? WHERE "id" = ?', (2, "b", 1))
    ]
    assert sql.statements(delete(PK, (1, "a"))) == [('DELETE FROM "t" WHERE "id" = ?', (1,))]


def test_not_null_unique_key_when_no_primary_key() -> None:
    schema = unique_schema()
    sql = build_table_sql(SQLiteDialect(), schema)
    assert sql.statements(delete(schema, ("c1", None))) == [('DELETE FROM "t" WHERE "code" = ?', ("c1",))]


def test_no_key_matches_the_whole_row_null_safely_one_row_at_a_time() -> None:
    sql = build_table_sql(SQLiteDialect(), NO_KEY)
    ((statement, params),) = sql.statements(delete(NO_KEY, (1, None)))
    assert statement == (
        'DELETE FROM "t" WHERE rowid IN (SELECT rowid FROM "t" WHERE "a" IS ? AND "b" IS ? LIMIT 1)'
    )
    assert params == (1, None)
    ((statement, params),) = sql.statements(update(NO_KEY, (1, None), (2, "x")))
    assert statement.startswith('UPDATE "t" SET "a" = ?, "b" = ? WHERE rowid IN (SELECT rowid FROM "t" WHERE')
    assert params == (2, "x", 1, None)


def test_no_key_statements_change_one_of_two_identical_rows() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a INT, b VARCHAR)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", [(1, None), (1, None)])
    translator = Translator(SQLiteDialect())
    for change in (update(NO_KEY, (1, None), (2, None)), delete(NO_KEY, (1, None))):
        for statement, params in translator.statements(change):
            conn.execute(statement, params)
    assert conn.execute("SELECT a, b FROM t").fetchall() == [(2, None)]


def test_safe_mode_is_idempotent_for_keyed_tables() -> None:
    translator = Translator(SQLiteDialect())
    assert translator.statements(insert(PK, (1, "a")), safe=True) == [
        ('REPLACE INTO "t" ("id", "name") VALUES (?, ?)', (1, "a"))
    ]
    changes = [
        insert(PK, (1, "a")),
        update(PK, (1, "a"), (5, "b")),
        insert(PK, (2, "c")),
        delete(PK, (2, "c")),
    ]
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, name VARCHAR)")
    for _ in range(2):  # the second pass replays everything: same result
        for change in changes:
            for statement, params in translator.statements(change, safe=True):
                conn.execute(statement, params)
    assert conn.execute("SELECT * FROM t").fetchall() == [(5, "b")]
    assert [s for s, _ in translator.statements(update(PK, (1, "a"), (5, "b")), safe=True)] == [
        'DELETE FROM "t" WHERE "id" = ?',
        'REPLACE INTO "t" ("id", "name") VALUES (?, ?)',
    ]


def test_identifiers_are_quoted_and_values_never_inlined() -> None:
    schema = table_schema('d"b', 'we"ird', [('c"ol', T.VARCHAR)], key=['c"ol'])
    sql = build_table_sql(SQLiteDialect(), schema)
    assert sql.ref == '"db:d""b"."we""ird"'
    statements = Translator(SQLiteDialect()).statements(insert(schema, ("'); DROP TABLE t; --",)))
    assert statements[0][0] == 'INSERT INTO "db:d""b"."we""ird" ("c""ol") VALUES (?)'


def test_a_mysql_like_dialect_needs_only_its_spelling() -> None:
    class Backticks(Dialect):
        placeholder = "%s"
        null_safe_equal = "<=>"
        quote_char = "`"

    sql = build_table_sql(Backticks(), table_schema("shop", "t", [("a", T.INT), ("b", T.INT)]))
    assert sql.insert == "INSERT INTO `shop`.`t` (`a`, `b`) VALUES (%s, %s)"
    assert sql.delete == "DELETE FROM `shop`.`t` WHERE `a` <=> %s AND `b` <=> %s LIMIT 1"
    assert sql.update.endswith("WHERE `a` <=> %s AND `b` <=> %s LIMIT 1")


def test_translator_caches_per_schema_message() -> None:
    translator = Translator(SQLiteDialect(), cache_size=2)
    first = translator.table(PK)
    assert translator.table(PK) is first
    copy = row_pb2.TableSchema()
    copy.CopyFrom(PK)
    assert translator.table(copy) is not first


def column(kind: int, **fields: object) -> row_pb2.Column:
    return row_pb2.Column(id=1, name="c", type=kind, nullable=True, **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("col", "value", "stored"),
    [
        (column(T.BIGINT, unsigned=True), (1 << 64) - 1, -1),
        (column(T.BIGINT, unsigned=True), (1 << 63) - 1, (1 << 63) - 1),
        (column(T.BIT, length=64), 1 << 63, -(1 << 63)),
        (column(T.DECIMAL, precision=30, scale=10), Decimal("-0.0000001000"), "-0.0000001000"),
        (column(T.DATE), date(2024, 2, 29), "2024-02-29"),
        (column(T.DATE), MySQLDate(0, 0, 0), "0000-00-00"),
        (column(T.DATETIME, fsp=3), datetime(2024, 1, 2, 3, 4, 5, 120000), "2024-01-02 03:04:05.120"),
        (column(T.DATETIME), MySQLDateTime(2024, 0, 0, 1, 2, 3), "2024-00-00 01:02:03"),
        (
            column(T.TIMESTAMP, fsp=6),
            datetime(2024, 1, 2, 3, 4, 5, 7, tzinfo=UTC),
            "2024-01-02 03:04:05.000007",
        ),
        (
            column(T.TIME, fsp=2),
            -timedelta(hours=838, minutes=59, seconds=58, microseconds=500000),
            "-838:59:58.50",
        ),
        (column(T.TIME), timedelta(seconds=5), "00:00:05"),
        (column(T.JSON), '{"a": [1, 2.5]}', '{"a": [1, 2.5]}'),
        (column(T.BLOB), b"\x00\xff", b"\x00\xff"),
        (column(T.DOUBLE), -0.0, -0.0),
    ],
)
def test_sqlite_values_are_stored_losslessly(col: row_pb2.Column, value: object, stored: object) -> None:
    converted = SQLiteDialect().converter_of(col)(value)
    assert converted == stored and type(converted) is type(stored)
    conn = sqlite3.connect(":memory:")
    conn.execute(f'CREATE TABLE t ("c" {declared_type(col)})')
    conn.execute("INSERT INTO t VALUES (?)", (converted,))
    assert conn.execute("SELECT c FROM t").fetchone()[0] == stored  # affinity changed nothing


def test_declared_types_keep_text_affinity_where_numeric_would_lose_digits() -> None:
    assert declared_type(column(T.DECIMAL, precision=65, scale=30)) == "DECIMAL_TEXT(65,30)"
    assert declared_type(column(T.INT, unsigned=True)) == "INT UNSIGNED"
    assert declared_type(column(T.JSON)) == "JSON_TEXT"
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (d DECIMAL_TEXT(65,30), j JSON_TEXT)")
    digits = "12345678901234567890123456789012345.123456789012345678901234567890"
    conn.execute("INSERT INTO t VALUES (?, ?)", (digits, "1.0"))
    assert conn.execute("SELECT d, j FROM t").fetchone() == (digits, "1.0")


def added(**fields: object) -> row_pb2.Column:
    return row_pb2.Column(id=3, name="extra", **fields)  # type: ignore[arg-type]


def test_fill_values_are_what_mysql_fills() -> None:
    assert fill_value(added(type=T.INT, nullable=True), 1) is None
    assert fill_value(added(type=T.INT), 1) == 0
    assert fill_value(added(type=T.VARCHAR, default_value="'it''s'"), 1) == "it's"
    assert fill_value(added(type=T.DECIMAL, scale=2, default_value="1.5"), 1) == Decimal("1.50")
    assert fill_value(added(type=T.DATETIME, default_value="'2020-01-02 03:04:05'"), 1) == datetime(
        2020, 1, 2, 3, 4, 5
    )
    assert fill_value(added(type=T.TIME, default_value="'-01:00:00'"), 1) == timedelta(hours=-1)
    assert fill_value(added(type=T.BIT, default_value="b'101'"), 1) == 5
    assert fill_value(added(type=T.BINARY, length=3, default_value="'a'"), 1) == b"a\0\0"
    assert fill_value(added(type=T.INT, nullable=True, default_value="NULL"), 1) is None
    ts = (1_700_000_000_000 << 18) + 5
    assert fill_value(added(type=T.TIMESTAMP, default_value="CURRENT_TIMESTAMP"), ts) == datetime(
        2023, 11, 14, 22, 13, 20, tzinfo=UTC
    )
    assert fill_value(added(type=T.INT, default_value="rand()"), 1) == 0  # not evaluable: implicit default
    assert implicit_default(added(type=T.ENUM, elems=["x", "y"])) == "x"
    assert implicit_default(added(type=T.DATE)) == MySQLDate(0, 0, 0)


def test_sql_literals_escape_quotes() -> None:
    assert sql_literal("a'b") == "'a''b'"
    assert sql_literal(b"\x01") == "X'01'"
    assert sql_literal(None) == "NULL"
    assert sql_literal(-3) == "-3"


def base() -> row_pb2.TableSchema:
    return table_schema("shop", "t", [("id", T.BIGINT), ("a", T.VARCHAR), ("b", T.INT)], key=["id"])


def test_create_table_declares_keys_and_unique_indexes() -> None:
    schema = base()
    schema.indexes.add(name="ub", unique=True, columns=["b"])
    schema.indexes.add(name="plain", columns=["a"])
    assert SQLiteDDL().create_table(schema) == (
        'CREATE TABLE "db:shop"."t" ("id" BIGINT NOT NULL, "a" VARCHAR, "b" INT, '
        'PRIMARY KEY ("id"), UNIQUE ("b"))'
    )


def test_simple_alters_use_sqlite_alter_table() -> None:
    old, new = base(), base()
    new.columns[1].name = "a2"  # rename
    del new.columns[2]  # drop b
    new.columns.add(id=4, name="c", type=T.INT, default_value="7")
    new.max_column_id = 4
    statements = [s for s, _ in SQLiteDDL().alter(old, new, 1)]
    assert statements == [
        'ALTER TABLE "db:shop"."t" RENAME COLUMN "a" TO "a2"',
        'ALTER TABLE "db:shop"."t" DROP COLUMN "b"',
        'ALTER TABLE "db:shop"."t" ADD COLUMN "c" INT NOT NULL DEFAULT 7',
    ]


@pytest.mark.parametrize("change", ["type", "key", "swap"])
def test_other_alters_rebuild_the_table(change: str) -> None:
    old, new = base(), base()
    if change == "type":
        new.columns[2].type = T.BIGINT
    elif change == "key":
        new.indexes[0].columns[:] = ["id", "b"]
    else:
        new.columns[1].name, new.columns[2].name = "b", "a"
    statements = [s for s, _ in SQLiteDDL().alter(old, new, 1)]
    assert statements[0].startswith('CREATE TABLE "db:shop"."_bridge_rebuild_t"')
    assert statements[1].startswith('INSERT INTO "db:shop"."_bridge_rebuild_t"')
    assert statements[2:] == [
        'DROP TABLE "db:shop"."t"',
        'ALTER TABLE "db:shop"."_bridge_rebuild_t" RENAME TO "t"',
    ]


def test_rebuild_copies_by_column_id_and_fills_new_columns() -> None:
    old = base()
    new = table_schema("shop", "t", [("id", T.BIGINT), ("b", T.BIGINT)], key=["id"])
    new.columns[1].id = 3  # "b", retyped
    new.columns.add(id=4, name="d", type=T.DECIMAL, precision=5, scale=2, default_value="1.5")
    new.max_column_id = 4
    ddl = SQLiteDDL(SQLiteDialect())
    conn = sqlite3.connect(":memory:")
    conn.execute("ATTACH ':memory:' AS 'db:shop'")
    conn.execute(ddl.create_table(old))
    conn.execute('INSERT INTO "db:shop"."t" VALUES (1, \'x\', 10)')
    for statement, params in ddl.alter(old, new, 1):
        conn.execute(statement, params)
    assert conn.execute('SELECT * FROM "db:shop"."t"').fetchall() == [(1, 10, "1.50")]


def test_unknown_old_schema_maps_existing_columns_by_name() -> None:
    new = base()
    old = schema_from_names(new, ["ID", "gone"])
    assert [(c.name, c.id) for c in old.columns] == [("ID", 1), ("gone", 4)]


def test_table_level_changes() -> None:
    ddl, schema = SQLiteDDL(), base()
    rename = Change(kind=Change.RENAME_TABLE, db="shop", table="u", old_db="shop", old_table="t")
    assert ddl.plan(rename, schema, 1) == [('ALTER TABLE "db:shop"."t" RENAME TO "u"', ())]
    moved = base()
    moved.db, moved.table = "other", "u"
    across = Change(
        kind=Change.RENAME_TABLE, db="other", table="u", old_db="shop", old_table="t", table_schema=moved
    )
    assert [s.split(" (")[0] for s, _ in ddl.plan(across, schema, 1)] == [
        'CREATE TABLE "db:other"."u"',
        'INSERT INTO "db:other"."u"',
        'DROP TABLE "db:shop"."t"',
    ]
    truncate = Change(kind=Change.TRUNCATE_TABLE, db="shop", table="t", table_schema=schema)
    assert ddl.plan(truncate, schema, 1) == [('DELETE FROM "db:shop"."t"', ())]
    drop = Change(kind=Change.DROP_TABLE, db="shop", table="t")
    assert ddl.plan(drop, schema, 1) == [('DROP TABLE IF EXISTS "db:shop"."t"', ())]
