"""Which keys an invalidation deletes: before and after images, only changed after keys, and a
run of changes (its one-column fast path included) giving exactly what the general path gives."""

from __future__ import annotations

from decimal import Decimal

import pytest

from bridge.proto import row_pb2
from bridge.sink.events import RowChange
from drainer.sinks.redis.config import load_config
from drainer.sinks.redis.modes import invalidation_keys, invalidation_run
from drainer.sinks.redis.rules import Rules, TableRule

T = row_pb2.ColumnType


def plan(*templates: str) -> tuple[TableRule, ...]:
    schema = row_pb2.TableSchema(table_id=1, db="d", table="t")
    for n, (name, kind) in enumerate(
        (("id", T.BIGINT), ("email", T.VARCHAR), ("w", T.DOUBLE), ("p", T.DECIMAL)), 1
    ):
        schema.columns.add(id=n, name=name, type=kind, nullable=name != "id")
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    config = load_config({"rules": [{"keys": list(templates)}]})
    return Rules(config.rules, ":", "null").plan(schema)


ROWS = [
    RowChange("insert", row_pb2.TableSchema(), None, (1, "a@x", 0.5, Decimal("1.00"))),
    RowChange("delete", row_pb2.TableSchema(), (1, "a@x", 0.5, Decimal("1.00")), None),
    RowChange("update", row_pb2.TableSchema(), (1, "a@x", 0.5, None), (1, "b@x", 0.5, None)),
    RowChange("update", row_pb2.TableSchema(), (1, "a@x", 0.5, None), (2, "a@x", 0.5, None)),
    RowChange("update", row_pb2.TableSchema(), (1, None, -0.0, None), (1, "c@x", 0.0, None)),
    RowChange(
        "update", row_pb2.TableSchema(), (1, None, 1.0, Decimal("1.0")), (1, None, 1.0, Decimal("1.00"))
    ),
]


def test_before_and_after_keys() -> None:
    rules = plan("k:{id}", "e:{email}")
    insert, delete, email_change, pk_change, null_to_value, _ = ROWS
    assert invalidation_keys(rules, insert) == ["k:1", "e:a@x"]
    assert invalidation_keys(rules, delete) == ["k:1", "e:a@x"]
    assert invalidation_keys(rules, email_change) == ["k:1", "e:a@x", "e:b@x"]
    assert invalidation_keys(rules, pk_change) == ["k:1", "k:2", "e:a@x"]
    assert invalidation_keys(rules, null_to_value) == ["k:1", "e:null", "e:c@x"]
    weights = plan("w:{w}")
    assert invalidation_keys(weights, null_to_value) == ["w:-0.0", "w:0.0"]  # equal floats, other text
    prices = plan("p:{p}")
    assert invalidation_keys(prices, ROWS[5]) == ["p:1.0", "p:1.00"]


@pytest.mark.parametrize(
    "templates",
    [("k:{id}",), ("e:{email}",), ("w:{w}",), ("p:{p}",), ("k:{id}", "e:{email}"), ("{id}:{email}",)],
)
def test_a_run_gives_what_the_general_path_gives_change_by_change(templates: tuple[str, ...]) -> None:
    """A run of one table's changes: the keys of each change in order, nothing for an update
    whose images are equal, and it stops at the first change of another table."""
    rules = plan(*templates)
    table, other = row_pb2.TableSchema(table="t"), row_pb2.TableSchema(table="u")
    same = RowChange("update", table, (3, "s@x", 1.5, None), (3, "s@x", 1.5, None))
    rows = [RowChange(r.kind, table, r.before, r.after) for r in ROWS] + [same]
    changed = [row for row in rows if row.kind != "update" or row.before != row.after]
    assert same not in changed and len(changed) < len(rows)
    expected = [key for row in changed for key in invalidation_keys(rules, row)]
    stranger = RowChange("delete", other, (9, "z@x", 0.0, None), None)
    rest = iter([*rows[1:], stranger, rows[0]])
    keys: list[str] = []
    stopped, handled = invalidation_run(rules)(rows[0], rest, keys, 10_000)
    assert (keys, stopped, handled) == (expected, stranger, len(rows))
    assert next(rest) is rows[0]


@pytest.mark.parametrize("templates", [("k:{id}",), ("k:{id}", "e:{email}")])
def test_a_run_stops_once_it_holds_the_limit(templates: tuple[str, ...]) -> None:
    """At ``limit`` keys the run returns the next change unhandled; the caller goes on from it."""
    rules = plan(*templates)
    table = row_pb2.TableSchema(table="t")
    rows = [RowChange("delete", table, (n, f"{n}@x", 0.0, None), None) for n in range(10)]
    run = invalidation_run(rules)
    rest = iter(rows[1:])
    keys: list[str] = []
    stopped, handled = run(rows[0], rest, keys, 3)
    assert stopped is rows[handled] and len(keys) >= 3 and handled < len(rows)
    total = handled
    while stopped is not None:
        stopped, handled = run(stopped, rest, keys, 10_000)
        total += handled
    assert total == len(rows)
    assert keys == [key for row in rows for key in invalidation_keys(rules, row)]
