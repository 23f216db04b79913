"""The SQLite upstream (the embedded default): one database file.

Every writing transaction starts with ``BEGIN IMMEDIATE``, which takes the
database's write lock at once: transactions that write are serialized, across
threads and processes, and each one takes its commit_ts while holding the
lock, so commit_ts order is the order in which they changed the database.
DDL runs inside such a transaction too and rolls back with it. Threads of one
process queue on a lock before ``BEGIN IMMEDIATE`` rather than poll SQLite's
busy handler; other processes wait up to ``busy_timeout``.

Connections use WAL journaling (readers such as ``binlog-bridge diff`` do not
block the writer) and enforce foreign keys, as MySQL does. The database name
in every TableSchema and SchemaChange is the upstream's ``database``: ``main``
(SQLite's name for the file's schema) unless the DSN names another
(``sqlite:up.db?database=shop``), which two SQLite upstreams of one cluster
need so that their tables stay apart downstream. The name is part of what the
file's ``bridge_schema`` records: keep it for the life of the file.

sqlite3's exceptions become :class:`~bridge.producer.errors.UpstreamError`
here: a busy or locked database is :class:`UpstreamConflict`.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from bridge.dsn import connect_sqlite
from bridge.producer import sqlite_types
from bridge.producer.errors import UnsupportedSchema, UpstreamConflict, UpstreamError
from bridge.producer.status import STATUS_TABLE
from bridge.producer.upstream import SQLITE, ColumnAdapter, Session
from bridge.proto import row_pb2

log = logging.getLogger(__name__)

DATABASE = "main"  # the default database name; SQL on the file always uses schema main
_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")  # and their extended codes, e.g. SQLITE_BUSY_SNAPSHOT
# SQLite 3.35 added RETURNING to INSERT, UPDATE and DELETE.
_RETURNING = frozenset({"insert", "update", "delete"} if sqlite3.sqlite_version_info >= (3, 35) else ())


class SQLiteSession:
    """One sqlite3 connection; see :class:`bridge.producer.upstream.Session`."""

    dialect = SQLITE

    def __init__(self, path: str, write_lock: threading.Lock, busy_timeout: float) -> None:
        self.broken = False
        self.returning = _RETURNING
        self._path = path
        self._write_lock = write_lock
        self._holding = False
        try:
            self._conn = connect_sqlite(
                path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            raise self._translate(exc, "open") from exc

    def _translate(self, exc: sqlite3.Error, what: str) -> UpstreamError:
        name = getattr(exc, "sqlite_errorname", "") or ""
        code = int(getattr(exc, "sqlite_errorcode", 0) or 0)
        message = f"sqlite {self._path}: {what} failed: {exc} ({name or type(exc).__name__})"
        if name.startswith(_BUSY):
            return UpstreamConflict(message, code=code)
        return UpstreamError(message, code=code)

    def _run(self, what: str, sql: str, params: Sequence[object]) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, tuple(params))
        except sqlite3.Error as exc:
            raise self._translate(exc, what) from exc

    def begin(self) -> None:
        self._write_lock.acquire()
        self._holding = True
        try:
            self._run("BEGIN IMMEDIATE", "BEGIN IMMEDIATE", ())
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._holding and not self._conn.in_transaction:
            self._holding = False
            self._write_lock.release()

    def commit(self) -> None:
        try:
            self._run("COMMIT", "COMMIT", ())
        finally:
            self._release()  # a failed COMMIT leaves the transaction open: keep the lock until rollback

    def rollback(self) -> None:
        try:
            if self._conn.in_transaction:
                self._conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            log.warning("%s", self._translate(exc, "ROLLBACK"))
        finally:
            self._release()

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._run("query", sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._translate(exc, "query") from exc

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        return int(self._run("statement", sql, params).rowcount)

    def insert(self, sql: str, params: Sequence[object]) -> int:
        return int(self._run("insert", sql, params).lastrowid or 0)

    def close(self) -> None:
        self.rollback()
        self._conn.close()
        self.broken = True


class SQLiteUpstream:
    """One SQLite database file; see :class:`bridge.producer.upstream.Upstream`."""

    dialect = SQLITE
    transactional_ddl = True

    def __init__(self, path: str, busy_timeout: float = 30.0, *, database: str = DATABASE) -> None:
        self.path = path
        self.database = database
        self._busy_timeout = busy_timeout
        self._write_lock = threading.Lock()

    def connect(self) -> SQLiteSession:
        return SQLiteSession(self.path, self._write_lock, self._busy_timeout)

    def describe(self) -> str:
        named = "" if self.database == DATABASE else f" (database {self.database})"
        return f"sqlite upstream {self.path}{named}"

    def bookkeeping_ddl(self) -> Sequence[str]:
        return (
            f'CREATE TABLE IF NOT EXISTS "{STATUS_TABLE}" '
            "(start_ts INTEGER NOT NULL PRIMARY KEY, commit_ts INTEGER NOT NULL)",
            'CREATE TABLE IF NOT EXISTS "bridge_schema" ('
            "table_id INTEGER NOT NULL PRIMARY KEY, db TEXT NOT NULL, tbl TEXT NOT NULL, "
            "live INTEGER NOT NULL, version INTEGER NOT NULL, schema_pb BLOB NOT NULL)",
            'CREATE INDEX IF NOT EXISTS "bridge_schema_by_name" ON "bridge_schema" (db, tbl)',
        )

    def describe_table(self, session: Session, table: str) -> row_pb2.TableSchema | None:
        found = session.query(
            "SELECT name, wr FROM pragma_table_list WHERE schema = 'main' AND type = 'table' "
            "AND name = ? COLLATE NOCASE",
            [table],
        )
        if not found:
            return None
        name = str(found[0][0])
        if found[0][1]:
            raise UnsupportedSchema(
                f"table {name} is WITHOUT ROWID, which the SQLite upstream does not carry"
            )
        rows = session.query(
            'SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_xinfo(?) '
            "WHERE hidden <> 1 ORDER BY cid",
            [name],
        )
        primary = [str(r[0]) for r in sorted((r for r in rows if r[4]), key=lambda r: r[4])]
        columns = []
        for col_name, declared, notnull, default, pk in rows:
            column = sqlite_types.column_from_declared(col_name, declared, f"{self.database}.{name}")
            column.nullable = not (notnull or pk)
            column.auto_increment = primary == [col_name] and str(declared).strip().upper() == "INTEGER"
            if default is not None:
                column.default_value = str(default)
            columns.append(column)
        indexes = (
            [row_pb2.Index(name="PRIMARY", primary=True, unique=True, columns=primary)] if primary else []
        )
        indexes.extend(self._indexes(session, name))
        return row_pb2.TableSchema(db=self.database, table=name, columns=columns, indexes=indexes)

    def _indexes(self, session: Session, table: str) -> list[row_pb2.Index]:
        indexes = []
        listed = session.query(
            'SELECT name, "unique", origin FROM pragma_index_list(?) ORDER BY name', [table]
        )
        for index_name, unique, origin in listed:
            if origin == "pk":
                continue
            names = session.query("SELECT name FROM pragma_index_info(?) ORDER BY seqno", [index_name])
            if names and all(n[0] is not None for n in names):  # expression indexes name no column
                indexes.append(
                    row_pb2.Index(name=index_name, unique=bool(unique), columns=[str(n[0]) for n in names])
                )
        return indexes

    def adapters(self, schema: row_pb2.TableSchema) -> tuple[ColumnAdapter, ...]:
        return tuple(sqlite_types.adapter_for(c) for c in schema.columns)

    def table_for_index(self, session: Session, index: str) -> str | None:
        rows = session.query("SELECT tbl_name FROM sqlite_master WHERE type = 'index' AND name = ?", [index])
        return str(rows[0][0]) if rows else None

    def close(self) -> None:
        """Nothing to release: sessions own their connections."""
