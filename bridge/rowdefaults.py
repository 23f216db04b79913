"""The value existing rows get when a column is added: what MySQL fills in.

``ALTER TABLE ... ADD COLUMN`` gives every existing row the column's DEFAULT
(``Column.default_value``, SQL text), or NULL for a nullable column without
one, or the type's implicit default for a NOT NULL column without one (0,
``''``, the zero date, the first ENUM member...). A downstream that adds the
column itself must fill the same value or it no longer equals the upstream.

:func:`fill_value` returns that value as a :mod:`bridge.rowcodec` Python
value. Expression defaults (``CURRENT_TIMESTAMP``, ``NOW()``) take the DDL's
commit time in UTC, the closest the binlog knows to the upstream's clock; any
other expression cannot be evaluated here and falls back to the implicit
default with a warning.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation

from bridge.proto import row_pb2
from bridge.rowtemporal import MySQLDate, MySQLDateTime
from bridge.tso import physical_ms

log = logging.getLogger(__name__)

T = row_pb2.ColumnType
_INTEGERS = frozenset((T.TINYINT, T.SMALLINT, T.MEDIUMINT, T.INT, T.BIGINT, T.YEAR, T.BIT))
_TEXTS = frozenset((T.CHAR, T.VARCHAR, T.TEXT, T.SET))
_BINARIES = frozenset((T.BINARY, T.VARBINARY, T.BLOB))
_NOW = re.compile(r"^(current_timestamp|now|localtimestamp|localtime)(\(\d*\))?$", re.IGNORECASE)
_DATETIME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?)?$")
_TIME = re.compile(r"^(-)?(\d+):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")


def fill_value(column: row_pb2.Column, commit_ts: int) -> object:
    """What MySQL stores in existing rows for a column added with this definition."""
    if not column.HasField("default_value"):
        return None if column.nullable else implicit_default(column)
    text = column.default_value.strip()
    if text.upper() == "NULL":
        return None
    try:
        if _NOW.match(text):
            now = datetime.fromtimestamp(physical_ms(commit_ts) / 1000, UTC)
            return now if column.type == T.TIMESTAMP else now.replace(tzinfo=None)
        return coerce(column, _literal(text))
    except (ValueError, ArithmeticError, InvalidOperation) as exc:
        log.warning(
            "column %s: DEFAULT %s cannot be evaluated downstream (%s); existing rows get %s",
            column.name,
            text,
            exc,
            "NULL" if column.nullable else "the implicit default",
        )
        return None if column.nullable else implicit_default(column)


def implicit_default(column: row_pb2.Column) -> object:
    """MySQL's implicit default of a NOT NULL column without DEFAULT."""
    kind = column.type
    if kind in _INTEGERS:
        return 0
    if kind == T.DECIMAL:
        return Decimal(0).scaleb(-column.scale)
    if kind in (T.FLOAT, T.DOUBLE):
        return 0.0
    if kind == T.DATE:
        return MySQLDate(0, 0, 0)
    if kind in (T.DATETIME, T.TIMESTAMP):
        return MySQLDateTime(0, 0, 0)
    if kind == T.TIME:
        return timedelta(0)
    if kind == T.ENUM:
        return column.elems[0]
    if kind == T.JSON:
        return "null"
    if kind in _BINARIES:
        return bytes(column.length) if kind == T.BINARY else b""
    return ""


def _literal(text: str) -> str | int | bytes:
    """A MySQL literal's value: quoted string, b'0101', x'ab' / 0xab, or a bare number."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        body = text[1:-1].replace(text[0] * 2, text[0])
        return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "0": "\0"}.get(m[1], m[1]), body)
    lowered = text.lower()
    if lowered.startswith("b'") and lowered.endswith("'"):
        return int(text[2:-1] or "0", 2)
    if lowered.startswith("x'") and lowered.endswith("'"):
        return bytes.fromhex(text[2:-1])
    if lowered.startswith("0x"):
        return bytes.fromhex(text[2:])
    Decimal(text)  # a bare literal must be a number; raises InvalidOperation otherwise
    return text


def coerce(column: row_pb2.Column, literal: str | int | bytes) -> object:
    """``literal`` as a value of ``column``'s type (ValueError when it is not one)."""
    kind = column.type
    if isinstance(literal, bytes):
        return literal if kind in _BINARIES else literal.decode()
    if isinstance(literal, int):
        return literal
    if kind in _INTEGERS:
        return int(Decimal(literal))
    if kind == T.DECIMAL:
        return Decimal(literal).quantize(Decimal(1).scaleb(-column.scale))
    if kind in (T.FLOAT, T.DOUBLE):
        return float(literal)
    if kind in (T.DATE, T.DATETIME, T.TIMESTAMP):
        return _temporal(kind, literal)
    if kind == T.TIME:
        return _time(literal)
    if kind in _BINARIES:
        data = literal.encode()
        return data.ljust(column.length, b"\0") if kind == T.BINARY else data
    if kind in _TEXTS or kind in (T.ENUM, T.JSON):
        return literal
    raise ValueError(f"no literal form for {T.Name(kind)}")


def _temporal(kind: int, text: str) -> object:
    match = _DATETIME.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a date or datetime")
    y, mo, d, h, mi, s = (int(g or 0) for g in match.groups()[:6])
    micro = int((match[7] or "").ljust(6, "0"))
    if kind == T.DATE:
        return date(y, mo, d) if y and mo and d else MySQLDate(y, mo, d)
    if not (y and mo and d):
        return MySQLDateTime(y, mo, d, h, mi, s, micro)
    return datetime(y, mo, d, h, mi, s, micro, tzinfo=UTC if kind == T.TIMESTAMP else None)


def _time(text: str) -> timedelta:
    match = _TIME.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a TIME")
    sign, h, m, s, frac = match.groups()
    micro = int((frac or "").ljust(6, "0"))
    value = timedelta(hours=int(h), minutes=int(m), seconds=int(s), microseconds=micro)
    return -value if sign else value
