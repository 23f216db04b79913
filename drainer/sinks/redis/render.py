"""Canonical text of row values: what a key template, a hash field and a message carry.

One rule per :mod:`bridge.rowcodec` type, so the same row always renders the
same key, whatever produced it (docs/redis-sink.md, "Values"):

=========================  ===================================================
value                      key text (:func:`key_text`)
=========================  ===================================================
NULL                       the ``null-token`` (default ``null``)
integer (any size, BIT)    decimal digits, ``-`` for negatives: ``42``
DECIMAL                    fixed point, never an exponent, the column's scale
                           kept: ``12.50``, ``1000``, ``-0.001``
FLOAT/DOUBLE               the shortest text that reads back as the same
                           double, written without exponent: ``1.5``,
                           ``10000000000000000.0``
text, ENUM, SET, JSON      the text itself
bytes                      lowercase hex: ``00ff10``
DATE                       ISO 8601: ``2024-05-01``
DATETIME                   ISO 8601: ``2024-05-01T10:20:30`` or
                           ``...T10:20:30.123000`` (six digits when the
                           fraction is non-zero)
TIMESTAMP                  the same, in UTC, with ``+00:00``
TIME                       ``[-]HH:MM:SS[.ffffff]``, hours may exceed 23
zero dates (MySQL)         ``0000-00-00``, ``0000-00-00T00:00:00``
=========================  ===================================================

In JSON (:func:`json_value`) integers and doubles are numbers, NULL is
``null``, and everything else is the string above.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from bridge.rowtemporal import MySQLDate, MySQLDateTime

DEFAULT_NULL_TOKEN = "null"  # noqa: S105 - a placeholder text, not a password


def _float_text(value: float) -> str:
    text = repr(value)
    if "e" not in text and "E" not in text:
        return text
    plain = format(Decimal(text), "f")
    return plain if "." in plain else plain + ".0"


def _decimal_text(value: Decimal) -> str:
    return format(value, "f")


def _datetime_text(value: datetime) -> str:
    return value.isoformat()


def _time_text(value: timedelta) -> str:
    micros = value // timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    text = f"{sign}{hours:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{fraction:06d}" if fraction else text


def _zero_datetime_text(value: MySQLDateTime) -> str:
    return str(value).replace(" ", "T", 1)


def _bool_text(value: bool) -> str:
    return "1" if value else "0"


# Exact types first: type(value) lookups keep the hot path to one dict probe.
_TEXT: dict[type, Callable[[Any], str]] = {
    int: str,
    str: str,
    bool: _bool_text,
    float: _float_text,
    Decimal: _decimal_text,
    bytes: bytes.hex,
    bytearray: bytearray.hex,
    datetime: _datetime_text,
    date: date.isoformat,
    timedelta: _time_text,
    MySQLDate: str,
    MySQLDateTime: _zero_datetime_text,
}


def value_text(value: object) -> str:
    """The canonical text of a non-NULL value (the table in the module docstring)."""
    render = _TEXT.get(type(value))
    if render is not None:
        return render(value)
    for kind, fallback in _TEXT.items():  # subclasses (e.g. an IntEnum, a datetime subclass)
        if isinstance(value, kind):
            return fallback(value)
    if isinstance(value, memoryview):
        return value.hex()
    raise TypeError(f"no canonical text for a value of type {type(value).__name__}")


def key_text(value: object, null_token: str = DEFAULT_NULL_TOKEN) -> str:
    """The text a key template puts in place of a column: :func:`value_text`, NULL as ``null_token``."""
    if value is None:
        return null_token
    render = _TEXT.get(type(value))
    return render(value) if render is not None else value_text(value)


def json_value(value: object) -> object:
    """The value as it appears in a JSON message: numbers for integers and doubles, else text."""
    if value is None or type(value) is int or type(value) is float:
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return value
    return value_text(value)


def json_image(names: tuple[str, ...], image: tuple[object, ...] | None) -> dict[str, object] | None:
    """A row image as a JSON object (column name -> :func:`json_value`), or None."""
    if image is None:
        return None
    return {name: json_value(value) for name, value in zip(names, image, strict=True)}


def dumps(document: object) -> str:
    """Compact JSON text, UTF-8 kept: the form of every message and JSON value the sink writes."""
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)
