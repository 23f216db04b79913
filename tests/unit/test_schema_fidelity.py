"""Schema fidelity (issue 19), no services: what the producer reads and refuses, how the MySQL
and SQLite sinks recreate it, and that row DML never writes a generated column."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

import pytest

from bridge.avro import table_avro
from bridge.producer import mysql_types
from bridge.producer.catalog import matches_live, without_ids
from bridge.producer.ddlparse import refuse_nondeterministic
from bridge.producer.errors import UnsupportedSchema
from bridge.proto import row_pb2
from bridge.sink.events import RowChange
from drainer.sinks.mysql.translate import TableWriter
from drainer.sinks.sql.mysql import MySQLDialect
from drainer.sinks.sql.mysql_ddl import MySQLDDL
from drainer.sinks.sql.sql import build_table_sql
from drainer.sinks.sql.sqlite import SQLiteDialect
from drainer.sinks.sql.sqlite_ddl import SQLiteDDL, Unexpressible, portable, session_now

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange
SESSION_US = 1_700_000_000_123_456  # 2023-11-14 22:13:20.123456 UTC


def info_row(name: str, column_type: str, **kw: Any) -> tuple[Any, ...]:
    """A row as mysql_types.COLUMNS_SQL returns it from MariaDB 10.11."""
    return (
        name, column_type.split("(")[0], column_type, kw.get("default"), kw.get("nullable", "YES"),
        kw.get("max_len", 9), 10, 0, kw.get("fsp"), None, None, kw.get("extra", ""), kw.get("generation"),
        kw.get("comment", ""),
    )  # fmt: skip


def test_mariadb_reports_become_full_column_definitions() -> None:
    def column(row: tuple[Any, ...]) -> row_pb2.Column:
        return mysql_types.column_from_info(row, "d.t", set(), mariadb=True)

    g = column(info_row("g", "int(11)", default="NULL", extra="VIRTUAL GENERATED", generation="`a` * 10"))
    assert (g.generated, g.generation_expression, g.HasField("default_value")) == (
        row_pb2.VIRTUAL,
        "`a` * 10",
        False,
    )
    s = column(info_row("s", "int(11)", extra="STORED GENERATED", generation="`a` + 1"))
    assert s.generated == row_pb2.STORED
    d = column(info_row("d", "int(11)", default="(`a` + 1000)"))
    assert (d.default_value, d.default_is_expression) == ("(`a` + 1000)", True)
    ts = column(
        info_row(
            "ts", "datetime(6)", default="current_timestamp(6)", nullable="NO", fsp=6,
            extra="on update current_timestamp(6)", comment="when",
        )
    )  # fmt: skip
    assert (ts.default_is_expression, ts.on_update, ts.comment) == (True, "current_timestamp(6)", "when")
    for literal in ("'x''y'", "12", "-1.5e3", "NULL", "b'101'", "0x1f"):
        assert not column(info_row("n", "varchar(9)", default=literal)).default_is_expression
    old_shape = info_row("o", "int(11)", default="5")[:12]  # a 12-column row (older query) still reads
    assert column(old_shape).default_value == "5"


def test_index_prefixes_and_partitioning_from_information_schema() -> None:
    (primary, by_c) = mysql_types.indexes_from_info(
        [("PRIMARY", 0, "id", None), ("by_c", 1, "c", 3), ("by_c", 1, "a", None)]
    )
    assert list(primary.prefix_lengths) == [] and list(by_c.prefix_lengths) == [3, 0]
    assert mysql_types.indexes_from_info([("k", 1, "c")])[0].columns == ["c"]  # older 3-column rows
    shown = "CREATE TABLE `p` (\n  `id` int(11) NOT NULL\n) ENGINE=InnoDB\n PARTITION BY HASH (`id`)\n"
    shown += "PARTITIONS 2"
    assert mysql_types.partition_clause(shown) == "PARTITION BY HASH (`id`) PARTITIONS 2"
    assert mysql_types.partition_clause("/*!50100 PARTITION BY KEY (id) */") == "PARTITION BY KEY (id)"
    assert mysql_types.partition_clause("CREATE TABLE t (id INT)") == ""


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE t ADD COLUMN r DOUBLE DEFAULT (RAND())",
        "ALTER TABLE t ADD u CHAR(36) DEFAULT UUID()",
        "ALTER TABLE t ADD g BIGINT AS (uuid_short() % 10) STORED",
        "CREATE TABLE t (id INT, d DATETIME AS (SYSDATE()) VIRTUAL)",
        "ALTER TABLE t ADD who VARCHAR(80) DEFAULT (CONCAT(CURRENT_USER, '!'))",
        "ALTER TABLE t ADD r DOUBLE AS (RAND()) VIRTUAL",
    ],
)
def test_nondeterministic_ddl_is_refused_saying_why(sql: str) -> None:
    with pytest.raises(UnsupportedSchema, match=r"refused before it ran: .* no binlog carries"):
        refuse_nondeterministic(sql)


def test_clock_functions_in_generated_columns_are_refused() -> None:
    with pytest.raises(
        UnsupportedSchema, match=r"NOW in the generated column .* evaluated whenever a row is read"
    ):
        refuse_nondeterministic("ALTER TABLE t ADD v DATETIME(6) GENERATED ALWAYS AS (NOW(6)) VIRTUAL")
    refuse_nondeterministic("ALTER TABLE t ADD v DATETIME(6) DEFAULT (NOW(6)), ADD g INT AS (a + 1) STORED")


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE t ADD COLUMN d INT DEFAULT (a + 1000)",
        "ALTER TABLE t ADD ts DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE NOW(6)",
        "CREATE TABLE t (id INT, user VARCHAR(10), note VARCHAR(9) DEFAULT 'rand()', KEY (user(5)))",
        "ALTER TABLE t ADD due DATETIME DEFAULT (NOW() + INTERVAL 1 DAY)",
    ],
)
def test_deterministic_ddl_passes(sql: str) -> None:
    refuse_nondeterministic(sql)


def schema_with_computed_columns() -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(db="d", table="t", charset="utf8mb4", collation="utf8mb4_general_ci")
    schema.columns.add(id=1, name="id", type=T.INT, sql_type="int(11)")
    schema.columns.add(id=2, name="a", type=T.INT, sql_type="int(11)", nullable=True)
    schema.columns.add(
        id=3, name="g", type=T.INT, sql_type="int(11)", nullable=True,
        generated=row_pb2.VIRTUAL, generation_expression="`a` * 10",
    )  # fmt: skip
    schema.columns.add(id=4, name="d", type=T.INT, sql_type="int(11)", nullable=True)
    schema.columns[3].default_value, schema.columns[3].default_is_expression = "(`a` + 1000)", True
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    schema.max_column_id = 4
    return schema


def test_mysql_sink_recreates_generated_columns_expression_defaults_and_table_options() -> None:
    schema = schema_with_computed_columns()
    schema.comment, schema.partitioning = "it's computed", "PARTITION BY HASH (`id`) PARTITIONS 2"
    schema.columns.add(
        id=5, name="ts", type=T.DATETIME, fsp=6, sql_type="datetime(6)", default_value="current_timestamp(6)",
        default_is_expression=True, on_update="current_timestamp(6)", comment="when",
    )  # fmt: skip
    schema.columns.add(id=6, name="c", type=T.VARCHAR, length=20, sql_type="varchar(20)", charset="latin1")
    schema.indexes.add(name="by_c", columns=["c", "a"], prefix_lengths=[3, 0])
    schema.session_time_us = SESSION_US
    statements = MySQLDDL().plan(
        Change(kind=Change.CREATE_TABLE, db="d", table="t", table_schema=schema), None
    )
    assert statements[0] == "SET timestamp = 1700000000.123456"
    assert statements[-1] == "SET timestamp = DEFAULT"
    create = statements[2]
    assert "`g` int(11) GENERATED ALWAYS AS (`a` * 10) VIRTUAL," in create
    assert "`d` int(11) NULL DEFAULT (`a` + 1000)," in create
    assert (
        "`ts` datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE current_timestamp(6) "
        "COMMENT 'when'," in create
    )
    assert "`c` varchar(20) CHARACTER SET latin1 NOT NULL" in create
    assert "KEY `by_c` (`c`(3), `a`)" in create
    assert create.endswith("COMMENT='it''s computed' PARTITION BY HASH (`id`) PARTITIONS 2")


def test_mysql_sink_alters_a_generation_expression_comment_and_partitioning() -> None:
    old = schema_with_computed_columns()
    new = row_pb2.TableSchema()
    new.CopyFrom(old)
    new.columns[2].generation_expression = "`a` * 100"
    new.comment, new.partitioning = "now commented", "PARTITION BY HASH (`id`) PARTITIONS 3"
    change = Change(kind=Change.ALTER_TABLE, db="d", table="t", table_schema=new)
    assert MySQLDDL().plan(change, old) == [
        "ALTER TABLE `d`.`t` CHANGE COLUMN IF EXISTS `g` `g` int(11) GENERATED ALWAYS AS (`a` * 100) "
        "VIRTUAL, COMMENT = 'now commented'",
        "ALTER TABLE `d`.`t` PARTITION BY HASH (`id`) PARTITIONS 3",
    ]
    back = Change(kind=Change.ALTER_TABLE, db="d", table="t", table_schema=old)
    assert MySQLDDL().plan(back, new)[0] == "ALTER TABLE `d`.`t` REMOVE PARTITIONING"


def test_row_dml_never_writes_generated_columns() -> None:
    schema = schema_with_computed_columns()
    sql = build_table_sql(MySQLDialect(), schema)
    assert sql.insert == "INSERT INTO `d`.`t` (`id`, `a`, `d`) VALUES (%s, %s, %s)"
    assert sql.update == "UPDATE `d`.`t` SET `id` = %s, `a` = %s, `d` = %s WHERE `id` = %s"
    change = RowChange("update", schema, (1, 2, 20, 1002), (1, 3, 30, 1002))
    assert sql.statements(change) == [(sql.update, (1, 3, 1002, 1))]
    assert sql.statements(change, safe=True)[1] == (sql.replace, (1, 3, 1002))
    writer = TableWriter(sql, schema)
    assert writer.insert_prefix == "INSERT INTO `d`.`t` (`id`, `a`, `d`) VALUES "
    assert writer.row((1, 3, 30, 1003)) == "(1, 3, 1003)"
    assert writer.assignments((1, 3, 30, None)) == "`id` = 1, `a` = 3, `d` = NULL"
    assert writer.key_condition((1, 3, 30, 1003)) == "`id` = 1"


def sqlite_apply(statements: list[tuple[str, tuple[object, ...]]], conn: sqlite3.Connection) -> None:
    for statement, params in statements:
        conn.execute(statement.replace('"db:d".', ""), params)


def test_sqlite_recreates_portable_generated_columns_and_fills_added_columns() -> None:
    old = schema_with_computed_columns()
    del old.columns[2:]
    ddl = SQLiteDDL(SQLiteDialect(), has_rows=lambda db, table: True)
    conn = sqlite3.connect(":memory:")
    sqlite_apply(
        ddl.plan(Change(kind=Change.CREATE_TABLE, db="d", table="t", table_schema=old), None, 0), conn
    )
    conn.executemany("INSERT INTO t (id, a) VALUES (?, ?)", [(1, 1), (2, 2)])
    new = schema_with_computed_columns()
    new.columns.add(
        id=5,
        name="s",
        type=T.BIGINT,
        nullable=True,
        generated=row_pb2.STORED,
        generation_expression="`a` + 1",
    )
    new.columns.add(
        id=6,
        name="ts",
        type=T.DATETIME,
        fsp=6,
        default_value="current_timestamp(6)",
        default_is_expression=True,
    )
    new.session_time_us = SESSION_US
    plan = ddl.plan(Change(kind=Change.ALTER_TABLE, db="d", table="t", table_schema=new), old, 0)
    assert plan[0][0].startswith('CREATE TABLE "db:d"."_bridge_rebuild_t"')  # STORED: a rebuild
    sqlite_apply(plan, conn)
    assert conn.execute("SELECT id, a, g, d, s, ts FROM t ORDER BY id").fetchall() == [
        (1, 1, 10, 1001, 2, "2023-11-14 22:13:20.123456"),
        (2, 2, 20, 1002, 3, "2023-11-14 22:13:20.123456"),
    ]
    assert [r[6] for r in conn.execute("PRAGMA table_xinfo('t')")] == [0, 0, 2, 0, 3, 0]


def test_sqlite_refuses_what_would_change_data() -> None:
    old = schema_with_computed_columns()
    del old.columns[2:]
    new = row_pb2.TableSchema()
    new.CopyFrom(old)
    new.columns.add(
        id=3, name="label", type=T.VARCHAR, length=40, nullable=True, generated=row_pb2.VIRTUAL,
        generation_expression="concat(`id`,':',`a`)",
    )  # fmt: skip
    change = Change(kind=Change.ALTER_TABLE, db="d", table="t", table_schema=new)
    with pytest.raises(Unexpressible, match=r"generated column d\.t\.label .* cannot be recreated in SQLite"):
        SQLiteDDL(has_rows=lambda db, table: False).plan(change, old, 0)
    new.columns[2].CopyFrom(
        row_pb2.Column(id=3, name="due", type=T.DATETIME, nullable=True, default_is_expression=True)
    )
    new.columns[2].default_value = "(current_timestamp() + interval 1 day)"
    change = Change(kind=Change.ALTER_TABLE, db="d", table="t", table_schema=new)
    with pytest.raises(Unexpressible, match=r"column d\.t\.due is added with DEFAULT"):
        SQLiteDDL(has_rows=lambda db, table: True).plan(change, old, 0)
    assert SQLiteDDL(has_rows=lambda db, table: False).plan(change, old, 0)  # no rows: nothing to differ


def test_what_sqlite_computes_as_mysql_does() -> None:
    schema = schema_with_computed_columns()
    target = schema.columns[2]
    assert portable("(`a` * 10 + (id % 3)) - 1", schema, target)
    assert not portable("`a` / 2", schema, target)  # MySQL divides exactly, SQLite by integers
    assert not portable("abs(`a`)", schema, target)
    assert not portable("`g` + 1", schema, target)  # another generated column
    text = row_pb2.Column(name="x", type=T.VARCHAR)
    assert not portable("`a` + 1", schema, text)
    now = row_pb2.Column(name="n", type=T.DATETIME, default_value="current_timestamp()")
    assert session_now(now, SESSION_US) == datetime(
        2023, 11, 14, 22, 13, 20
    )  # cut to the function's 0 digits
    assert session_now(now, 0) is None


def test_avro_fields_say_which_columns_are_generated() -> None:
    fields = {f["name"]: f for f in table_avro(schema_with_computed_columns()).row_schema["fields"]}
    assert (fields["g"]["bridge.generated"], fields["g"]["bridge.expression"]) == ("VIRTUAL", "`a` * 10")
    assert "bridge.generated" not in fields["a"]


def test_drift_check_accepts_schemas_older_writers_saved() -> None:
    live = schema_with_computed_columns()
    live.table_id = live.max_column_id = 0
    for column in live.columns:
        column.id = 0
    saved = schema_with_computed_columns()
    saved.session_time_us = SESSION_US
    assert without_ids(saved) == live and matches_live(saved, live)
    legacy = schema_with_computed_columns()  # saved before issue 19: no definitions, no session time
    legacy.columns[2].generated, legacy.columns[2].generation_expression = row_pb2.NOT_GENERATED, ""
    legacy.columns[3].default_is_expression = False
    assert matches_live(legacy, live)
    changed = row_pb2.TableSchema()
    changed.CopyFrom(saved)
    changed.columns[2].generation_expression = "`a` * 100"
    assert not matches_live(changed, live)  # a writer that recorded it notices a change made behind it


def test_sqlite_fills_a_clock_default_without_session_time_with_the_commit_time() -> None:
    old = schema_with_computed_columns()
    del old.columns[2:]
    new = row_pb2.TableSchema()
    new.CopyFrom(old)  # as binlog-bridge capture describes it: no session time
    new.columns.add(
        id=3, name="ts", type=T.DATETIME, default_value="current_timestamp()", default_is_expression=True
    )
    commit_ts = (SESSION_US // 1000) << 18  # a TSO timestamp at the same millisecond
    change = Change(kind=Change.ALTER_TABLE, db="d", table="t", table_schema=new)
    (add,) = SQLiteDDL(has_rows=lambda db, table: True).plan(change, old, commit_ts)
    assert add[0].endswith("ADD COLUMN \"ts\" DATETIME NOT NULL DEFAULT '2023-11-14 22:13:20'")


def test_sqlite_adds_a_virtual_generated_column_in_place() -> None:
    old = schema_with_computed_columns()
    del old.columns[2:]
    new = schema_with_computed_columns()
    del new.columns[3:]  # id, a, g (VIRTUAL)
    conn = sqlite3.connect(":memory:")
    ddl = SQLiteDDL(has_rows=lambda db, table: True)
    sqlite_apply(
        ddl.plan(Change(kind=Change.CREATE_TABLE, db="d", table="t", table_schema=old), None, 0), conn
    )
    conn.execute("INSERT INTO t (id, a) VALUES (1, 7)")
    plan = ddl.plan(Change(kind=Change.ALTER_TABLE, db="d", table="t", table_schema=new), old, 0)
    assert plan == [('ALTER TABLE "db:d"."t" ADD COLUMN "g" INT GENERATED ALWAYS AS (`a` * 10) VIRTUAL', ())]
    sqlite_apply(plan, conn)
    assert conn.execute("SELECT g FROM t").fetchall() == [(70,)]


def test_a_plain_column_becoming_virtual_is_dropped_and_added() -> None:
    new = schema_with_computed_columns()
    old = row_pb2.TableSchema()
    old.CopyFrom(new)  # as a binlog older than issue 19 described it: g a plain column
    old.columns[2].generated, old.columns[2].generation_expression = row_pb2.NOT_GENERATED, ""
    change = Change(kind=Change.ALTER_TABLE, db="d", table="t", table_schema=new)
    (alter,) = MySQLDDL().plan(change, old)
    assert alter.startswith(
        "ALTER TABLE `d`.`t` DROP COLUMN `g`, ADD COLUMN `g` int(11) GENERATED ALWAYS AS (`a` * 10) VIRTUAL "
        "AFTER `a`"
    )


def test_tidb_gets_no_expression_defaults() -> None:
    schema = schema_with_computed_columns()
    create = Change(kind=Change.CREATE_TABLE, db="d", table="t", table_schema=schema)
    assert "`d` int(11) NULL,\n" in MySQLDDL("tidb").plan(create, None)[1]
    assert "`d` int(11) NULL DEFAULT (`a` + 1000),\n" in MySQLDDL("mariadb").plan(create, None)[1]
