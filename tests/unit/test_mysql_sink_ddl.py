"""MySQL DDL generated from SchemaChange (drainer/sinks/sql/mysql_ddl.py), no services."""

from __future__ import annotations

import pytest

from bridge.proto import row_pb2
from drainer.sinks.sql.mysql_ddl import MySQLDDL, column_type, default_clause, derived_type

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange


def mysql_table() -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(db="shop", table="orders", charset="utf8mb4", collation="utf8mb4_general_ci")
    schema.columns.add(id=1, name="id", type=T.BIGINT, unsigned=True, sql_type="bigint(20) unsigned")
    schema.columns.add(
        id=2, name="note", type=T.VARCHAR, length=50, nullable=True, sql_type="varchar(50)",
        charset="utf8mb4", collation="utf8mb4_general_ci", default_value="'it''s'",
    )  # fmt: skip
    schema.columns.add(id=3, name="state", type=T.ENUM, elems=["new", "it's"], sql_type="enum('new','it''s')")
    schema.columns.add(id=4, name="body", type=T.TEXT, nullable=True, sql_type="mediumtext")
    schema.max_column_id = 4
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    schema.indexes.add(name="by_body", columns=["body"])
    return schema


def test_create_table_of_a_mysql_upstream_keeps_its_types_charset_and_indexes() -> None:
    statements = MySQLDDL().plan(
        Change(kind=Change.CREATE_TABLE, db="shop", table="orders", table_schema=mysql_table()), None
    )
    assert statements[0] == "CREATE DATABASE IF NOT EXISTS `shop`"
    assert statements[1] == (
        "CREATE TABLE IF NOT EXISTS `shop`.`orders` (\n"
        "  `id` bigint(20) unsigned NOT NULL,\n"
        "  `note` varchar(50) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NULL DEFAULT 'it''s',\n"
        "  `state` ENUM('new','it''s') NOT NULL,\n"
        "  `body` mediumtext NULL,\n"
        "  PRIMARY KEY (`id`),\n"
        "  KEY `by_body` (`body`(255))\n"
        ") DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_general_ci"
    )


def test_create_table_of_a_sqlite_upstream_derives_types_and_compares_text_bytewise() -> None:
    schema = row_pb2.TableSchema(db="main", table="t")
    schema.columns.add(id=1, name="k", type=T.TEXT, sql_type="TEXT")  # a TEXT primary key
    schema.columns.add(
        id=2, name="amount", type=T.DECIMAL, precision=12, scale=2, nullable=True, sql_type="NUMERIC(12,2)"
    )
    schema.columns.add(id=3, name="at", type=T.DATETIME, fsp=3, nullable=True, sql_type="DATETIME(3)")
    schema.columns.add(id=4, name="blob", type=T.BLOB, nullable=True, sql_type="CLOB_NOT_MYSQL")
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["k"])
    (_, create) = MySQLDDL().plan(
        Change(kind=Change.CREATE_TABLE, db="main", table="t", table_schema=schema), None
    )
    assert "`k` VARCHAR(768) NOT NULL" in create and "`amount` DECIMAL(12,2) NULL" in create
    assert "`at` DATETIME(3) NULL" in create and "`blob` LONGBLOB NULL" in create
    assert create.endswith("DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")


def test_alter_is_the_difference_by_column_id_with_guards_on_mariadb() -> None:
    old = mysql_table()
    new = row_pb2.TableSchema()
    new.CopyFrom(old)
    new.columns[1].name = "remark"  # rename by id
    del new.columns[3]  # drop body (and its index)
    del new.indexes[1]
    new.columns.add(id=5, name="qty", type=T.INT, sql_type="int(11)", default_value="0")
    new.columns.add(id=6, name="first", type=T.INT, nullable=True)
    new.columns.insert(0, new.columns.pop())  # "first" becomes the first column
    new.indexes.add(name="by_qty", unique=True, columns=["qty"])
    new.max_column_id = 6
    change = Change(kind=Change.ALTER_TABLE, db="shop", table="orders", table_schema=new)
    (statement,) = MySQLDDL("mariadb").plan(change, old)
    assert statement == (
        "ALTER TABLE `shop`.`orders` DROP INDEX IF EXISTS `by_body`, DROP COLUMN IF EXISTS `body`, "
        "ADD COLUMN IF NOT EXISTS `first` INT NULL FIRST, "
        "CHANGE COLUMN IF EXISTS `note` `remark` varchar(50) CHARACTER SET utf8mb4 "
        "COLLATE utf8mb4_general_ci NULL DEFAULT 'it''s', "
        "ADD COLUMN IF NOT EXISTS `qty` int(11) NOT NULL DEFAULT 0 AFTER `state`, "
        "ADD UNIQUE KEY IF NOT EXISTS `by_qty` (`qty`)"
    )
    (plain,) = MySQLDDL("mysql").plan(change, old)
    assert (
        "IF EXISTS" not in plain
        and "IF NOT EXISTS" not in plain
        and "ADD UNIQUE KEY `by_qty` (`qty`)" in plain
    )
    assert (
        MySQLDDL().plan(Change(kind=Change.ALTER_TABLE, db="shop", table="orders", table_schema=old), old)
        == []
    )
    with pytest.raises(ValueError, match="previous schema is unknown"):
        MySQLDDL().plan(change, None)


def test_primary_key_changes_and_table_level_changes() -> None:
    old = mysql_table()
    new = row_pb2.TableSchema()
    new.CopyFrom(old)
    new.indexes[0].columns.append("state")
    (statement,) = MySQLDDL().plan(
        Change(kind=Change.ALTER_TABLE, db="shop", table="orders", table_schema=new), old
    )
    assert statement == "ALTER TABLE `shop`.`orders` DROP PRIMARY KEY, ADD PRIMARY KEY (`id`, `state`)"
    ddl = MySQLDDL()
    assert ddl.plan(Change(kind=Change.DROP_TABLE, db="a", table="b`c"), None) == [
        "DROP TABLE IF EXISTS `a`.`b``c`"
    ]
    assert ddl.plan(Change(kind=Change.TRUNCATE_TABLE, db="a", table="b"), None) == ["TRUNCATE TABLE `a`.`b`"]
    assert ddl.plan(Change(kind=Change.DROP_DATABASE, db="a"), None) == ["DROP DATABASE IF EXISTS `a`"]
    rename = Change(kind=Change.RENAME_TABLE, db="x", table="new", old_db="a", old_table="old")
    assert ddl.plan(rename, None)[-1] == "RENAME TABLE IF EXISTS `a`.`old` TO `x`.`new`"
    assert MySQLDDL("tidb").plan(rename, None)[-1] == "RENAME TABLE `a`.`old` TO `x`.`new`"


def test_types_defaults_and_what_is_left_out() -> None:
    column = row_pb2.Column(name="c", type=T.DECIMAL, sql_type="decimal(10,2); DROP TABLE x")
    assert column_type(column, mysql_origin=True) == "DECIMAL(65,30)"  # not a plain type: derived
    assert derived_type(row_pb2.Column(type=T.SET, elems=["a", "b\\"])) == "SET('a','b\\\\')"
    assert derived_type(row_pb2.Column(type=T.BIT)) == "BIT(64)"
    assert derived_type(row_pb2.Column(type=T.TIMESTAMP, fsp=6)) == "TIMESTAMP(6)"
    now = row_pb2.Column(name="t", type=T.TIMESTAMP, fsp=3, default_value="current_timestamp(3)")
    assert default_clause(now) == " DEFAULT CURRENT_TIMESTAMP(3)"
    assert default_clause(row_pb2.Column(name="x", type=T.INT, default_value="(1 + 1)")) == ""
    assert default_clause(row_pb2.Column(name="x", type=T.TEXT, default_value="'a'")) == " DEFAULT ('a')"
    assert (
        default_clause(row_pb2.Column(name="x", type=T.INT, nullable=True, default_value="NULL"))
        == " DEFAULT NULL"
    )
