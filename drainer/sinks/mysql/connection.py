"""Connections of the MySQL sink and the one place pymysql's errors become sink errors.

Every connection runs with ``time_zone = '+00:00'`` (TIMESTAMP values are
UTC instants), ``utf8mb4``, autocommit off (workers) or on (the control
connection: DDL and progress reads), the configured ``sql_mode`` and
``foreign_key_checks``, READ COMMITTED (no gap locks between workers that
change neighbouring keys), and multi-statements enabled (a worker sends a
group of one-row UPDATEs as one round trip; every value in them is escaped
by pymysql, every identifier quoted).

:func:`translate_error` sorts errors:

- **retriable** (:class:`SinkUnavailable`): what :func:`bridge.mysql.is_retriable`
  says may pass (its table :data:`bridge.mysql.RETRIABLE_CODES` gives the
  reason for each code: deadlock, lock wait timeout, the server going away or
  refusing connections, a killed connection or query, a read-only server
  during a failover, TiDB's write conflicts...), and a socket error;
- everything else is **non-retriable** (:class:`SinkApplyError`): a missing
  table (1146), an unknown column (1054), a duplicate key outside safe mode
  (1062), a foreign key (1452), data too long (1406)...

Messages name where (table, commit_ts) and the statement's shape; the
server's own text is kept with every quoted literal replaced by ``'…'``,
since MySQL quotes values in it (``Duplicate entry '42' for key ...``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from pymysql.constants import CLIENT

from bridge import mysql
from bridge.dsn import Dsn
from bridge.mysql import RETRIABLE_CODES, close_quietly, error_code, is_retriable
from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable

__all__ = [
    "ConnectSettings",
    "close_quietly",
    "describe",
    "error_code",
    "is_retriable",
    "timeout_error",
    "translate_error",
]

log = logging.getLogger(__name__)

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

    @property
    def applied_read_timeout(self) -> float:
        """The read timeout the connections get: the DSN's ``?read_timeout=``, else ``read-timeout``."""
        return float(self.dsn.param("read_timeout") or self.read_timeout)

    @property
    def applied_write_timeout(self) -> float:
        return float(self.dsn.param("write_timeout") or self.write_timeout)

    def connect(self, autocommit: bool) -> Any:
        """A new connection; raises pymysql errors (callers translate them)."""
        init = "SET time_zone = '+00:00', sql_mode = %s, foreign_key_checks = %s"
        connect_timeout = max(1, int(self.connect_timeout))
        timeouts = mysql.MySQLTimeouts(connect_timeout, self.read_timeout, self.write_timeout)
        conn = mysql.connect(
            self.dsn,
            timeouts,
            database=None,  # tables land in databases of their own names
            autocommit=autocommit,
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


def redact(message: str) -> str:
    """The server's message with quoted literals (values) replaced by ``'…'``; names stay."""

    def replace(match: re.Match[str]) -> str:
        if _NAMED.search(message[max(0, match.start() - 12) : match.start()]):
            return match.group(0)
        return "'…'"

    return _LITERAL.sub(replace, message)


def describe(exc: BaseException) -> str:
    code = error_code(exc)
    text = mysql.server_message(exc)
    if code in RETRIABLE_CODES:  # connection and locking messages carry no values: keep them whole
        return f"({code}) {text}"
    return f"({code}) {redact(text)}" if code is not None else f"{type(exc).__name__}: {redact(text)}"


def timeout_error(exc: BaseException, where: str, settings: ConnectSettings, shape: str = "") -> SinkError:
    """A read or write that reached its timeout (:func:`bridge.mysql.timed_out`), named with the
    timeout that applied: retriable, as the link may come back."""
    statement = f"; statement: {shape}" if shape else ""
    return SinkUnavailable(
        f"{where}: no answer within read-timeout {settings.applied_read_timeout:g}s "
        f"(write-timeout {settings.applied_write_timeout:g}s): the link to the downstream is cut "
        f"or the server is stalled: {describe(exc)}{statement}"
    )


def translate_error(exc: BaseException, where: str, shape: str = "") -> SinkError:
    """The one place pymysql's (and socket) exceptions become sink errors; see the module docstring."""
    statement = f"; statement: {shape}" if shape else ""
    if is_retriable(exc):
        return SinkUnavailable(f"{where}: the downstream is unavailable or busy: {describe(exc)}{statement}")
    return SinkApplyError(f"{where}: the downstream refused the change: {describe(exc)}{statement}")
