"""The MySQL/MariaDB dialect (pymysql): backtick quoting, ``%s`` placeholders, ``<=>``, ``LIMIT 1``.

pymysql binds most decoded values exactly as MySQL stores them (``Decimal``
as its digits, ``bytes`` as binary, ``int`` of any size, ``float``). The
converters cover the rest:

- DATE/DATETIME/TIMESTAMP as text (``2024-01-02 03:04:05.120``): MySQL's
  zero dates (``MySQLDate``/``MySQLDateTime``) have no Python type pymysql
  knows, and TIMESTAMP values are UTC — **the connection must run with
  ``time_zone = '+00:00'``** so MySQL stores the instant the binlog carries.

TIME binds as the ``timedelta`` it decodes to (negative values included).

Identifiers are quoted with backticks and any ``%`` in them doubled: every
statement of this dialect goes through pymysql's ``%`` formatting (``execute``
with parameters, ``executemany``, ``mogrify``), which turns ``%%`` back into
``%``. Statements run without parameters (DDL) quote with
:func:`drainer.translator.mysql_ddl.quote` instead.

Known limit of matching a keyless table's whole row: ``FLOAT`` columns are
compared with ``<=>`` against the double the binlog carries, which equals
the stored single-precision value only when the value is exact in single
precision; give such tables a key.
"""

from __future__ import annotations

from bridge.mysql import quote_identifier
from bridge.proto import row_pb2
from drainer.sinks.sql.dialect import Converter, Dialect
from drainer.sinks.sql.sqlite import date_text, datetime_text

T = row_pb2.ColumnType


class MySQLDialect(Dialect):
    name = "mysql"
    placeholder = "%s"
    null_safe_equal = "<=>"
    quote_char = "`"

    def quote(self, name: str) -> str:
        return quote_identifier(name).replace("%", "%%")  # statements with parameters: % doubled

    def converter(self, column: row_pb2.Column) -> Converter | None:
        kind, fsp = column.type, column.fsp
        if kind == T.DATE:
            return date_text
        if kind in (T.DATETIME, T.TIMESTAMP):
            return lambda value: datetime_text(value, fsp)
        return None
