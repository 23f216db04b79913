"""bridge.producer.ddlparse: which table a DDL acts on and what its binlog calls it."""

from __future__ import annotations

import pytest

from bridge.producer.ddlparse import DdlStatement, parse_ddl, unquote
from bridge.producer.errors import UnsupportedSchema
from bridge.proto import row_pb2

K = row_pb2.SchemaChange.Kind


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("CREATE TABLE t (a INT)", DdlStatement(K.CREATE_TABLE, "t")),
        (
            "create table if not exists `we``ird` (a int)",
            DdlStatement(K.CREATE_TABLE, "we`ird", if_exists=True),
        ),
        ('CREATE TABLE "main"."t" (a INT)', DdlStatement(K.CREATE_TABLE, "t")),
        ("/* why */ -- note\n  DROP TABLE IF EXISTS [t];", DdlStatement(K.DROP_TABLE, "t", if_exists=True)),
        ("DROP TABLE t CASCADE", DdlStatement(K.DROP_TABLE, "t")),
        ("ALTER TABLE t ADD COLUMN c INT", DdlStatement(K.ALTER_TABLE, "t")),
        ("ALTER TABLE t ADD COLUMN renamed INT", DdlStatement(K.ALTER_TABLE, "t")),
        ("ALTER TABLE t RENAME TO u", DdlStatement(K.RENAME_TABLE, "u", old_table="t")),
        ("ALTER TABLE t RENAME AS u", DdlStatement(K.RENAME_TABLE, "u", old_table="t")),
        ("RENAME TABLE t TO u", DdlStatement(K.RENAME_TABLE, "u", old_table="t")),
        ("ALTER TABLE t RENAME INDEX a TO b", DdlStatement(K.ALTER_TABLE, "t")),
        ("ALTER TABLE t RENAME COLUMN A TO b", DdlStatement(K.ALTER_TABLE, "t", renames={"a": "b"})),
        (
            "ALTER TABLE t CHANGE COLUMN a b INT, CHANGE `c` d INT",
            DdlStatement(K.ALTER_TABLE, "t", renames={"a": "b", "c": "d"}),
        ),
        ("CREATE UNIQUE INDEX ix ON t (a)", DdlStatement(K.ALTER_TABLE, "t")),
        ("CREATE INDEX IF NOT EXISTS ix ON t (a)", DdlStatement(K.ALTER_TABLE, "t")),
        ("DROP INDEX ix ON t", DdlStatement(K.ALTER_TABLE, "t")),
        ("DROP INDEX ix", DdlStatement(K.ALTER_TABLE, "", index="ix")),
        ("TRUNCATE TABLE t", DdlStatement(K.TRUNCATE_TABLE, "t")),
    ],
)
def test_recognised_statements(sql: str, expected: DdlStatement) -> None:
    assert parse_ddl(sql, "main") == expected


def test_target_is_the_table_before_the_statement() -> None:
    assert parse_ddl("RENAME TABLE t TO u", "db").target == "t"
    assert parse_ddl("ALTER TABLE t ADD x INT", "db").target == "t"


@pytest.mark.parametrize(
    ("sql", "fragment"),
    [
        ("CREATE DATABASE x", "is not carried"),
        ("CREATE VIEW v AS SELECT 1", "is not carried"),
        ("CREATE TEMPORARY TABLE t (a INT)", "is not carried"),
        ("DROP TABLE a, b", "is not carried"),
        ("CREATE TABLE t AS SELECT * FROM u", "SELECT/LIKE"),
        ("CREATE TABLE t LIKE u", "SELECT/LIKE"),
        ("ALTER TABLE other.t ADD c INT", "works in database 'main' only"),
    ],
)
def test_refused_statements(sql: str, fragment: str) -> None:
    with pytest.raises(UnsupportedSchema, match=fragment):
        parse_ddl(sql, "main")


def test_unquote() -> None:
    assert [unquote(x) for x in ("`a``b`", '"a""b"', "[a b]", "plain")] == ["a`b", 'a"b', "a b", "plain"]
