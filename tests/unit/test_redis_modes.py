"""Which keys an invalidation deletes: before and after images, only changed after keys, and the
one-column fast path giving exactly what the general path gives."""

from __future__ import annotations

from decimal import Decimal

import pytest

from bridge.proto import row_pb2
from bridge.sink.events import RowChange
from drainer.sinks.redis.config import load_config
from drainer.sinks.redis.modes import invalidation_keys, invalidator
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


@pytest.mark.parametrize(
    "templates",
    [("k:{id}",), ("e:{email}",), ("w:{w}",), ("p:{p}",), ("k:{id}", "e:{email}"), ("{id}:{email}",)],
)
def test_the_fast_path_gives_what_the_general_path_gives(templates: tuple[str, ...]) -> None:
    rules = plan(*templates)
    fast = invalidator(rules)
    for row in ROWS:
        keys: list[str] = []
        fast(row, keys)
        assert keys == invalidation_keys(rules, row), (templates, row)


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
