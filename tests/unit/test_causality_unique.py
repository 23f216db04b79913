"""Tables with a secondary unique index are kept on one worker per flush window (causality.KeyPlan.serial):
which tables get the table key, and how the sink's routing uses it (no services)."""

from __future__ import annotations

from bridge.proto import row_pb2
from drainer.sinks.mysql.causality import Causality, key_plan
from tests.support.binlog_events import table_schema

T = row_pb2.ColumnType


def schema(key: list[str], unique: list[str], nullable_uk: bool = False) -> row_pb2.TableSchema:
    columns = [
        row_pb2.Column(name="id", type=T.INT),
        row_pb2.Column(name="uk", type=T.INT, nullable=nullable_uk),
        row_pb2.Column(name="v", type=T.VARCHAR, nullable=True),
    ]
    return table_schema("db", "t", columns, key=key, unique=unique)


def test_only_tables_with_a_unique_index_besides_the_clustered_one_get_the_table_key() -> None:
    assert key_plan(schema(["id"], [])).serial is None  # primary key only
    assert key_plan(schema(["id"], ["uk"])).serial == ("db.t", -1)  # primary key + unique uk
    # no primary key: InnoDB clusters by the first unique index of NOT NULL columns
    assert key_plan(schema([], ["uk"])).serial is None
    # ... and by a hidden row id when that index allows NULL: uk is then a secondary index
    assert key_plan(schema([], ["uk"], nullable_uk=True)).serial == ("db.t", -1)
    # the unique index is the primary key again: nothing besides it
    assert key_plan(schema(["uk"], ["uk"])).serial is None


def test_the_table_key_first_sends_every_change_of_the_table_to_one_worker() -> None:
    plan, plain = key_plan(schema(["id"], ["uk"])), key_plan(schema(["id"], []))
    assert plan.serial is not None
    causality = Causality(16)
    serial = {causality.route((plan.serial, *plan.keys(None, (i, i, "x")))) for i in range(200)}
    assert len(serial) == 1 and None not in serial
    # a unique value moving to another row: still that worker, no conflict
    moved = plan.keys((3, 3, "x"), (3, 500, "y"))
    assert causality.route((plan.serial, *moved)) in serial and causality.conflicts == 0
    # the same rows keyed without the table key spread over the workers
    causality.reset()
    spread = {causality.route(plain.keys(None, (i, i, "x"))) for i in range(200)}
    assert len(spread) > 1


def test_keys_of_rows_still_cover_both_images_of_every_unique_index() -> None:
    plan = key_plan(schema(["id"], ["uk"]))
    keys = plan.keys((1, 10, "a"), (2, 20, "b"))
    assert keys == [("db.t", 0, 1), ("db.t", 1, 10), ("db.t", 0, 2), ("db.t", 1, 20)]
