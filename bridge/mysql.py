"""The one MySQL adapter: connecting from a :class:`~bridge.dsn.Dsn` with bounded waits, which
errors another try may pass (:data:`RETRIABLE_CODES`, with the reason for each), their
translation into :mod:`bridge.errors`, and identifier quoting.

Every MySQL client of the product opens its connections here: the MySQL sink, its checkpoint
and relay tables, the pump's lost-commit resolver, the transactional producer, ``capture``,
``diff`` and ``consume --apply`` (through the sink). Each connection waits at most
``connect_timeout`` to connect and ``read_timeout`` / ``write_timeout`` for one socket read or
write (:class:`MySQLTimeouts`), so a downstream that stops answering (a blackholed link, a
half-open connection) becomes an error after a bounded time instead of a hang. The DSN's
``?connect_timeout=``, ``?read_timeout=`` and ``?write_timeout=`` override a client's values.

Callers with an error tree of their own (the sink's, the producer's, the checkpoint's) ask
:func:`is_retriable`; the others raise what :func:`translate` returns.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from bridge.dsn import Dsn
from bridge.errors import ConfigError, DatabaseError, DatabaseUnavailable

if TYPE_CHECKING:
    import pymysql.connections

__all__ = [
    "CONFLICT_CODES",
    "DEFAULT_TIMEOUTS",
    "RETRIABLE_CODES",
    "MySQLTimeouts",
    "close_quietly",
    "connect",
    "error_code",
    "is_retriable",
    "quote_identifier",
    "server_message",
    "translate",
]

# Error numbers after which a fresh connection (or, for the conflicts, the transaction run
# again) may succeed, and why. Every other error number is the statement's or the schema's
# fault: trying again gives the same answer.
RETRIABLE_CODES: Mapping[int, str] = MappingProxyType(
    {
        0: "a client error without an error number: the connection is unusable",
        1040: "too many connections",
        1053: "server shutdown in progress",
        1205: "lock wait timeout: the statement was rolled back",
        1213: "deadlock: the transaction was rolled back",
        1290: "the server runs read-only (--read-only: a switchover or failover in progress)",
        1317: "query interrupted (KILL QUERY)",
        1836: "the server is in read-only mode",
        1927: "connection killed (KILL, or a proxy during a failover)",
        2002: "cannot connect through the socket",
        2003: "cannot connect to the server",
        2006: "the server has gone away",
        2013: "lost connection during a query",
        2055: "lost connection (system error)",
        8002: "TiDB: a SELECT FOR UPDATE transaction met a commit conflict; run it again",
        8005: "TiDB: write conflict, txnStartTS is stale; run the transaction again",
        8022: "TiDB: the transaction's commit failed in a way that is safe to retry",
        8027: "TiDB: the information schema is out of date (a DDL is in progress)",
        8028: "TiDB: the information schema changed during the transaction",
        9001: "TiDB: PD server timeout",
        9002: "TiDB: TiKV server timeout",
        9003: "TiDB: TiKV server is busy",
        9004: "TiDB: resolve lock timeout (many conflicting transactions)",
        9005: "TiDB: a region is unavailable",
        9007: "TiDB: write conflict; run the transaction again",
    }
)
# The retriable errors that rolled the transaction back: run the whole transaction again.
CONFLICT_CODES = frozenset({1205, 1213, 8002, 8005, 9007})


@dataclass(frozen=True)
class MySQLTimeouts:
    """The bounded waits of every MySQL connection (0: no limit); a DSN's ``?connect_timeout=``,
    ``?read_timeout=``, ``?write_timeout=`` override them."""

    connect_timeout: float = field(
        default=10.0, metadata={"duration": True, "help": "how long opening a connection may take"}
    )
    read_timeout: float = field(
        default=60.0,
        metadata={
            "duration": True,
            "help": "how long one socket read may wait (a statement's reply): a silent server is "
            "an error after it",
        },
    )
    write_timeout: float = field(
        default=60.0, metadata={"duration": True, "help": "how long one socket write may wait"}
    )

    def validate(self, prefix: str = "") -> None:
        for name in ("connect_timeout", "read_timeout", "write_timeout"):
            value = getattr(self, name)
            if value < 0 or (name == "connect_timeout" and value == 0):
                key = prefix + name.replace("_", "-")
                raise ConfigError(f"{key}: expected a positive duration, got {value:g}s")


DEFAULT_TIMEOUTS = MySQLTimeouts()


def connect(
    dsn: Dsn, timeouts: MySQLTimeouts = DEFAULT_TIMEOUTS, **extra: Any
) -> pymysql.connections.Connection[Any]:
    """A new pymysql connection to ``dsn`` with ``timeouts``; ``extra`` goes to pymysql
    (``autocommit``, ``database=None``, ``cursorclass``, ...). pymysql's errors pass through:
    the caller translates them (:func:`translate`, :func:`is_retriable`)."""
    args = dsn.pymysql_args(
        connect_timeout=timeouts.connect_timeout,
        read_timeout=timeouts.read_timeout,
        write_timeout=timeouts.write_timeout,
        **extra,
    )
    return _connection_class()(**args)


def timed_out(exc: BaseException) -> bool:
    """True when ``exc`` is (or was raised while handling) a socket read or write that reached
    its timeout: pymysql reports one as error 2013, "Lost connection ... (timed out)"."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, TimeoutError):  # socket.timeout is TimeoutError
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return "(timed out)" in str(exc)


@contextlib.contextmanager
def read_timeout(conn: Any, seconds: float) -> Iterator[None]:
    """Let the statements run inside wait ``seconds`` (0: no limit) for their answers instead
    of the connection's read timeout (a long DDL). pymysql has no public per-statement
    timeout: it re-applies ``_read_timeout`` to the socket before each read, so that is set."""
    before = conn._read_timeout
    conn._read_timeout = seconds or None
    try:
        yield
    finally:
        conn._read_timeout = before


def error_code(exc: BaseException) -> int | None:
    """The MySQL error number of a pymysql error, if it has one."""
    import pymysql.err

    args = getattr(exc, "args", ())
    if isinstance(exc, pymysql.err.MySQLError) and args and isinstance(args[0], int):
        return int(args[0])
    return None


def is_retriable(exc: BaseException) -> bool:
    """Whether a fresh connection and another try may succeed (:data:`RETRIABLE_CODES`; a socket
    error or timeout, and a pymysql connection error without a number, count as lost connections)."""
    import pymysql.err

    if isinstance(exc, OSError | socket.timeout | TimeoutError):
        return True
    code = error_code(exc)
    if code is not None:
        return code in RETRIABLE_CODES
    return isinstance(exc, pymysql.err.OperationalError | pymysql.err.InterfaceError)


def server_message(exc: BaseException) -> str:
    """The server's (or client's) text of a pymysql error, without the number. pymysql never
    puts the password in it."""
    args: tuple[object, ...] = tuple(getattr(exc, "args", ()))
    return str(args[1]) if len(args) > 1 else str(exc)


def translate(exc: BaseException, where: str) -> DatabaseError:
    """``exc`` (pymysql's or a socket's) as a :class:`DatabaseError`, retriable when
    :func:`is_retriable`; the message says ``where`` and the server's text."""
    code = error_code(exc) or 0
    message = f"{where}: MySQL error {code}: {server_message(exc)}"
    if is_retriable(exc):
        return DatabaseUnavailable(message, code=code)
    return DatabaseError(message, code=code)


def quote_identifier(name: str) -> str:
    """A MySQL identifier in backquotes (a backquote inside doubled): for names, never values."""
    return "`" + name.replace("`", "``") + "`"


def close_quietly(conn: Any) -> None:
    """Close ``conn`` without raising (it may be broken already, or None)."""
    if conn is None:
        return
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - a broken connection only needs to go away
        with contextlib.suppress(Exception):
            conn._force_close()  # pymysql's way to drop a dead socket


@functools.cache
def _preferred_tls_context() -> ssl.SSLContext:
    """The context of ``ssl-mode=preferred``, built once per process.

    pymysql's default (preferred) mode builds ``ssl.create_default_context()`` on every
    connect, loading the system's CA store (~30 ms of CPU and ~55 ms of wall time per
    connection measured here, against ~1 ms for the whole plaintext connect) for a context
    that verifies nothing. This is the same context: no certificate or host name check, TLS
    when the server offers it. SSLContext may be shared between threads.
    """
    context = ssl.create_default_context()
    context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@functools.cache
def _connection_class() -> type[pymysql.connections.Connection[Any]]:
    """pymysql's Connection, its preferred-mode TLS context shared (:func:`_preferred_tls_context`).

    Imported here: the SQLite paths of the project never load the MySQL driver. pymysql is
    pinned (pyproject.toml); tests/integration/test_mysql_tls.py checks that the preferred mode
    still connects in plaintext to a server without TLS and encrypts with one that has it.
    """
    import pymysql.connections

    class Connection(pymysql.connections.Connection):
        def _create_ssl_ctx(self, sslp: Any) -> ssl.SSLContext:
            if isinstance(sslp, dict) and not sslp:  # pymysql's preferred mode asks for its default
                return _preferred_tls_context()
            return super()._create_ssl_ctx(sslp)  # type: ignore[misc,no-any-return]

    return Connection
