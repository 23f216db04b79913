"""bridge.producer.catalog.assign_ids: table and column ids across schema changes."""

from __future__ import annotations

from bridge.producer.catalog import assign_ids, without_ids
from bridge.proto import row_pb2

T = row_pb2.ColumnType


def described(*names: str) -> row_pb2.TableSchema:
    """A table as describing it upstream gives it: no ids."""
    return row_pb2.TableSchema(
        db="d", table="t", columns=[row_pb2.Column(name=n, type=T.INT, nullable=True) for n in names]
    )


def ids(schema: row_pb2.TableSchema) -> dict[str, int]:
    return {c.name: c.id for c in schema.columns}


def test_a_new_table_numbers_its_columns_from_one() -> None:
    schema = assign_ids(described("a", "b"), None, table_id=7)
    assert (schema.table_id, ids(schema), schema.max_column_id) == (7, {"a": 1, "b": 2}, 2)


def test_ids_carry_over_and_dropped_ids_are_never_reused() -> None:
    v1 = assign_ids(described("a", "b", "c"), None, 7)
    v2 = assign_ids(described("a", "c"), v1, 7)  # b dropped
    assert (ids(v2), v2.max_column_id) == ({"a": 1, "c": 3}, 3)
    v3 = assign_ids(described("a", "c", "b"), v2, 7)  # a new b
    assert ids(v3) == {"a": 1, "c": 3, "b": 4}
    v4 = assign_ids(described("a", "b"), v3, 7)  # the last column dropped: its id stays spent
    v5 = assign_ids(described("a", "b", "z"), v4, 7)
    assert (ids(v5), v5.max_column_id) == ({"a": 1, "b": 4, "z": 5}, 5)


def test_names_match_case_insensitively_and_renames_keep_ids() -> None:
    v1 = assign_ids(described("a", "B"), None, 1)
    v2 = assign_ids(described("A", "b"), v1, 1)
    assert ids(v2) == {"A": 1, "b": 2}
    v3 = assign_ids(described("a", "bee"), v2, 1, renames={"b": "bee"})
    assert ids(v3) == {"a": 1, "bee": 2}


def test_without_ids_is_what_describing_gives() -> None:
    live = described("a", "b")
    assert without_ids(assign_ids(live, None, 3)) == live
