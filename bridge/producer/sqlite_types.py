"""SQLite declared types -> ``bridge.row`` columns, and sqlite3 values <-> row codec values.

SQLite types values dynamically; a column's *declared* type only sets an
affinity. The writer reads the declared type (``PRAGMA table_xinfo``) as the
column's SQL type and stores each value in a fixed form, so that rows read
back convert exactly. Supported declared types (case-insensitive, optional
``UNSIGNED`` after integer types):

===========================================  ==============  ====================================
declared type                                ColumnType      stored as (sqlite3 value)
===========================================  ==============  ====================================
``TINYINT SMALLINT MEDIUMINT INT``           same            INTEGER
``INTEGER BIGINT``                           BIGINT          INTEGER (``INTEGER PRIMARY KEY``
                                                             is the rowid: auto-increment)
``BOOLEAN BOOL``                             TINYINT         INTEGER 0/1
``REAL DOUBLE``, ``DOUBLE PRECISION``        DOUBLE          REAL
``FLOAT``                                    FLOAT           REAL
``DECIMAL(p,s) NUMERIC(p,s)``, p <= 15       DECIMAL(p,s)    written as text, kept by NUMERIC
                                                             affinity as INTEGER/REAL, exact up
                                                             to 15 digits; read back as Decimal
``BIT(n)``                                   BIT(n)          INTEGER
``YEAR``                                     YEAR            INTEGER
``DATE``                                     DATE            TEXT ``YYYY-MM-DD``
``DATETIME(fsp)``                            DATETIME(fsp)   TEXT ``YYYY-MM-DD HH:MM:SS[.ffffff]``
``TIMESTAMP(fsp)``                           TIMESTAMP(fsp)  the same text, in UTC
``TIME(fsp)``                                TIME(fsp)       TEXT ``[-]HH:MM:SS[.ffffff]``
``CHAR(n) VARCHAR(n) NVARCHAR(n)``           CHAR, VARCHAR   TEXT (n enforced by the writer)
``TEXT CLOB TINYTEXT MEDIUMTEXT LONGTEXT``   TEXT            TEXT
``BINARY(n) VARBINARY(n)``                   BINARY, VARB.   BLOB
``BLOB TINYBLOB MEDIUMBLOB LONGBLOB``        BLOB            BLOB
``JSON``                                     JSON            TEXT (JSON text)
===========================================  ==============  ====================================

Fractions are written with as many digits as the value has (never rounded),
so a value finer than the column's fsp reaches the row codec, which refuses
it. ENUM and SET cannot be declared in SQLite (use VARCHAR); a column with
no declared type, any other type, or a DECIMAL wider than 15 digits raises
:class:`UnsupportedSchema` naming the column.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from bridge.producer.errors import UnsupportedSchema
from bridge.producer.upstream import IDENTITY, ColumnAdapter, identity
from bridge.proto import row_pb2
from bridge.rowtemporal import MySQLDate, MySQLDateTime
from bridge.rowvalues import RowValueError

T = row_pb2.ColumnType

MAX_DECIMAL_DIGITS = 15  # what a REAL keeps exactly, so what NUMERIC affinity keeps

_DECLARED = re.compile(
    r"^\s*([a-z]+(?:\s+[a-z]+)*?)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*(unsigned)?\s*$", re.IGNORECASE
)
_TYPES = {
    "tinyint": T.TINYINT,
    "smallint": T.SMALLINT,
    "mediumint": T.MEDIUMINT,
    "int": T.INT,
    "integer": T.BIGINT,
    "bigint": T.BIGINT,
    "boolean": T.TINYINT,
    "bool": T.TINYINT,
    "real": T.DOUBLE,
    "double": T.DOUBLE,
    "double precision": T.DOUBLE,
    "float": T.FLOAT,
    "decimal": T.DECIMAL,
    "numeric": T.DECIMAL,
    "bit": T.BIT,
    "year": T.YEAR,
    "date": T.DATE,
    "datetime": T.DATETIME,
    "timestamp": T.TIMESTAMP,
    "time": T.TIME,
    "char": T.CHAR,
    "varchar": T.VARCHAR,
    "nvarchar": T.VARCHAR,
    "text": T.TEXT,
    "clob": T.TEXT,
    "tinytext": T.TEXT,
    "mediumtext": T.TEXT,
    "longtext": T.TEXT,
    "binary": T.BINARY,
    "varbinary": T.VARBINARY,
    "blob": T.BLOB,
    "tinyblob": T.BLOB,
    "mediumblob": T.BLOB,
    "longblob": T.BLOB,
    "json": T.JSON,
}
_INTEGERS = frozenset((T.TINYINT, T.SMALLINT, T.MEDIUMINT, T.INT, T.BIGINT))


def column_from_declared(name: str, declared: str, table: str) -> row_pb2.Column:
    """A ``Column`` (id 0, nullable unset) from a declared type such as ``DECIMAL(12,2)``."""
    match = _DECLARED.match(declared or "")
    kind = _TYPES.get(re.sub(r"\s+", " ", match.group(1).lower())) if match else None
    if match is None or kind is None:
        raise UnsupportedSchema(
            f"table {table}: column {name!r} has declared type {declared!r}, which the SQLite upstream "
            "does not map (see the supported types in docs/producers.md)"
        )
    size = int(match.group(2)) if match.group(2) else 0
    column = row_pb2.Column(name=name, type=kind, sql_type=declared.strip())
    if match.group(4):
        if kind not in _INTEGERS:
            raise UnsupportedSchema(f"table {table}: column {name!r}: UNSIGNED applies to integer types only")
        column.unsigned = True
    if kind in (T.CHAR, T.VARCHAR, T.BINARY, T.VARBINARY, T.BIT):
        column.length = size
    elif kind in (T.DATETIME, T.TIMESTAMP, T.TIME):
        column.fsp = size
    elif kind == T.DECIMAL:
        if not 0 < size <= MAX_DECIMAL_DIGITS:
            raise UnsupportedSchema(
                f"table {table}: column {name!r} is {declared}: the SQLite upstream carries "
                f"DECIMAL(p,s) with 1 <= p <= {MAX_DECIMAL_DIGITS} exactly; use TEXT for wider numbers"
            )
        column.precision, column.scale = size, int(match.group(3) or 0)
    return column


def _int_from_db(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _float_from_db(value: Any) -> Any:
    return float(value) if isinstance(value, int) else value


def _decimal_to_db(value: Any) -> Any:
    return format(value, "f") if isinstance(value, Decimal) else value


def _decimal_from_db(value: Any) -> Any:
    if isinstance(value, float):
        return Decimal(repr(value))
    return Decimal(value) if isinstance(value, int | str) else value


def _fraction(microsecond: int) -> str:
    return f".{microsecond:06d}".rstrip("0") if microsecond else ""


def _date_to_db(value: Any) -> Any:
    if isinstance(value, datetime):
        raise RowValueError(f"a DATE column takes a datetime.date, got datetime {value!r}")
    return (
        value.isoformat()
        if isinstance(value, date)
        else str(value)
        if isinstance(value, MySQLDate)
        else value
    )


def _split_date(text: str) -> tuple[int, int, int]:
    y, m, d = (int(part) for part in text.split("-"))
    return y, m, d


def _date_from_db(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    y, m, d = _split_date(value)
    return date(y, m, d) if y and m and d else MySQLDate(y, m, d)


def _datetime_to_db(utc: bool) -> Any:
    def to_db(value: Any) -> Any:
        if isinstance(value, datetime):
            if value.tzinfo is not None:
                if not utc:
                    raise RowValueError(f"a DATETIME column takes a naive datetime, got {value!r}")
                value = value.astimezone(UTC).replace(tzinfo=None)
            return value.strftime("%Y-%m-%d %H:%M:%S") + _fraction(value.microsecond)
        return str(value) if isinstance(value, MySQLDateTime) else value

    return to_db


def _datetime_from_db(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    day, _, clock = value.replace("T", " ").partition(" ")
    y, mo, d = _split_date(day)
    hms, _, fraction = (clock or "00:00:00").partition(".")
    h, mi, s = (int(part) for part in hms.split(":"))
    micro = int((fraction + "000000")[:6]) if fraction else 0
    if len(fraction) > 6 and fraction[6:].strip("0"):
        raise RowValueError(f"stored time {value!r} is finer than microseconds")
    if y and mo and d:
        return datetime(y, mo, d, h, mi, s, micro)
    return MySQLDateTime(y, mo, d, h, mi, s, micro)


def _time_to_db(value: Any) -> Any:
    if not isinstance(value, timedelta):
        return value
    total = abs(value) // timedelta(microseconds=1)
    seconds, micro = divmod(total, 1_000_000)
    sign = "-" if value < timedelta(0) else ""
    return f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}{_fraction(micro)}"


def _time_from_db(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    negative = value.startswith("-")
    hms, _, fraction = value.lstrip("-").partition(".")
    h, m, s = (int(part) for part in hms.split(":"))
    delta = timedelta(hours=h, minutes=m, seconds=s, microseconds=int((fraction + "000000")[:6]))
    return -delta if negative else delta


def _json_to_db(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _json_from_db(value: Any) -> Any:
    # NUMERIC affinity turns the JSON texts "12" and "1.5" into numbers
    return value if isinstance(value, str) else json.dumps(value)


def _bytes_to_db(value: Any) -> Any:
    return bytes(value) if isinstance(value, bytearray | memoryview) else value


_ADAPTERS = {
    T.DECIMAL: ColumnAdapter(_decimal_to_db, _decimal_from_db),
    T.FLOAT: ColumnAdapter(identity, _float_from_db),
    T.DOUBLE: ColumnAdapter(identity, _float_from_db),
    T.DATE: ColumnAdapter(_date_to_db, _date_from_db),
    T.DATETIME: ColumnAdapter(_datetime_to_db(utc=False), _datetime_from_db),
    T.TIMESTAMP: ColumnAdapter(_datetime_to_db(utc=True), _datetime_from_db),
    T.TIME: ColumnAdapter(_time_to_db, _time_from_db),
    T.JSON: ColumnAdapter(_json_to_db, _json_from_db),
    T.BINARY: ColumnAdapter(_bytes_to_db, identity),
    T.VARBINARY: ColumnAdapter(_bytes_to_db, identity),
    T.BLOB: ColumnAdapter(_bytes_to_db, identity),
}


def adapter_for(column: row_pb2.Column) -> ColumnAdapter:
    if column.type in _INTEGERS or column.type in (T.BIT, T.YEAR):
        return ColumnAdapter(identity, _int_from_db)
    return _ADAPTERS.get(column.type, IDENTITY)
