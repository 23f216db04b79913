"""Decoded binlog values -> the row codec values the SQL producer would capture."""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from bridge.apps.capture.values import RowConverter, float32_text
from bridge.proto import row_pb2
from bridge.rowtemporal import MySQLDate, MySQLDateTime

T = row_pb2.ColumnType


def _converter(*columns: row_pb2.Column) -> Callable[[Mapping[str, Any], Mapping[str, str]], tuple[Any, ...]]:
    """The converter; each call also checks that its generated function (the capture's) gives the same."""
    for n, column in enumerate(columns, 1):
        column.id = n
    reference = RowConverter(row_pb2.TableSchema(db="d", table="t", columns=columns))
    unrolled = reference.unrolled()

    def convert(values: Mapping[str, Any], none_sources: Mapping[str, str]) -> tuple[Any, ...]:
        expected = reference(values, none_sources)
        assert unrolled(values, none_sources) == expected
        return expected

    return convert


def test_float32_reads_as_the_server_prints_it() -> None:
    widened = struct.unpack("<f", struct.pack("<f", 1.1))[0]
    assert widened != 1.1 and float32_text(widened) == 1.1
    assert float32_text(0.0) == 0.0
    assert float32_text(struct.unpack("<f", struct.pack("<f", 3.4028234e38))[0]) == pytest.approx(
        3.4028234e38
    )


def test_each_type_the_decoder_gives_differently_is_normalised() -> None:
    convert = _converter(
        row_pb2.Column(name="b", type=T.BIT, length=5),
        row_pb2.Column(name="y", type=T.YEAR),
        row_pb2.Column(name="bin", type=T.BINARY, length=4),
        row_pb2.Column(name="s", type=T.SET, elems=["x", "y", "z"]),
        row_pb2.Column(name="u", type=T.INT, unsigned=True),
        row_pb2.Column(name="j", type=T.JSON),
        row_pb2.Column(name="v", type=T.VARCHAR, length=5),
        row_pb2.Column(name="ts", type=T.TIMESTAMP),
    )
    row = {
        "b": "00101",
        "y": 1900,
        "bin": b"\xab",
        "s": {"z", "x"},
        "u": -1,
        "j": {b"k": [1, b"v"]},
        "v": b"caf\xc3\xa9",
        "ts": datetime(1970, 1, 1),
    }
    assert convert(row, {}) == (
        5,
        0,
        b"\xab\x00\x00\x00",
        "x,z",
        4294967295,
        '{"k":[1,"v"]}',
        "café",
        MySQLDateTime(0, 0, 0, 0, 0, 0, 0),
    )


def test_none_is_null_unless_the_decoder_says_it_stood_for_a_zero_value() -> None:
    convert = _converter(
        row_pb2.Column(name="d", type=T.DATE, nullable=True),
        row_pb2.Column(name="dt", type=T.DATETIME, nullable=True),
        row_pb2.Column(name="s", type=T.SET, elems=["x"], nullable=True),
    )
    values = {"d": None, "dt": None, "s": None}
    assert convert(values, {"d": "null", "dt": "null", "s": "null"}) == (None, None, None)
    zero = convert(values, {"d": "out of date range", "dt": "out of datetime2 range", "s": "empty set"})
    assert zero == (MySQLDate(0, 0, 0), MySQLDateTime(0, 0, 0, 0, 0, 0, 0), "")


def test_values_the_decoder_gives_as_pymysql_does_pass_unchanged() -> None:
    convert = _converter(
        row_pb2.Column(name="i", type=T.BIGINT),
        row_pb2.Column(name="m", type=T.DECIMAL, precision=10, scale=2),
        row_pb2.Column(name="t", type=T.TIME),
        row_pb2.Column(name="e", type=T.ENUM, elems=["a", "b"]),
        row_pb2.Column(name="dbl", type=T.DOUBLE),
    )
    row = {"i": -5, "m": Decimal("1.50"), "t": timedelta(hours=-1), "e": "b", "dbl": 0.1}
    assert convert(row, {}) == (-5, Decimal("1.50"), timedelta(hours=-1), "b", 0.1)
