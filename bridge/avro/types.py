"""Column type -> Avro type, and row values <-> Avro datums, losslessly.

=====================================  ==========================================================
column type                            Avro type
=====================================  ==========================================================
TINYINT, SMALLINT, MEDIUMINT, INT      ``int``
(signed), TINYINT/SMALLINT UNSIGNED,
YEAR
INT/MEDIUMINT UNSIGNED, BIGINT         ``long``
(signed), BIT(n<64)
BIGINT UNSIGNED, BIT(64)               ``bytes`` decimal(20, 0)
DECIMAL(p, s)                          ``bytes`` decimal(p, s); DECIMAL without declared
                                       precision: decimal(95, 30) (MySQL's 65 integer and 30
                                       fraction digits)
FLOAT, DOUBLE                          ``double``
DATE                                   ``int`` date, or ``string`` "YYYY-MM-DD" for MySQL dates
                                       with a zero part (no epoch day exists for them)
DATETIME                               ``long`` local-timestamp-micros, or ``string`` for
                                       zero dates ("0000-00-00 00:00:00[.ffffff]")
TIMESTAMP                              ``long`` timestamp-micros (UTC), or ``string``
                                       "0000-00-00 00:00:00" for the zero TIMESTAMP
TIME                                   ``long`` signed microseconds, ``"bridge.type":
                                       "time-micros"`` (Avro's time-micros holds 0..24h only)
CHAR, VARCHAR, TEXT, ENUM, SET         ``string`` (SET: member names joined by ",")
JSON                                   ``string`` with ``"bridge.type": "json"``
BINARY, VARBINARY, BLOB                ``bytes``
=====================================  ==========================================================

A nullable column is the union ``["null", T...]`` with default null. The
temporal unions put the logical-type branch first, so a consumer that only
ever sees valid dates reads them as ``date``/``datetime``.

Each mapping comes with two converters, built once per column: ``to_avro``
(a :mod:`bridge.rowcodec` value -> the datum fastavro writes) and
``from_avro`` (the datum fastavro reads, logical types applied -> the
rowcodec value). ``None`` stands for "the value passes unchanged". A
zero date is written as fastavro's union tuple ``("string", text)``, so the
string branch is chosen explicitly (fastavro would otherwise try to parse
the text as an ISO date for the logical-type branch).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, Inexact, Rounded
from typing import Any, NamedTuple

from bridge.proto import row_pb2
from bridge.rowdefaults import fill_value, implicit_default
from bridge.rowtemporal import MySQLDate, MySQLDateTime

T = row_pb2.ColumnType

Converter = Callable[[Any], object]

_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_EPOCH_NAIVE = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_UNDECLARED_DECIMAL = (95, 30)  # MySQL: up to 65 integer digits and 30 fraction digits
_EXACT = Context(prec=200, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact, Rounded])  # scaleb never rounds
_UINT64_DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}

_NAME_START = re.compile(r"[A-Za-z_]")
_NAME_INVALID = re.compile(r"[^A-Za-z0-9_]")

BRIDGE_TYPE = "bridge.type"
BRIDGE_NAME = "bridge.name"


def sanitize_name(name: str) -> str:
    """``name`` as a valid Avro name: invalid characters become ``_``, a leading digit gets ``_``."""
    clean = _NAME_INVALID.sub("_", name)
    if not clean or not _NAME_START.match(clean):
        clean = "_" + clean
    return clean


class AvroColumn(NamedTuple):
    """How one column appears in Avro: its field type and the two value converters."""

    avro_type: object  # JSON-able Avro type (nullable columns: the union with "null")
    to_avro: Converter | None
    from_avro: Converter | None
    default: object  # the field's Avro default as JSON, or NO_DEFAULT


NO_DEFAULT = object()
"""``AvroColumn.default`` of a field without default."""


def _date_to_avro(value: date | MySQLDate) -> int | tuple[str, str]:
    if type(value) is date:
        return value.toordinal() - _EPOCH_ORDINAL
    if isinstance(value, MySQLDate):
        return ("string", str(value))
    if isinstance(value, date) and not isinstance(value, datetime):
        return value.toordinal() - _EPOCH_ORDINAL
    raise TypeError(f"expects a datetime.date or MySQLDate, got {type(value).__name__}")


def _date_from_avro(value: object) -> date | MySQLDate:
    if isinstance(value, date):
        return value
    if isinstance(value, int):
        return date.fromordinal(value + _EPOCH_ORDINAL)
    if isinstance(value, str):
        year, month, day = (int(part) for part in value.split("-"))
        return MySQLDate(year, month, day)
    raise TypeError(f"a DATE datum must be a date, an int or a string, got {type(value).__name__}")


def _datetime_to_avro(value: datetime | MySQLDateTime) -> int | tuple[str, str]:
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            raise TypeError(f"DATETIME has no time zone; got the aware datetime {value!r}")
        return (value - _EPOCH_NAIVE) // _ONE_US
    if isinstance(value, MySQLDateTime):
        return ("string", str(value))
    raise TypeError(f"expects a naive datetime or MySQLDateTime, got {type(value).__name__}")


def _parse_zero_datetime(text: str) -> MySQLDateTime:
    day, _, time = text.partition(" ")
    year, month, mday = (int(part) for part in day.split("-"))
    clock, _, fraction = (time or "00:00:00").partition(".")
    hour, minute, second = (int(part) for part in clock.split(":"))
    microsecond = int(fraction.ljust(6, "0")) if fraction else 0
    return MySQLDateTime(year, month, mday, hour, minute, second, microsecond)


def _datetime_from_avro(value: object) -> datetime | MySQLDateTime:
    if isinstance(value, datetime):
        if value.tzinfo is not None:  # a reader that treats the logical type as UTC
            return value.astimezone(UTC).replace(tzinfo=None)
        return value
    if isinstance(value, int):
        return _EPOCH_NAIVE + timedelta(microseconds=value)
    if isinstance(value, str):
        return _parse_zero_datetime(value)
    raise TypeError(f"a DATETIME datum must be a datetime, an int or a string, got {type(value).__name__}")


def _timestamp_to_avro(value: datetime | MySQLDateTime) -> int | tuple[str, str]:
    if isinstance(value, datetime):
        if value.tzinfo is None:  # the row codec reads a naive TIMESTAMP as UTC
            return (value - _EPOCH_NAIVE) // _ONE_US
        return (value - _EPOCH_UTC) // _ONE_US
    if isinstance(value, MySQLDateTime):
        return ("string", str(value))
    raise TypeError(f"expects a datetime or MySQLDateTime(0, 0, 0), got {type(value).__name__}")


def _timestamp_from_avro(value: object) -> datetime | MySQLDateTime:
    if isinstance(value, datetime):
        if value.tzinfo is UTC:
            return value
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
    if isinstance(value, int):
        return _EPOCH_UTC + timedelta(microseconds=value)
    if isinstance(value, str):
        return _parse_zero_datetime(value)
    raise TypeError(f"a TIMESTAMP datum must be a datetime, an int or a string, got {type(value).__name__}")


def _time_to_avro(value: timedelta) -> int:
    if not isinstance(value, timedelta):
        raise TypeError(f"expects a datetime.timedelta, got {type(value).__name__}")
    return value // _ONE_US


def _time_from_avro(value: object) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int):
        return timedelta(microseconds=value)
    raise TypeError(f"a TIME datum must be an int, got {type(value).__name__}")


def _uint_to_avro(value: int) -> Decimal:
    return Decimal(value)


def _uint_from_avro(value: object) -> int:
    if isinstance(value, Decimal):
        if value != value.to_integral_value():
            raise ValueError(f"{value} is not an integer")
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):  # a field default, which fastavro returns in its JSON form
        value = value.encode("latin-1")
    if isinstance(value, bytes):  # read without logical types: big-endian two's complement
        return int.from_bytes(value, "big", signed=True)
    raise TypeError(f"an unsigned 64-bit datum must be a Decimal, got {type(value).__name__}")


def _decimal_from_avro(value: object, scale: int) -> Decimal:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, str):  # a field default, which fastavro returns in its JSON form
        value = value.encode("latin-1")
    if isinstance(value, bytes):
        return Decimal(int.from_bytes(value, "big", signed=True)).scaleb(-scale, _EXACT)
    raise TypeError(f"a DECIMAL datum must be a Decimal, got {type(value).__name__}")


def _bytes_from_avro(value: object) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, str):  # a field default, which fastavro returns in its JSON form
        return value.encode("latin-1")
    raise TypeError(f"a binary datum must be bytes, got {type(value).__name__}")


def column_type(column: row_pb2.Column) -> AvroColumn:
    """The Avro type, converters and default of one column (nullability included).

    ``column`` passed :func:`bridge.schema.validate_table_schema`. A nullable
    column defaults to null. A NOT NULL column defaults to the value MySQL
    gives existing rows when the column is added (its constant DEFAULT, else
    the type's implicit default: 0, '', the zero date...; expression
    defaults such as CURRENT_TIMESTAMP become the Unix epoch), so that adding
    a NOT NULL column stays BACKWARD compatible. Where that value is a zero
    date (``0000-00-00``, MySQL's implicit default for DATE/DATETIME), the
    Avro default is the Unix epoch instead: a union's default must belong to
    its first branch, the logical type.
    """
    base, to_avro, from_avro = _base_type(column)
    if column.nullable:
        branches = base if isinstance(base, list) else [base]
        return AvroColumn(["null", *branches], to_avro, from_avro, None)
    try:
        value = fill_value(column, 0)
        datum = value if to_avro is None else to_avro(value)
    except (TypeError, ValueError, ArithmeticError):  # a DEFAULT the type cannot hold: MySQL's implicit one
        value = implicit_default(column)
        datum = value if to_avro is None else to_avro(value)
    if isinstance(datum, tuple):  # ("string", zero date): not of the union's first branch
        datum = 0  # the Unix epoch
    return AvroColumn(base, to_avro, from_avro, _json_default(base, datum))


def _json_default(avro_type: object, datum: object) -> object:
    """``datum`` (as fastavro would write it) in the JSON form of an Avro default."""
    if isinstance(avro_type, list):
        avro_type = avro_type[0]
    if isinstance(datum, Decimal):
        assert isinstance(avro_type, dict)
        unscaled = int(datum.scaleb(avro_type["scale"], _EXACT))
        datum = unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)
    if isinstance(datum, bytes):
        return datum.decode("latin-1")  # Avro JSON: bytes as a string of code points 0-255
    return datum


def _base_type(column: row_pb2.Column) -> tuple[object, Converter | None, Converter | None]:
    kind = column.type
    if kind in (T.TINYINT, T.SMALLINT, T.MEDIUMINT, T.INT):
        wide = column.unsigned and kind in (T.MEDIUMINT, T.INT)
        return ("long" if wide else "int"), None, None
    if kind == T.YEAR:
        return "int", None, None
    if kind == T.BIGINT:
        if column.unsigned:
            return dict(_UINT64_DECIMAL), _uint_to_avro, _uint_from_avro
        return "long", None, None
    if kind == T.BIT:
        if column.length in (0, 64):  # an undeclared length is treated as the 64-bit maximum
            return dict(_UINT64_DECIMAL), _uint_to_avro, _uint_from_avro
        return "long", None, None
    if kind == T.DECIMAL:
        precision, scale = (column.precision, column.scale) if column.precision else _UNDECLARED_DECIMAL
        return (
            {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale},
            None,
            functools.partial(_decimal_from_avro, scale=scale),
        )
    if kind in (T.FLOAT, T.DOUBLE):
        return "double", None, None
    if kind == T.DATE:
        return [{"type": "int", "logicalType": "date"}, "string"], _date_to_avro, _date_from_avro
    if kind == T.DATETIME:
        return (
            [{"type": "long", "logicalType": "local-timestamp-micros"}, "string"],
            _datetime_to_avro,
            _datetime_from_avro,
        )
    if kind == T.TIMESTAMP:
        return (
            [{"type": "long", "logicalType": "timestamp-micros"}, "string"],
            _timestamp_to_avro,
            _timestamp_from_avro,
        )
    if kind == T.TIME:
        return {"type": "long", BRIDGE_TYPE: "time-micros"}, _time_to_avro, _time_from_avro
    if kind in (T.CHAR, T.VARCHAR, T.TEXT, T.ENUM, T.SET):
        return "string", None, None
    if kind == T.JSON:
        return {"type": "string", BRIDGE_TYPE: "json"}, None, None
    if kind in (T.BINARY, T.VARBINARY, T.BLOB):
        return "bytes", None, _bytes_from_avro
    raise ValueError(f"column {column.name!r}: no Avro mapping for type {kind}")
