"""The SQLite dialect: how replicated rows are stored in SQLite, losslessly.

SQLite has five storage classes and a column *affinity* derived from the
declared type's name. The declared types below keep MySQL's names where the
affinity they give stores the value unchanged, and add ``_TEXT`` where MySQL's
name would give NUMERIC affinity and lose digits. ``binlog-bridge diff`` reads
these declared types back to compare a SQLite table with its upstream.

==========================  ===========================  ==========================================
column type                 declared type                stored as
==========================  ===========================  ==========================================
TINYINT..BIGINT             same name (+ ``UNSIGNED``)   INTEGER
BIGINT UNSIGNED, BIT(64)    ``BIGINT UNSIGNED``,         INTEGER; values >= 2**63 as two's complement
                            ``BIT(n)``                   (``v - 2**64``, negative): lossless
DECIMAL(p,s)                ``DECIMAL_TEXT(p,s)``        TEXT, exact, padded to ``s`` digits ("1.50")
FLOAT, DOUBLE               ``FLOAT``, ``DOUBLE``        REAL (FLOAT as the double the binlog carries)
YEAR                        ``YEAR``                     INTEGER
DATE                        ``DATE``                     TEXT ``YYYY-MM-DD`` (zero dates kept: ``0000-00-00``)
DATETIME(fsp)               ``DATETIME(fsp)``            TEXT ``YYYY-MM-DD HH:MM:SS[.fff]``, ``fsp`` digits
TIMESTAMP(fsp)              ``TIMESTAMP(fsp)``           the same text, in UTC
TIME(fsp)                   ``TIME(fsp)``                TEXT ``[-]HH:MM:SS[.fff]`` (hours may exceed 99)
CHAR/VARCHAR(n), TEXT       same name                    TEXT
BINARY/VARBINARY(n), BLOB   same name                    BLOB
ENUM, SET                   ``ENUM_TEXT``, ``SET_TEXT``  TEXT: the member name / names joined by ","
JSON                        ``JSON_TEXT``                TEXT, the document as the binlog carries it
==========================  ===========================  ==========================================

A database of the upstream is an attached SQLite file; statements name
tables through the attachment alias :func:`schema_alias`.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from bridge.proto import row_pb2
from bridge.rowtemporal import MySQLDate, MySQLDateTime
from drainer.sinks.sql.dialect import Converter, Dialect

T = row_pb2.ColumnType

_UINT64_WRAP = 1 << 64
_INT64_MAX = (1 << 63) - 1
_INT_NAMES = {T.TINYINT: "TINYINT", T.SMALLINT: "SMALLINT", T.MEDIUMINT: "MEDIUMINT", T.INT: "INT"}
_PLAIN_NAMES = {
    T.FLOAT: "FLOAT",
    T.DOUBLE: "DOUBLE",
    T.YEAR: "YEAR",
    T.DATE: "DATE",
    T.TEXT: "TEXT",
    T.BLOB: "BLOB",
    T.JSON: "JSON_TEXT",
    T.ENUM: "ENUM_TEXT",
    T.SET: "SET_TEXT",
}
_SIZED_NAMES = {T.CHAR: "CHAR", T.VARCHAR: "VARCHAR", T.BINARY: "BINARY", T.VARBINARY: "VARBINARY"}
_FSP_NAMES = {T.DATETIME: "DATETIME", T.TIMESTAMP: "TIMESTAMP", T.TIME: "TIME"}


def schema_alias(db: str) -> str:
    """The ATTACH name of database ``db`` (``main`` and ``temp`` are SQLite's own)."""
    return f"db:{db}"


def declared_type(column: row_pb2.Column) -> str:
    """The SQLite column type for ``column`` (see the module's table)."""
    kind = column.type
    if kind in _INT_NAMES or kind == T.BIGINT:
        return _INT_NAMES.get(kind, "BIGINT") + (" UNSIGNED" if column.unsigned else "")
    if kind == T.DECIMAL:
        return f"DECIMAL_TEXT({column.precision},{column.scale})" if column.precision else "DECIMAL_TEXT"
    if kind == T.BIT:
        return f"BIT({column.length or 64})"
    if kind in _SIZED_NAMES:
        name = _SIZED_NAMES[kind]
        return f"{name}({column.length})" if column.length else name
    if kind in _FSP_NAMES:
        name = _FSP_NAMES[kind]
        return f"{name}({column.fsp})" if column.fsp else name
    return _PLAIN_NAMES[kind]


def uint64_to_sqlite(value: object) -> object:
    """Unsigned 64-bit values above SQLite's INTEGER range wrap to negative (two's complement)."""
    assert isinstance(value, int)
    return value - _UINT64_WRAP if value > _INT64_MAX else value


def decimal_text(value: object) -> str:
    """Plain decimal text, never exponent notation (``str(Decimal("1E-7"))`` would be ``1E-7``)."""
    return format(value, "f") if isinstance(value, Decimal) else str(value)


def date_text(value: object) -> str:
    if isinstance(value, date):
        return value.isoformat()
    assert isinstance(value, MySQLDate)
    return str(value)


def _fraction(microsecond: int, fsp: int) -> str:
    # The row codec refuses digits beyond fsp, so cutting the text loses nothing.
    return f".{microsecond:06d}"[: fsp + 1] if fsp else ""


def datetime_text(value: object, fsp: int) -> str:
    """``YYYY-MM-DD HH:MM:SS`` plus ``fsp`` fraction digits; aware values in UTC."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        value = value.astimezone(UTC)
    assert isinstance(value, datetime | MySQLDateTime)
    return (
        f"{value.year:04d}-{value.month:02d}-{value.day:02d} "
        f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}{_fraction(value.microsecond, fsp)}"
    )


def time_text(value: object, fsp: int) -> str:
    """``[-]HH:MM:SS`` plus ``fsp`` fraction digits, as MySQL prints TIME."""
    assert isinstance(value, timedelta)
    total = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    sign = "-" if total < 0 else ""
    seconds, micro = divmod(abs(total), 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}{_fraction(micro, fsp)}"


class SQLiteDialect(Dialect):
    """SQLite 3.35+: ``?`` placeholders, ``IS`` as NULL-safe equality, one-row changes by rowid."""

    name = "sqlite"

    def table_ref(self, db: str, table: str) -> str:
        return f"{self.quote(schema_alias(db))}.{self.quote(table)}" if db else self.quote(table)

    def update_one(self, table_ref: str, assignments: str, condition: str) -> str:
        # SQLite's UPDATE/DELETE ... LIMIT needs a compile-time option; a rowid subquery does not.
        return (
            f"UPDATE {table_ref} SET {assignments} WHERE rowid IN "  # noqa: S608 - quoted identifiers
            f"(SELECT rowid FROM {table_ref} WHERE {condition} LIMIT 1)"
        )

    def delete_one(self, table_ref: str, condition: str) -> str:
        return (
            f"DELETE FROM {table_ref} WHERE rowid IN "  # noqa: S608 - quoted identifiers, placeholders
            f"(SELECT rowid FROM {table_ref} WHERE {condition} LIMIT 1)"
        )

    def converter(self, column: row_pb2.Column) -> Converter | None:
        kind, fsp = column.type, column.fsp
        if (kind == T.BIGINT and column.unsigned) or (kind == T.BIT and (column.length or 64) == 64):
            return uint64_to_sqlite
        if kind == T.DECIMAL:
            return decimal_text
        if kind == T.DATE:
            return date_text
        if kind in (T.DATETIME, T.TIMESTAMP):
            return lambda value: datetime_text(value, fsp)
        if kind == T.TIME:
            return lambda value: time_text(value, fsp)
        return None
