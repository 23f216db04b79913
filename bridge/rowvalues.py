"""Value rules of the row codec for the non-temporal column types.

Each planner here (and in :mod:`bridge.rowtemporal`) turns one ``Column`` into
a :class:`ColumnPlan`: how a Python value is checked and written into a
``bridge.row.Datum``, which Datum field holds it, and how it is read back.
:mod:`bridge.rowcodec` runs the plans; the full type table is in
``schemas/README.md``.

==========================  ==============  ========================================
column type                 Datum field     Python value
==========================  ==============  ========================================
TINYINT..BIGINT             int_value       int in the type's signed range (bool = 0/1)
TINYINT..BIGINT UNSIGNED    uint_value      int in 0 .. 2**bits-1 (bool = 0/1)
YEAR                        int_value       int 0 or 1901..2155
BIT(n)                      uint_value      int 0 .. 2**n-1; bytes accepted, big-endian
FLOAT, DOUBLE               double_value    finite float; an int a float holds exactly
DECIMAL(p,s)                decimal_value   Decimal (or int), exact text padded to s
CHAR/VARCHAR(n), TEXT       string_value    str, at most n characters when n is set
BINARY/VARBINARY(n), BLOB   bytes_value     bytes (bytearray/memoryview accepted)
ENUM                        string_value    str, one of the members exactly
SET                         string_value    members as a set/frozenset/list/tuple or "a,b"
JSON                        json_value      JSON text (str) or a JSON-able Python object
==========================  ==============  ========================================

Nothing is rounded or truncated: a value the column cannot hold exactly raises
:class:`RowValueError`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any, NamedTuple, NoReturn

from bridge.errors import UserError
from bridge.proto import row_pb2

T = row_pb2.ColumnType
Encoder = Callable[[row_pb2.Datum, Any], None]
Decoder = Callable[[Any], object]

_INT_BITS = {T.TINYINT: 8, T.SMALLINT: 16, T.MEDIUMINT: 24, T.INT: 32, T.BIGINT: 64}
_MAX_DECIMAL_DIGITS = 65  # MySQL's limits, applied when the column declares no precision
_MAX_DECIMAL_SCALE = 30


class RowValueError(UserError, ValueError):
    """A value does not fit its column; the message names table, column and type."""


class ColumnPlan(NamedTuple):
    """How one column's values are written and read.

    ``encode(datum, value)`` checks a non-NULL value and sets field ``kind`` of
    the datum; ``decode`` turns that field's wire value back into the Python
    value (``None`` when the wire value already is it) and raises ValueError or
    ArithmeticError for a wire value the column cannot hold.
    """

    encode: Encoder
    kind: str
    decode: Decoder | None
    label: str


Planner = Callable[[str, row_pb2.Column], ColumnPlan]


def column_label(table: str, column: row_pb2.Column) -> str:
    """``column db.t.c (decimal(10,2))``: how messages name a column."""
    sql = column.sql_type or T.Name(column.type).lower() + (" unsigned" if column.unsigned else "")
    return f"column {table}.{column.name} ({sql})"


def mismatch(label: str, expected: str, value: object) -> RowValueError:
    """The error for a value of the wrong type or range."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return RowValueError(f"{label}: expects {expected}, got {type(value).__name__} {text}")


def _integer_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    bits = _INT_BITS[column.type]
    if column.unsigned:
        low, high = 0, (1 << bits) - 1

        def encode_unsigned(datum: row_pb2.Datum, value: Any) -> None:
            if type(value) is int and low <= value <= high:
                datum.uint_value = value
            else:
                datum.uint_value = _checked_int(value, low, high, label)

        return ColumnPlan(encode_unsigned, "uint_value", None, label)
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def encode_signed(datum: row_pb2.Datum, value: Any) -> None:
        if type(value) is int and low <= value <= high:
            datum.int_value = value
        else:
            datum.int_value = _checked_int(value, low, high, label)

    return ColumnPlan(encode_signed, "int_value", None, label)


def _checked_int(value: object, low: int, high: int, label: str) -> int:
    if not isinstance(value, int) or not low <= value <= high:
        raise mismatch(label, f"an int in {low}..{high}", value)
    return int(value)  # bool and int subclasses become plain int


def _year_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if type(value) is not int or not (1901 <= value <= 2155 or value == 0):
            raise mismatch(label, "an int 0 or 1901..2155", value)
        datum.int_value = value

    return ColumnPlan(encode, "int_value", None, label)


def _bit_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    bits = column.length or 64  # an undeclared length is checked against the 64-bit maximum
    high = (1 << bits) - 1

    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if isinstance(value, bytes | bytearray) and len(value) <= 8:
            value = int.from_bytes(value, "big")
        datum.uint_value = _checked_int(value, 0, high, label)

    return ColumnPlan(encode, "uint_value", None, label)


def _float_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if type(value) is float and math.isfinite(value):
            datum.double_value = value
        else:
            datum.double_value = _checked_float(value, label)

    return ColumnPlan(encode, "double_value", None, label)


def _checked_float(value: object, label: str) -> float:
    expected = "a finite float (or an int a float holds exactly)"
    if isinstance(value, float):
        number = float(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            raise mismatch(label, expected, value) from None
        if number != value:
            raise mismatch(label, expected, value)
    else:
        raise mismatch(label, expected, value)
    if not math.isfinite(number):
        raise RowValueError(f"{label}: {number} is not storable; MySQL has no NaN or infinity")
    return number


def _decimal_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    declared = column.precision > 0
    scale = column.scale if declared else _MAX_DECIMAL_SCALE
    integer_digits = column.precision - column.scale if declared else _MAX_DECIMAL_DIGITS
    expected = f"a Decimal or int with at most {integer_digits} integer and {scale} fraction digits"

    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if type(value) is not Decimal:
            if not isinstance(value, int | Decimal) or isinstance(value, bool):
                raise mismatch(label, expected, value)
            value = Decimal(value)
        if not value.is_finite():
            raise RowValueError(f"{label}: {value} is not storable; DECIMAL holds finite numbers only")
        text = _fit_scale(format(value, "f"), scale, pad=declared)
        if text is None or len(text.partition(".")[0].lstrip("-0")) > integer_digits:
            raise mismatch(label, expected, value)
        if text[0] == "-" and not value:
            text = text[1:]  # MySQL has no negative zero
        datum.decimal_value = text

    return ColumnPlan(encode, "decimal_value", _decode_decimal, label)


def _fit_scale(text: str, scale: int, *, pad: bool) -> str | None:
    """Fixed-point ``text`` with exactly ``scale`` fraction digits (fewer if not ``pad``).

    Zeros beyond ``scale`` are dropped (exact); ``None`` when a non-zero digit
    would have to be rounded away.
    """
    whole, _, fraction = text.partition(".")
    if len(fraction) > scale:
        if fraction[scale:].strip("0"):
            return None
        fraction = fraction[:scale]
    elif pad:
        fraction += "0" * (scale - len(fraction))
    return f"{whole}.{fraction}" if fraction else whole


def _decode_decimal(text: str) -> Decimal:
    value = Decimal(text)
    if not value.is_finite():
        raise ValueError(f"DECIMAL {text!r} is not a finite number")
    return value


def _text_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    limit = column.length if column.type in (T.CHAR, T.VARCHAR) else 0

    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if type(value) is str and (not limit or len(value) <= limit):
            datum.string_value = value
        elif not isinstance(value, str):
            raise mismatch(label, "a str", value)
        elif limit and len(value) > limit:
            raise RowValueError(f"{label}: {len(value)} characters; the column holds at most {limit}")
        else:
            datum.string_value = str(value)

    return ColumnPlan(encode, "string_value", None, label)


def _bytes_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    limit = column.length if column.type in (T.BINARY, T.VARBINARY) else 0

    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if type(value) is not bytes:
            if not isinstance(value, bytes | bytearray | memoryview):
                raise mismatch(label, "bytes", value)
            value = bytes(value)
        if limit and len(value) > limit:
            raise RowValueError(f"{label}: {len(value)} bytes; the column holds at most {limit}")
        datum.bytes_value = value

    return ColumnPlan(encode, "bytes_value", None, label)


def _enum_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    members = frozenset(column.elems)
    expected = f"one of {list(column.elems)!r}"

    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if not isinstance(value, str) or value not in members:
            raise mismatch(label, expected, value)
        datum.string_value = str(value)

    return ColumnPlan(encode, "string_value", None, label)


def _set_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    order = {name: i for i, name in enumerate(column.elems)}
    expected = f"a set of members of {list(column.elems)!r} or their names joined by ','"

    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if isinstance(value, str):
            names: list[object] = list(value.split(",")) if value else []
        elif isinstance(value, set | frozenset | list | tuple):
            names = list(value)
        else:
            raise mismatch(label, expected, value)
        for name in names:
            if not isinstance(name, str) or name not in order:
                raise RowValueError(f"{label}: {name!r} is not a member of {list(column.elems)!r}")
        datum.string_value = ",".join(sorted({str(n) for n in names}, key=order.__getitem__))

    return ColumnPlan(encode, "string_value", None, label)


def _json_plan(label: str, column: row_pb2.Column) -> ColumnPlan:
    def encode(datum: row_pb2.Datum, value: Any) -> None:
        if isinstance(value, str):
            try:
                json.loads(value, parse_constant=_refuse_constant)
            except ValueError as exc:
                raise RowValueError(f"{label}: not a JSON document: {exc}") from None
            datum.json_value = value
            return
        if isinstance(value, bytes | bytearray | memoryview):
            raise mismatch(label, "JSON text (str) or a JSON-able object", value)
        datum.json_value = canonical_json(value, label)

    return ColumnPlan(encode, "json_value", None, label)


def canonical_json(value: object, label: str) -> str:
    """The stable JSON text of a Python object: sorted keys, no spaces, UTF-8 kept."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise RowValueError(f"{label}: not representable as JSON: {exc}") from None


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


PLANNERS: dict[int, Planner] = {
    **dict.fromkeys(_INT_BITS, _integer_plan),
    T.YEAR: _year_plan,
    T.BIT: _bit_plan,
    T.FLOAT: _float_plan,
    T.DOUBLE: _float_plan,
    T.DECIMAL: _decimal_plan,
    T.CHAR: _text_plan,
    T.VARCHAR: _text_plan,
    T.TEXT: _text_plan,
    T.BINARY: _bytes_plan,
    T.VARBINARY: _bytes_plan,
    T.BLOB: _bytes_plan,
    T.ENUM: _enum_plan,
    T.SET: _set_plan,
    T.JSON: _json_plan,
}
