"""bridge.rowencode's generated per-table encoder (what RowCodec.encode runs) writes the very bytes
RowCodec.encode_reference writes, on seeded random tables of every column type (extremes, zeros,
empty and long text, NULLs), and raises the reference's errors for what the reference refuses."""

from __future__ import annotations

import random
import re
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec, RowValueError
from bridge.rowencode import fast_encoder, varint
from tests.unit.test_avro_random import random_column, random_value

T = row_pb2.ColumnType


def edge_value(rng: random.Random, column: row_pb2.Column) -> Any:
    """Values at the fast paths' edges: range ends, one- and two-byte lengths, zero fields."""
    kind = column.type
    bits = {T.TINYINT: 8, T.SMALLINT: 16, T.MEDIUMINT: 24, T.INT: 32, T.BIGINT: 64}.get(kind)
    if bits:
        if column.unsigned:
            return rng.choice([0, 1, 127, 128, (1 << bits) - 1])
        return rng.choice([0, -1, 63, 64, -64, -65, -(1 << (bits - 1)), (1 << (bits - 1)) - 1])
    if kind in (T.CHAR, T.VARCHAR, T.TEXT):
        limit = column.length if kind != T.TEXT else 300
        return rng.choice(
            ["", "é" * min(limit, 63), "x" * min(limit, 125), "y" * min(limit, 126), "z" * limit]
        )
    if kind in (T.BINARY, T.VARBINARY, T.BLOB):
        limit = column.length if kind != T.BLOB else 300
        return rng.choice([b"", b"\x00" * min(limit, 125), b"\xff" * limit])
    if kind in (T.FLOAT, T.DOUBLE):
        return rng.choice([0.0, -0.0, 1.5, -2.25e300])
    if kind == T.DATETIME:
        return rng.choice(
            [
                datetime(1, 1, 1),
                datetime(127, 12, 31),
                datetime(128, 1, 1),
                datetime(9999, 12, 31, 23, 59, 59),
            ]
        )
    return random_value(rng, column)


@pytest.mark.parametrize("seed", range(16))
def test_the_fast_encoder_writes_the_reference_bytes(seed: int) -> None:
    rng = random.Random(2000 + seed)
    schema = row_pb2.TableSchema(db="r", table=f"t{seed}", table_id=seed + 1)
    for column_id in range(1, rng.randint(2, 40)):
        schema.columns.add().CopyFrom(random_column(rng, column_id))
    schema.max_column_id = len(schema.columns)
    codec = RowCodec(schema)
    encode = fast_encoder(codec)
    for i in range(60):
        pick = random_value if i % 2 else edge_value
        values = [pick(rng, c) for c in schema.columns]
        reference = codec.encode_reference(values)
        assert encode(values) == reference
        assert codec.encode(values) == reference
        assert codec.decode(encode(values)) == codec.decode(reference)


def test_varint_is_protobufs() -> None:
    for value in (0, 1, 127, 128, 300, 16383, 16384, (1 << 63) - 1, (1 << 64) - 1):
        assert b"\x18" + varint(value) == row_pb2.Datum(uint_value=value).SerializeToString()


def test_what_the_reference_refuses_raises_its_error() -> None:
    schema = row_pb2.TableSchema(db="d", table="t", table_id=1, max_column_id=5)
    schema.columns.add(id=1, name="n", type=T.INT)
    schema.columns.add(id=2, name="s", type=T.VARCHAR, length=3, nullable=True)
    schema.columns.add(id=3, name="c", type=T.DECIMAL, precision=4, scale=2, nullable=True)
    schema.columns.add(id=4, name="d", type=T.DATETIME, fsp=0, nullable=True)
    schema.columns.add(id=5, name="e", type=T.DOUBLE, nullable=True)
    codec = RowCodec(schema)
    encode = fast_encoder(codec)
    bad_rows: list[tuple[Any, ...]] = [
        (None, None, None, None, None),  # NULL in NOT NULL
        (1 << 31, None, None, None, None),  # out of range
        (1, "abcd", None, None, None),  # too long
        (1, "\ud800", None, None, None),  # not UTF-8
        (1, None, Decimal("123.45"), None, None),  # too many integer digits
        (1, None, Decimal("1.234"), None, None),  # would round
        (1, None, Decimal("NaN"), None, None),
        (1, None, None, datetime(2024, 1, 1, 0, 0, 0, 5), None),  # finer than fsp 0
        (1, None, None, None, float("inf")),
        (1, None, None, None, "1.5"),
        (1, None, None),  # wrong count
    ]
    for row in bad_rows:
        with pytest.raises(RowValueError) as expected:
            codec.encode_reference(row)
        for encoder in (encode, codec.encode):
            with pytest.raises(RowValueError) as got:
                encoder(row)
            assert str(got.value) == str(expected.value)
    # values the reference converts (an int for DECIMAL, a bool for INT, a shorter scale): the same bytes
    good_rows: list[tuple[Any, ...]] = [
        (True, "é", 3, None, 2),
        (1, None, Decimal("1.5"), None, None),
        (1, None, Decimal("-0.00"), None, None),
    ]
    for row in good_rows:
        assert encode(row) == codec.encode(row) == codec.encode_reference(row)


def test_decimals_shorter_than_the_scale_are_padded_as_the_reference_pads() -> None:
    schema = row_pb2.TableSchema(db="d", table="t", table_id=1, max_column_id=2)
    schema.columns.add(id=1, name="a", type=T.DECIMAL, precision=12, scale=2)
    schema.columns.add(id=2, name="b", type=T.DECIMAL, precision=5, scale=0, nullable=True)
    codec = RowCodec(schema)
    encode = fast_encoder(codec)
    texts = [
        "1",
        "0",
        "0.1",
        "-0.1",
        "-1",
        "10",
        "123.4",
        "99999",
        "1E+3",
        "1E-2",
        "1.0",
        "-0.0",
        "0.00",
        "5E+1",
    ]
    for a in texts:
        for b in [*texts, None]:
            row = (Decimal(a), None if b is None else Decimal(b))
            try:
                expected: Any = codec.encode_reference(row)
            except RowValueError as exc:
                with pytest.raises(RowValueError, match=re.escape(str(exc))):
                    encode(row)
                continue
            assert encode(row) == expected
