"""Avro binary encoding of the primitive types, for the compiled writer (:mod:`bridge.avro.writer`).

Each ``write_*`` appends one datum's encoding to a ``bytearray`` and raises
:class:`Fallback` for a datum it does not take (the caller then writes the
record with fastavro); :data:`PRIMITIVE_WRITERS` maps the primitive type
names to them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, Inexact, Rounded
from typing import Any

Write = Callable[[bytearray, Any], None]

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1
DOUBLE = struct.Struct("<d").pack
FLOAT = struct.Struct("<f").pack
_EXACT = Context(prec=200, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact, Rounded])  # scaleb never rounds
PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))


class Fallback(Exception):
    """The compiled writer does not take this datum; write it with fastavro instead."""


def varint(out: bytearray, value: int) -> None:
    """Zig-zag then base-128 varint: Avro's int and long encoding."""
    value = (value << 1) ^ (value >> 63)
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _write_null(out: bytearray, value: Any) -> None:
    if value is not None:
        raise Fallback


def _write_boolean(out: bytearray, value: Any) -> None:
    if value is True:
        out.append(1)
    elif value is False:
        out.append(0)
    else:
        raise Fallback


def _write_int(out: bytearray, value: Any) -> None:
    if type(value) is not int or not INT_MIN <= value <= INT_MAX:
        raise Fallback
    varint(out, value)


def _write_long(out: bytearray, value: Any) -> None:
    if type(value) is not int or not LONG_MIN <= value <= LONG_MAX:
        raise Fallback
    if 0 <= value < 64:
        out.append(value << 1)
        return
    value = (value << 1) ^ (value >> 63)
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _write_double(out: bytearray, value: Any) -> None:
    kind = type(value)
    if kind is not float and kind is not int:
        raise Fallback
    out += DOUBLE(value)


def _write_float(out: bytearray, value: Any) -> None:
    kind = type(value)
    if kind is not float and kind is not int:
        raise Fallback
    out += FLOAT(value)


def write_string(out: bytearray, value: Any) -> None:
    if type(value) is not str:
        raise Fallback
    data = value.encode()
    varint(out, len(data))
    out += data


def _write_bytes(out: bytearray, value: Any) -> None:
    if type(value) is not bytes:
        raise Fallback
    varint(out, len(value))
    out += value


def decimal_writer(precision: int, scale: int) -> Write:
    def write(out: bytearray, value: Any) -> None:
        if type(value) is bytes:
            varint(out, len(value))
            out += value
            return
        if type(value) is not Decimal:
            raise Fallback
        # A Decimal's text without an exponent is its digits and its exponent (as_tuple's, cheaper
        # to get): the coefficient's digits with a point before the last -exponent of them.
        text = str(value)
        whole, _, fraction = text.partition(".")
        digits = whole + fraction
        if "E" not in text and digits.lstrip("-").isdigit() and len(fraction) <= scale:
            if len(digits.lstrip("-0") or "0") > precision:
                raise Fallback  # too many digits: fastavro raises
            unscaled = int(digits) * 10 ** (scale - len(fraction))
            data = unscaled.to_bytes((abs(unscaled).bit_length() + 8) // 8, "big", signed=True)
            varint(out, len(data))
            out += data
            return
        _, digits_, exponent = value.as_tuple()
        if not isinstance(exponent, int) or len(digits_) > precision or exponent + scale < 0:
            raise Fallback  # NaN/Infinity, too many digits, or a finer scale: fastavro raises
        unscaled = int(value.scaleb(scale, _EXACT))
        data = unscaled.to_bytes((abs(unscaled).bit_length() + 8) // 8, "big", signed=True)
        varint(out, len(data))
        out += data

    return write


def decimal_branch(schema: Any) -> Write | None:
    """The writer of ``schema`` if it is a ``bytes`` decimal with int precision and scale, else None."""
    if (
        not isinstance(schema, dict)
        or schema.get("type") != "bytes"
        or schema.get("logicalType") != "decimal"
    ):
        return None
    precision, scale = schema.get("precision"), schema.get("scale", 0)
    if type(precision) is not int or type(scale) is not int:
        return None
    return decimal_writer(precision, scale)


PRIMITIVE_WRITERS: dict[str, Write] = {
    "null": _write_null,
    "boolean": _write_boolean,
    "int": _write_int,
    "long": _write_long,
    "float": _write_float,
    "double": _write_double,
    "string": write_string,
    "bytes": _write_bytes,
}
