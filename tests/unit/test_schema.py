"""Table-schema rules, key columns and column ids."""

from __future__ import annotations

from typing import Any, cast

import pytest

from bridge.errors import UserError
from bridge.proto import row_pb2
from bridge.schema import (
    SchemaError,
    key_columns,
    key_positions,
    next_column_id,
    table_name,
    validate_table_schema,
)

T = row_pb2.ColumnType


def column(id_: int, name: str, type_: row_pb2.ColumnType = T.INT, **extra: Any) -> row_pb2.Column:
    return row_pb2.Column(id=id_, name=name, type=type_, **extra)


def schema(
    columns: list[row_pb2.Column], indexes: list[row_pb2.Index] | None = None, **extra: Any
) -> row_pb2.TableSchema:
    return row_pb2.TableSchema(db="shop", table="t", columns=columns, indexes=indexes or [], **extra)


def index(name: str, *columns: str, primary: bool = False, unique: bool = False) -> row_pb2.Index:
    return row_pb2.Index(name=name, columns=columns, primary=primary, unique=unique)


def test_a_good_schema_passes() -> None:
    validate_table_schema(
        schema(
            [
                column(1, "id"),
                column(2, "kind", T.ENUM, elems=["a", "b"]),
                column(3, "p", T.DECIMAL, precision=65, scale=30),
            ],
            [index("PRIMARY", "id", primary=True)],
            max_column_id=5,
        )
    )


@pytest.mark.parametrize(
    ("columns", "indexes", "message"),
    [
        ([column(0, "a")], [], "column 'a' has id 0; ids start at 1"),
        ([column(1, "a"), column(1, "b")], [], "column id 1 is used twice"),
        ([column(1, "a"), column(2, "A")], [], "column name 'A' is used twice"),
        ([column(1, "a", T.COLUMN_TYPE_UNSPECIFIED)], [], "column 'a' has no known type"),
        ([column(1, "a", cast(row_pb2.ColumnType, 99))], [], "no known type"),  # a number no type has
        ([column(1, "a", T.ENUM)], [], "ENUM without members"),
        ([column(1, "a", T.SET, elems=["x", "x"])], [], "lists a member twice"),
        ([column(1, "a", T.SET, elems=["x,y"])], [], "member containing ','"),
        ([column(1, "a", T.DECIMAL, precision=66)], [], "precision 66, outside 1..65"),
        ([column(1, "a", T.DECIMAL, precision=5, scale=6)], [], "scale 6"),
        ([column(1, "a", T.DATETIME, fsp=7)], [], "fsp 7"),
        ([column(1, "a", T.BIT, length=65)], [], "at most 64 bits"),
        ([column(1, "a")], [index("i", "b")], "index 'i' names unknown column 'b'"),
        ([column(1, "a")], [index("i")], "index 'i' has no columns"),
        (
            [column(1, "a")],
            [index("p", "a", primary=True), index("q", "a", primary=True)],
            "2 indexes are marked primary",
        ),
    ],
)
def test_schema_faults_are_named(
    columns: list[row_pb2.Column], indexes: list[row_pb2.Index], message: str
) -> None:
    with pytest.raises(SchemaError, match=message) as caught:
        validate_table_schema(schema(columns, indexes))
    assert "table shop.t" in str(caught.value)
    assert isinstance(caught.value, UserError)


def test_column_ids_never_pass_max_column_id() -> None:
    with pytest.raises(SchemaError, match="above max_column_id 2"):
        validate_table_schema(schema([column(3, "a")], max_column_id=2))


def test_key_is_the_primary_key_in_index_order() -> None:
    table = schema(
        [column(1, "a"), column(2, "b"), column(3, "c")],
        [index("u", "a", unique=True), index("PRIMARY", "c", "B", primary=True)],
    )
    assert [c.name for c in key_columns(table)] == ["c", "b"]
    assert key_positions(table) == (2, 1)


def test_key_falls_back_to_the_first_unique_index_over_not_null_columns() -> None:
    table = schema(
        [column(1, "a", nullable=True), column(2, "b"), column(3, "c")],
        [
            index("plain", "b"),
            index("u_a", "a", unique=True),
            index("u_bc", "b", "c", unique=True),
            index("u_c", "c", unique=True),
        ],
    )
    assert [c.name for c in key_columns(table)] == ["b", "c"]
    assert key_positions(table) == (1, 2)


def test_no_key_without_primary_or_not_null_unique_index() -> None:
    table = schema([column(1, "a", nullable=True)], [index("u", "a", unique=True), index("i", "a")])
    assert key_columns(table) == () and key_positions(table) == ()


def test_key_columns_refuse_an_index_over_an_unknown_column() -> None:
    with pytest.raises(SchemaError, match="index 'PRIMARY' names unknown column 'x'"):
        key_columns(schema([column(1, "a")], [index("PRIMARY", "x", primary=True)]))


def test_next_column_id_never_reuses_a_dropped_id() -> None:
    assert next_column_id(schema([])) == 1
    assert next_column_id(schema([column(1, "a"), column(4, "b")])) == 5
    assert next_column_id(schema([column(1, "a")], max_column_id=7)) == 8


def test_table_name() -> None:
    assert table_name(schema([])) == "shop.t"
    assert table_name(row_pb2.TableSchema(table="t")) == "t"
