"""What the writer needs from an upstream database, whatever its kind.

An :class:`Upstream` is one database (a MySQL/MariaDB schema or a SQLite
file) that hands out :class:`Session` objects, one connection each, and knows
its dialect, how to describe a table as a ``TableSchema`` and how to convert
its driver's values to and from the row codec's (:class:`ColumnAdapter`).
``mysql.py`` and ``sqlite.py`` implement it (and import this module);
:func:`bridge.producer.open.open_upstream` picks one from a DSN.

SQL text is built only from :meth:`Dialect.quote`-quoted identifiers and
placeholders; values always travel as parameters.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from bridge.proto import row_pb2

Convert = Callable[[Any], Any]


@dataclass(frozen=True)
class Dialect:
    """The SQL spelling differences the writer's statements depend on."""

    name: str
    param: str  # the driver's placeholder
    identifier_quote: str
    null_safe_eq: str  # an equality operator that is true for NULL = NULL
    lock_rows: str  # suffix of a SELECT that locks the rows it reads for update
    lock_shared: str  # suffix of a SELECT that share-locks what it reads
    default_row: str  # INSERT INTO t <this>: a row of defaults only

    def quote(self, name: str) -> str:
        """``name`` as a quoted identifier; embedded quote characters are doubled."""
        q = self.identifier_quote
        return q + name.replace(q, q + q) + q

    def eq(self, column: str) -> str:
        """``column <=> ?``: a null-safe equality with one placeholder."""
        return f"{self.quote(column)} {self.null_safe_eq} {self.param}"

    def params(self, count: int) -> str:
        return ", ".join([self.param] * count)


MYSQL = Dialect("mysql", "%s", "`", "<=>", " FOR UPDATE", " LOCK IN SHARE MODE", "() VALUES ()")
SQLITE = Dialect("sqlite", "?", '"', "IS", "", "", "DEFAULT VALUES")


@dataclass(frozen=True)
class ColumnAdapter:
    """How one column's values cross the driver.

    ``to_db`` turns a value given to the writer (a row codec value: Decimal,
    datetime, a set of SET members, a JSON-able object, ...) into a driver
    parameter; ``from_db`` turns what the driver returns into the row codec's
    value. ``None`` passes through both unchanged.
    """

    to_db: Convert
    from_db: Convert


def identity(value: Any) -> Any:
    return value


IDENTITY = ColumnAdapter(identity, identity)


class Session(Protocol):
    """One upstream connection. Not thread-safe: one transaction at a time.

    Every method translates driver errors into
    :class:`~bridge.producer.errors.UpstreamError`; after an
    :class:`~bridge.producer.errors.UpstreamUnavailable` the session is
    ``broken`` and must be closed.
    """

    dialect: Dialect
    broken: bool
    # Statements that take a RETURNING clause on this server: a subset of {"insert", "update",
    # "delete"} (MariaDB >= 10.5: insert, delete; SQLite >= 3.35: all three; MySQL: none).
    returning: frozenset[str]

    def begin(self) -> None:
        """Start a transaction that will write (SQLite: BEGIN IMMEDIATE, the database write lock)."""

    def commit(self) -> None: ...

    def rollback(self) -> None:
        """Roll back; never raises for a connection that is already gone."""

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]: ...

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        """Run one statement; the number of rows it changed."""

    def insert(self, sql: str, params: Sequence[object]) -> int:
        """Run one INSERT; the auto-increment value (MySQL) or rowid (SQLite) it produced."""

    def close(self) -> None: ...


class Upstream(Protocol):
    """One upstream database the writer runs transactions and DDL on."""

    dialect: Dialect
    database: str  # the ``db`` of every TableSchema and SchemaChange the writer emits
    transactional_ddl: bool  # a DDL can run inside a transaction and be rolled back

    def connect(self) -> Session: ...

    def describe_table(self, session: Session, table: str) -> row_pb2.TableSchema | None:
        """The live table as a TableSchema without ids (0), or None when it does not exist.

        Raises :class:`~bridge.producer.errors.UnsupportedSchema` naming the
        column whose type cannot be carried.
        """

    def adapters(self, schema: row_pb2.TableSchema) -> tuple[ColumnAdapter, ...]:
        """One adapter per column of ``schema``, in order."""

    def bookkeeping_ddl(self) -> Sequence[str]:
        """The statements that create the writer's own tables when missing (idempotent)."""

    def table_for_index(self, session: Session, index: str) -> str | None:
        """The table an index belongs to (for ``DROP INDEX name`` without ``ON``), or None."""

    def describe(self) -> str:
        """The upstream for logs: kind and redacted address."""

    def close(self) -> None: ...


class SessionPool:
    """Idle sessions of one upstream, reused across transactions; thread-safe.

    :meth:`session` lends one (opening a new one when none is idle) and takes
    it back afterwards; a broken session is closed instead of kept.
    """

    def __init__(self, upstream: Upstream, max_idle: int = 64) -> None:
        self._upstream = upstream
        self._max_idle = max_idle
        self._idle: list[Session] = []
        self._lock = threading.Lock()

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self._lock:
            lent = self._idle.pop() if self._idle else None
        if lent is None:
            lent = self._upstream.connect()
        try:
            yield lent
        finally:
            self._give_back(lent)

    def _give_back(self, session: Session) -> None:
        if not session.broken:
            with self._lock:
                if len(self._idle) < self._max_idle:
                    self._idle.append(session)
                    return
        session.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for session in idle:
            session.close()
