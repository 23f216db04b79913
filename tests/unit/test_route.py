"""[[route]] rules (drainer.sync.route): patterns, targets, config errors naming the rule, and the
events, context and DDL text a sink sees behind a RoutingSink."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from bridge.binlog import commit, ddl_prewrite, parse_binlog, read_schema_change
from bridge.errors import ConfigError
from bridge.proto import row_pb2
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.events import DDLEvent, Event, RowChange, TxnEvent
from bridge.sink.schema import SchemaTracker
from drainer.config import config_from_dict
from drainer.sync.route import Router, RoutingSink, parse_routes, rewrite_query

Change = row_pb2.SchemaChange
T = row_pb2.ColumnType


def router(*rules: dict[str, Any]) -> Router:
    return Router.from_config(parse_routes(list(rules)))


def items(db: str = "main", name: str = "items", table_id: int = 7) -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(table_id=table_id, db=db, table=name, max_column_id=1)
    schema.columns.add(id=1, name="id", type=T.BIGINT)
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return schema


def test_patterns_and_targets_first_rule_wins() -> None:
    r = router(
        {
            "schema-pattern": "main",
            "table-pattern": "order?",
            "target-schema": "shop_b",
            "target-table": "o_{table}",
        },
        {"schema-pattern": "MA*", "target-schema": "{schema}_copy"},
    )
    assert r.table("main", "orders") == ("shop_b", "o_orders")
    assert r.table("main", "orders_2") == ("main_copy", "orders_2")  # ? is one character
    assert r.table("Main", "Items") == ("Main_copy", "Items")  # case-insensitive match, names kept
    assert r.table("other", "orders") == ("other", "orders")
    assert r.database("main") == "main_copy"


def test_database_ddl_ignores_rules_that_need_the_table() -> None:
    r = router({"schema-pattern": "*", "table-pattern": "*", "target-schema": "{schema}_{table}"})
    assert r.database("main") == "main"
    assert r.table("main", "t") == ("main_t", "t")


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ([{"schema-pattern": "main"}], "route[0].target-schema: required"),
        ([{"target-schema": "x"}], "route[0].schema-pattern: required"),
        (
            [{"schema-pattern": "a", "target-schema": "b"}, {"schema-pattern": "a", "target-schem": "b"}],
            "route[1].target-schem: unknown key",
        ),
        (
            [{"schema-pattern": "a", "target-schema": "{db}"}],
            "route[0].target-schema: unknown placeholder {db}",
        ),
        (
            [{"schema-pattern": "a", "target-schema": "b", "target-table": "{table"}],
            "route[0].target-table: unbalanced",
        ),
        ([{"schema-pattern": "a", "target-schema": 3}], "route[0].target-schema: expected a string"),
    ],
)
def test_config_errors_name_the_rule(rules: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("{", r"\{")):
        config_from_dict({"route": rules})


def test_drainer_config_reads_the_route_array() -> None:
    config = config_from_dict({"route": [{"schema-pattern": "main", "target-schema": "shop_b"}]})
    assert [(r.schema_pattern, r.target_schema, r.target_table) for r in config.route] == [
        ("main", "shop_b", "{table}")
    ]
    with pytest.raises(ConfigError, match=r"route: expected an array of tables"):
        config_from_dict({"route": {"schema-pattern": "main"}})


@pytest.mark.parametrize(
    ("query", "kind", "expected"),
    [
        (
            "CREATE TABLE IF NOT EXISTS items (id INT PRIMARY KEY)",
            Change.CREATE_TABLE,
            "CREATE TABLE IF NOT EXISTS `shop_b`.`items` (id INT PRIMARY KEY)",
        ),
        (
            "alter table `main`.`items` add column x int",
            Change.ALTER_TABLE,
            "alter table `shop_b`.`items` add column x int",
        ),
        ("DROP TABLE main.items", Change.DROP_TABLE, "DROP TABLE `shop_b`.`items`"),
        ("TRUNCATE items", Change.TRUNCATE_TABLE, "TRUNCATE `shop_b`.`items`"),
        ("CREATE INDEX ix ON items (id)", Change.ALTER_TABLE, "CREATE INDEX ix ON `shop_b`.`items` (id)"),
    ],
)
def test_the_statement_target_is_rewritten(
    query: str, kind: row_pb2.SchemaChange.Kind, expected: str
) -> None:
    r = router({"schema-pattern": "main", "target-schema": "shop_b"})
    change = Change(kind=kind, db="main", table="items")
    assert rewrite_query(query, change, r.change(change)) == expected


def test_rename_and_database_statements_are_rewritten() -> None:
    r = router(
        {
            "schema-pattern": "main",
            "table-pattern": "*",
            "target-schema": "shop_b",
            "target-table": "b_{table}",
        },
        {"schema-pattern": "main", "target-schema": "shop_b"},
    )
    rename = Change(kind=Change.RENAME_TABLE, db="main", table="new", old_db="main", old_table="old")
    assert rewrite_query("RENAME TABLE old TO new", rename, r.change(rename)) == (
        "RENAME TABLE `shop_b`.`b_old` TO `shop_b`.`b_new`"
    )
    database = Change(kind=Change.CREATE_DATABASE, db="main")
    assert rewrite_query("CREATE DATABASE IF NOT EXISTS main", database, r.change(database)) == (
        "CREATE DATABASE IF NOT EXISTS `shop_b`"
    )


class Recorder(Sink):
    name = "recorder"

    def __init__(self) -> None:
        self.events: list[Event] = []

    def write(self, events: Sequence[Event]) -> None:
        self.events.extend(events)

    def flush(self) -> int:
        return 0


def ddl_event(change: row_pb2.SchemaChange, query: str, before: row_pb2.TableSchema | None) -> DDLEvent:
    start = 10
    binlog = ddl_prewrite(start, query, 1, change)
    binlog.MergeFrom(commit(start, 11))
    after = change.table_schema if change.HasField("table_schema") else None
    return DDLEvent(start, 11, binlog.SerializeToString(), query, change, before, after)


def test_a_sink_behind_routes_sees_routed_context_rows_and_ddl() -> None:
    r = router({"schema-pattern": "main", "target-schema": "shop_b"})
    tracker = SchemaTracker()
    tracker.apply(Change(kind=Change.CREATE_TABLE, db="main", table="items", table_schema=items()))
    inner = Recorder()
    sink = RoutingSink(inner, r)
    sink.open(SinkContext.at(5, tracker.snapshot()))
    assert [(t.db, t.table) for t in inner.context.tables] == [("shop_b", "items")]
    restored = SchemaTracker.restore(inner.context.schema_snapshot)
    assert [t.name for t in restored.tables] == ["shop_b.items"] and restored.databases == ["shop_b"]

    schema = items()
    rows = [RowChange("insert", schema, None, (1,)), RowChange("insert", schema, None, (2,))]
    wider = items()
    wider.columns.add(id=2, name="x", type=T.BIGINT, nullable=True)
    wider.max_column_id = 2
    alter = Change(kind=Change.ALTER_TABLE, db="main", table="items", table_schema=wider)
    sink.write(
        [
            TxnEvent(1, 2, b"", lambda: iter(rows), 2),
            ddl_event(alter, "ALTER TABLE items ADD x BIGINT", schema),
        ]
    )
    txn, ddl = inner.events
    assert isinstance(txn, TxnEvent) and isinstance(ddl, DDLEvent)
    changes = list(txn.changes())
    assert [(c.table.db, c.table.table, c.after) for c in changes] == [
        ("shop_b", "items", (1,)),
        ("shop_b", "items", (2,)),
    ]
    assert changes[0].table is changes[1].table  # one routed schema per table, as sinks expect
    sink.write([TxnEvent(20, 21, b"", lambda: iter(rows[:1]), 1)])
    later = inner.events[-1]
    assert isinstance(later, TxnEvent)
    assert next(later.changes()).table is changes[0].table  # and across events: sinks cache by identity
    assert schema.db == "main"  # the tracker's schema is untouched
    assert (ddl.change.db, ddl.change.table, ddl.change.table_schema.db) == ("shop_b", "items", "shop_b")
    assert ddl.before is not None and ddl.after is not None
    assert (ddl.before.db, ddl.after.db) == ("shop_b", "shop_b")
    assert ddl.query == "ALTER TABLE `shop_b`.`items` ADD x BIGINT"
    binlog = parse_binlog(ddl.payload)
    stored = read_schema_change(binlog)
    assert stored is not None and stored.db == "shop_b" and binlog.ddl_query.decode() == ddl.query
    assert binlog.commit_ts == 11


def test_two_tables_routed_onto_one_name_is_an_error_at_open() -> None:
    r = router({"schema-pattern": "*", "target-schema": "all"})
    tracker = SchemaTracker()
    tracker.apply(Change(kind=Change.CREATE_TABLE, db="a", table="items", table_schema=items("a")))
    tracker.apply(
        Change(kind=Change.CREATE_TABLE, db="b", table="items", table_schema=items("b", table_id=8))
    )
    with pytest.raises(ConfigError, match=r"both route to all\.items"):
        RoutingSink(Recorder(), r).open(SinkContext.at(5, tracker.snapshot()))
