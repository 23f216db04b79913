"""Row values as ``mysql-replication`` decodes them -> the row codec's values.

The SQL producer reads rows through pymysql and converts them with the
column adapters of :mod:`bridge.producer.mysql_types`; the capture must give
the row codec the very same values, so that the binlogs are the same and
``binlog-bridge diff`` stays exact. Where the replication decoder's value
differs from pymysql's it is first normalised here, then passed through the
same adapter (``adapter_for(column).from_db``):

=============  =========================================  ==========================
type           decoder gives                              normalised to
=============  =========================================  ==========================
BIT            text of bits, ``"0101"``                    int (the producer's sessions
                                                          convert BIT to int)
YEAR           1900 for the zero year                     0
FLOAT          the float32 widened to a double            the shortest decimal that
                                                          reads back as the same float32
                                                          (what the server prints)
BINARY(n)      the value without trailing zero bytes      padded to n with zero bytes
TIMESTAMP      1970-01-01 00:00:00 for the zero value     ``MySQLDateTime`` zeros
DATE/DATETIME  None for a zero date ("out of range")      ``MySQLDate``/``MySQLDateTime``
                                                          zeros
SET            None for the empty set                     ``""``
JSON (MySQL)   a parsed document, bytes keys and strings  canonical JSON text
text types     bytes when the charset is unknown          UTF-8 text
=============  =========================================  ==========================

A date with only some zero parts (``2024-00-15``) decodes as None and is
carried as the all-zero date: the decoder does not say more.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from bridge.producer import mysql_types
from bridge.producer.upstream import IDENTITY
from bridge.proto import row_pb2
from bridge.rowtemporal import MySQLDate, MySQLDateTime

T = row_pb2.ColumnType
Convert = Callable[[Any], Any]

_ZERO_DATE = MySQLDate(0, 0, 0)
_ZERO_DATETIME = MySQLDateTime(0, 0, 0, 0, 0, 0, 0)
_EPOCH = datetime(1970, 1, 1)  # the decoder's TIMESTAMPs are naive UTC
_INT_BITS = {T.TINYINT: 8, T.SMALLINT: 16, T.MEDIUMINT: 24, T.INT: 32, T.BIGINT: 64}
_TEXT = frozenset((T.CHAR, T.VARCHAR, T.TEXT, T.ENUM))


def float32_text(value: float) -> float:
    """The shortest decimal that reads back as the same float32, as a double."""
    packed = struct.pack("<f", value)
    for digits in range(6, 10):
        candidate = float(f"{value:.{digits}g}")
        if struct.pack("<f", candidate) == packed:
            return candidate
    return value


def _bits(value: Any) -> Any:
    return int(value, 2) if isinstance(value, str) else value


def _year(value: Any) -> Any:
    return 0 if value == 1900 else value


def _unsigned(bits: int) -> Convert:
    wrap = 1 << bits

    def convert(value: Any) -> Any:
        return value + wrap if value < 0 else value

    return convert


def _binary(length: int) -> Convert:
    def convert(value: Any) -> Any:
        return bytes(value).ljust(length, b"\x00") if len(value) < length else bytes(value)

    return convert


def _text(value: Any) -> Any:
    return value.decode("utf-8") if isinstance(value, bytes | bytearray) else value


def _plain_json(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8")
    if isinstance(value, dict):
        return {_plain_json(k): _plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_json(v) for v in value]
    return value


def _json(value: Any) -> Any:
    if isinstance(value, str):  # MariaDB: JSON is LONGTEXT, decoded as text already
        return value
    if isinstance(value, bytes | bytearray):
        return value.decode("utf-8")
    return json.dumps(_plain_json(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _timestamp(value: Any) -> Any:
    return _ZERO_DATETIME if value == _EPOCH else value


def _chain(first: Convert | None, second: Convert | None) -> Convert | None:
    if first is None:
        return second
    if second is None:
        return first
    return lambda value: second(first(value))


def _decoder_fix(column: row_pb2.Column) -> Convert | None:
    kind = column.type
    if kind in _INT_BITS and column.unsigned:
        return _unsigned(_INT_BITS[kind])
    fixes: dict[int, Convert] = {
        T.BIT: _bits,
        T.YEAR: _year,
        T.FLOAT: float32_text,
        T.JSON: _json,
        T.TIMESTAMP: _timestamp,
    }
    if kind == T.BINARY and column.length:
        return _binary(column.length)
    if kind in _TEXT:
        return _text
    return fixes.get(kind)


def _zero(column: row_pb2.Column) -> Any:
    """What a None the decoder explains as "out of range" / "empty set" stands for."""
    return {T.DATE: _ZERO_DATE, T.DATETIME: _ZERO_DATETIME, T.TIMESTAMP: _ZERO_DATETIME, T.SET: ""}.get(
        column.type
    )


class RowConverter:
    """Turns one decoded row (a mapping by column name) into a row codec tuple, in schema order."""

    __slots__ = ("_plans",)

    def __init__(self, schema: row_pb2.TableSchema) -> None:
        plans = []
        for column in schema.columns:
            adapter = mysql_types.adapter_for(column)
            from_db = None if adapter is IDENTITY else adapter.from_db
            plans.append((column.name, _chain(_decoder_fix(column), from_db), _zero(column)))
        self._plans = tuple(plans)

    def unrolled(self) -> Callable[[Mapping[str, Any], Mapping[str, str]], tuple[Any, ...]]:
        """:meth:`__call__` as one generated function without the loop over the columns (the same
        values; the capture's reading thread calls it for every row image). Its source holds fixed
        snippets and ints; names, conversions and zeros are passed in its scope."""
        scope: dict[str, Any] = {}
        lines = ["def convert(values, none_sources):"]
        for i, (name, convert, zero) in enumerate(self._plans):
            scope[f"n{i}"] = name
            lines.append(f"    v{i} = values[n{i}]")
            if zero is not None:
                scope[f"z{i}"] = zero
                lines.append(f"    if v{i} is None:")
                lines.append(f"        if none_sources.get(n{i}, 'null') != 'null':\n            v{i} = z{i}")
                if convert is not None:
                    scope[f"c{i}"] = convert
                    lines.append(f"    else:\n        v{i} = c{i}(v{i})")
            elif convert is not None:
                scope[f"c{i}"] = convert
                lines.append(f"    if v{i} is not None:\n        v{i} = c{i}(v{i})")
        names = [f"v{i}" for i in range(len(self._plans))]
        lines.append(f"    return ({', '.join(names)}{',' if len(names) == 1 else ''})")
        exec("\n".join(lines), scope)  # noqa: S102 - fixed snippets and ints
        function: Callable[[Mapping[str, Any], Mapping[str, str]], tuple[Any, ...]] = scope["convert"]
        return function

    def __call__(self, values: Mapping[str, Any], none_sources: Mapping[str, str]) -> tuple[Any, ...]:
        row = []
        for name, convert, zero in self._plans:
            value = values[name]
            if value is None:
                if zero is not None and none_sources.get(name, "null") != "null":
                    value = zero
            elif convert is not None:
                value = convert(value)
            row.append(value)
        return tuple(row)
