"""Connections of the MySQL sink and the one place pymysql's errors become sink errors.

Every connection runs with ``time_zone = '+00:00'`` (TIMESTAMP values are
UTC instants), ``utf8mb4``, autocommit off (workers) or on (the control
connection: DDL and progress reads), the configured ``sql_mode`` and
``foreign_key_checks``, READ COMMITTED (no gap locks between workers that
change neighbouring keys), and multi-statements enabled (a worker sends a
group of one-row UPDATEs as one round trip; every value in them is escaped
by pymysql, every identifier quoted).

:func:`translate_error` sorts errors:

- **retriable** (:class:`SinkUnavailable`): deadlock (1213), lock wait
  timeout (1205), the server going away or refusing connections (2002, 2003,
  2006, 2013, 2055, 1040, 1053, 1927 connection killed, 1317 query
  interrupted, 1290/1836 read-only during a failover), and any pymysql
  ``OperationalError``/``InterfaceError`` without a server error code or a
  socket error;
- everything else is **non-retriable** (:class:`SinkApplyError`): a missing
  table (1146), an unknown column (1054), a duplicate key outside safe mode
  (1062), a foreign key (1452), data too long (1406)...

Messages name where (table, commit_ts) and the statement's shape; the
server's own text is kept with every quoted literal replaced by ``'…'``,
since MySQL quotes values in it (``Duplicate entry '42' for key ...``).
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
from dataclasses import dataclass
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from bridge.dsn import Dsn
from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable

log = logging.getLogger(__name__)

RETRIABLE_CODES = frozenset((1040, 1053, 1205, 1213, 1290, 1317, 1836, 1927, 2002, 2003, 2006, 2013, 2055, 0))
_LITERAL = re.compile(r"'(?:[^'\\]|\\.|'')*'")
_NAMED = re.compile(r"(?i)(for key|for column|column|key|table|index|constraint|database) $")


@dataclass(frozen=True)
class ConnectSettings:
    dsn: Dsn
    connect_timeout: float
    read_timeout: float
    write_timeout: float
    sql_mode: str
    foreign_key_checks: bool

    def connect(self, autocommit: bool) -> Any:
        """A new connection; raises pymysql errors (callers translate them)."""
        init = "SET time_zone = '+00:00', sql_mode = %s, foreign_key_checks = %s"
        conn = self.dsn.connect(
            connect_timeout=max(1, int(self.connect_timeout)),
            database=None,  # tables land in databases of their own names
            autocommit=autocommit,
            read_timeout=self.read_timeout or None,
            write_timeout=self.write_timeout or None,
            client_flag=CLIENT.MULTI_STATEMENTS,
        )
        try:
            with conn.cursor() as cur:
                cur.execute(init, (self.sql_mode, 1 if self.foreign_key_checks else 0))
                # No gap locks: workers change disjoint rows, next-key locks would make them deadlock.
                cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            if not autocommit:
                conn.commit()
        except BaseException:
            close_quietly(conn)
            raise
        return conn


def close_quietly(conn: Any) -> None:
    """Close ``conn`` without raising (it may be broken already)."""
    if conn is None:
        return
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - a broken connection only needs to go away
        with contextlib.suppress(Exception):
            conn._force_close()  # pymysql's way to drop a dead socket


def error_code(exc: BaseException) -> int | None:
    """The MySQL error number of a pymysql error, if it has one."""
    args = getattr(exc, "args", ())
    if isinstance(exc, pymysql.err.MySQLError) and args and isinstance(args[0], int):
        return args[0]
    return None


def is_retriable(exc: BaseException) -> bool:
    if isinstance(exc, OSError | socket.timeout | TimeoutError):
        return True
    code = error_code(exc)
    if code is not None:
        return code in RETRIABLE_CODES
    return isinstance(exc, pymysql.err.OperationalError | pymysql.err.InterfaceError)


def redact(message: str) -> str:
    """The server's message with quoted literals (values) replaced by ``'…'``; names stay."""

    def replace(match: re.Match[str]) -> str:
        if _NAMED.search(message[max(0, match.start() - 12) : match.start()]):
            return match.group(0)
        return "'…'"

    return _LITERAL.sub(replace, message)


def describe(exc: BaseException) -> str:
    code = error_code(exc)
    args: tuple[object, ...] = tuple(getattr(exc, "args", ()))
    text = str(args[1]) if len(args) > 1 else str(exc)
    if code in RETRIABLE_CODES:  # connection and locking messages carry no values: keep them whole
        return f"({code}) {text}"
    return f"({code}) {redact(text)}" if code is not None else f"{type(exc).__name__}: {redact(text)}"


def translate_error(exc: BaseException, where: str, shape: str = "") -> SinkError:
    """The one place pymysql's (and socket) exceptions become sink errors; see the module docstring."""
    statement = f"; statement: {shape}" if shape else ""
    if is_retriable(exc):
        return SinkUnavailable(f"{where}: the downstream is unavailable or busy: {describe(exc)}{statement}")
    return SinkApplyError(f"{where}: the downstream refused the change: {describe(exc)}{statement}")
