"""bridge.apps.consume.apply: released changes become drainer events applied by the real sqlite sink;
a second run over the same target skips what the first applied but still reads the schemas."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from bridge.apps.consume.apply import Applier, ApplyError, SchemaBook, schema_change, sink_for
from bridge.apps.consume.items import DDLItem, Ordered, RowItem, Where
from bridge.errors import ConfigError
from bridge.proto import row_pb2
from drainer.sinks.sqlite.sink import SQLiteSink

T = row_pb2.ColumnType
TOPIC = "bridge.shop.items"


def items_schema(with_note: bool = False) -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(table_id=7, db="shop", table="items")
    schema.columns.add(id=1, name="id", type=T.BIGINT)
    schema.columns.add(id=2, name="name", type=T.VARCHAR, length=32, nullable=True)
    if with_note:
        schema.columns.add(id=3, name="note", type=T.TEXT, nullable=True)
    schema.max_column_id = 3 if with_note else 2
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return schema


def ddl(commit_ts: int, kind: str, schema: row_pb2.TableSchema | None, query: str) -> DDLItem:
    record: dict[str, Any] = {
        "cluster_id": 1, "start_ts": commit_ts - 1, "commit_ts": commit_ts, "ts_ms": 0, "db": "shop",
        "table": "items", "kind": kind, "query": query, "old_db": "", "old_table": "", "topic": TOPIC,
        "table_schema": schema.SerializeToString() if schema is not None else b"",
    }  # fmt: skip
    return DDLItem(Where("bridge._ddl", 0, commit_ts), record)


def change(commit_ts: int, pos: int, op: str, before: Any = None, after: Any = None) -> RowItem:
    source = {
        "cluster_id": 1, "db": "shop", "table": "items", "start_ts": commit_ts - 1, "commit_ts": commit_ts,
        "pos": pos, "last": False,
    }  # fmt: skip
    return RowItem(Where(TOPIC, 0, commit_ts * 10 + pos), None, op, before, after, source, 0)


def by_name(schema: row_pb2.TableSchema, record: Mapping[str, Any]) -> tuple[object, ...]:
    """Row records here hold plain values by column name (what TableAvro.values does for these types)."""
    return tuple(record[c.name] for c in schema.columns)


def rows(directory: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(directory / "shop.db") as conn:
        return list(conn.execute("SELECT * FROM items ORDER BY id"))


def first_run() -> list[Ordered]:
    return [
        ddl(
            10, "CREATE_TABLE", items_schema(), "CREATE TABLE items (id BIGINT PRIMARY KEY, name VARCHAR(32))"
        ),
        change(20, 0, "c", after={"id": 1, "name": "a"}),
        change(20, 1, "c", after={"id": 2, "name": "b"}),
        change(30, 0, "u", before={"id": 1, "name": "a"}, after={"id": 1, "name": "A"}),
        change(30, 1, "d", before={"id": 2, "name": "b"}),
    ]


def second_run() -> list[Ordered]:
    return [
        ddl(40, "ALTER_TABLE", items_schema(with_note=True), "ALTER TABLE items ADD note TEXT"),
        change(50, 0, "c", after={"id": 3, "name": "c", "note": "new"}),
        change(
            50, 1, "u", before={"id": 1, "name": "A", "note": None}, after={"id": 1, "name": "A", "note": "x"}
        ),
    ]


def test_changes_and_ddl_are_applied_in_order_and_the_checkpoint_moves(tmp_path: Path) -> None:
    applier = Applier(SQLiteSink({"path": str(tmp_path)}, tmp_path), by_name)
    assert applier.apply(first_run(), 35) == 35
    assert rows(tmp_path) == [(1, "A")]
    assert applier.apply(second_run(), 60) == 60
    applier.close()
    assert rows(tmp_path) == [(1, "A", "x"), (3, "c", "new")]
    assert (applier.stats.rows, applier.stats.ddl, applier.stats.transactions) == (6, 2, 3)


def test_a_second_run_skips_what_was_applied_but_reads_the_schemas(tmp_path: Path) -> None:
    first = Applier(SQLiteSink({"path": str(tmp_path)}, tmp_path), by_name)
    first.apply(first_run(), 35)
    first.close()
    again = Applier(SQLiteSink({"path": str(tmp_path)}, tmp_path), by_name)
    assert again.open() == 35
    # everything is read from the beginning again: the first run's part is skipped, its DDL still
    # teaches the table's schema (the ALTER needs it), the rest is applied
    again.apply(first_run() + second_run(), 60)
    again.close()
    assert rows(tmp_path) == [(1, "A", "x"), (3, "c", "new")]
    assert again.stats.skipped == 5 and again.stats.rows == 2 and again.stats.ddl == 1


def test_a_row_of_a_table_without_a_create_table_event_is_a_clear_error(tmp_path: Path) -> None:
    applier = Applier(SQLiteSink({"path": str(tmp_path)}, tmp_path), by_name)
    with pytest.raises(ApplyError, match=r"shop\.items at commit_ts 20 .*no schema known"):
        applier.apply([change(20, 0, "c", after={"id": 1, "name": "a"})], 20)
    applier.close()


def test_a_row_that_does_not_fit_its_schema_names_table_and_commit_ts(tmp_path: Path) -> None:
    applier = Applier(SQLiteSink({"path": str(tmp_path)}, tmp_path), by_name)
    items = [first_run()[0], change(20, 0, "c", after={"id": 1})]
    with pytest.raises(ApplyError, match=r"shop\.items at commit_ts 20 .*does not fit"):
        applier.apply(items, 20)
    applier.close()


def test_schema_book_follows_rename_drop_and_drop_database() -> None:
    book = SchemaBook()
    book.apply(schema_change({"kind": "CREATE_TABLE", "db": "shop", "table": "items",
                              "table_schema": items_schema().SerializeToString()}))  # fmt: skip
    assert book.get("SHOP", "Items") is not None
    renamed = items_schema()
    renamed.table = "goods"
    rename = {"kind": "RENAME_TABLE", "db": "shop", "table": "goods", "old_db": "shop", "old_table": "items"}
    book.apply(schema_change({**rename, "table_schema": renamed.SerializeToString()}))
    goods = book.get("shop", "goods")
    assert book.get("shop", "items") is None and goods is not None and goods.table == "goods"
    book.apply(schema_change({"kind": "DROP_TABLE", "db": "shop", "table": "goods"}))
    assert len(book) == 0
    book.apply(schema_change({"kind": "CREATE_TABLE", "db": "shop", "table": "items",
                              "table_schema": items_schema().SerializeToString()}))  # fmt: skip
    book.apply(schema_change({"kind": "DROP_DATABASE", "db": "shop", "table": ""}))
    assert len(book) == 0
    with pytest.raises(ApplyError, match="unknown kind 'MERGE'"):
        schema_change({"kind": "MERGE", "commit_ts": 5})


def test_sink_for_rejects_a_bad_dsn_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match="--apply"):
        sink_for("postgres://x@y/z")


def test_a_key_only_message_cannot_be_applied(tmp_path: Path) -> None:
    applier = Applier(SQLiteSink({"path": str(tmp_path)}, tmp_path), by_name)
    items = [first_run()[0], change(20, 0, "c")]  # the sink's oversize = "key-only": no images
    with pytest.raises(ApplyError, match=r"shop\.items at commit_ts 20 .*insert without its after image"):
        applier.apply(items, 20)
    applier.close()
