"""A SQLite file, or a directory of them laid out like the sqlite sink's, as a diff side."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import quote, unquote

from bridge.apps.diff.normalize import sqlite_kind
from bridge.apps.diff.sources import (
    FETCH,
    SINK_MAIN_FILE,
    Column,
    DiffSourceError,
    KeyRange,
    TableInfo,
    is_internal,
    quote_identifier,
    range_condition,
)
from bridge.dsn import connect_sqlite


class SQLiteSource:
    """One SQLite file, or a directory of them (one per database).

    ``database`` (a DSN's ``?database=``) names a file's database, as a SQLite
    upstream with that DSN names its tables (default ``main``); for a
    directory it picks that one database's file (``<name>.db``, percent-encoded
    as the sqlite sink writes it).
    """

    def __init__(self, path: Path, database: str = "") -> None:
        self.label = f"sqlite:{path}" + (f"?database={database}" if database else "")
        if path.is_dir() and database:
            file = path / (quote(database, safe="") + ".db")
            if not file.is_file():
                raise DiffSourceError(f"{self.label}: no file {file.name} for database {database!r}")
            self._files = {database: file}
        elif path.is_dir():
            self._files = {unquote(p.stem): p for p in sorted(path.glob("*.db")) if p.name != SINK_MAIN_FILE}
        elif path.is_file():
            self._files = {database or "main": path}
        else:
            raise DiffSourceError(f"{self.label}: no such SQLite file or directory")
        self._conns: dict[str, sqlite3.Connection] = {}

    def _conn(self, db: str) -> sqlite3.Connection:
        if db not in self._conns:
            self._conns[db] = connect_sqlite(
                self._files[db], read_only=True, timeout=30, check_same_thread=False
            )
        return self._conns[db]

    def _failed(self, exc: sqlite3.Error, what: str) -> DiffSourceError:
        return DiffSourceError(f"{self.label}: {what}: {exc}")

    def tables(self) -> list[tuple[str, str]]:
        try:
            return self._tables()
        except sqlite3.Error as exc:
            raise self._failed(exc, "listing tables") from exc

    def _tables(self) -> list[tuple[str, str]]:
        found = []
        for db in self._files:
            rows = self._conn(db).execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            found += [(db, r[0]) for r in rows if not is_internal(r[0])]
        return sorted(found)

    def table_info(self, db: str, table: str) -> TableInfo:
        try:
            return self._table_info(db, table)
        except sqlite3.Error as exc:
            raise self._failed(exc, f"reading the columns of {db}.{table}") from exc

    def _table_info(self, db: str, table: str) -> TableInfo:
        conn = self._conn(db)
        # table_xinfo: generated columns too (table_info leaves them out)
        info = conn.execute(
            'SELECT name, type, "notnull", pk FROM pragma_table_xinfo(?)', (table,)
        ).fetchall()
        columns = tuple(
            Column(name, sqlite_kind(declared or ""), not notnull) for name, declared, notnull, _ in info
        )
        key = tuple(name for name, *_, pk in sorted(info, key=lambda r: r[3]) if pk)
        if not key:
            key = self._unique_key(conn, table, {c.name for c in columns if not c.nullable})
        return TableInfo(db, table, columns, key)

    @staticmethod
    def _unique_key(conn: sqlite3.Connection, table: str, not_null: set[str]) -> tuple[str, ...]:
        indexes = conn.execute('SELECT name, "unique" FROM pragma_index_list(?) ORDER BY seq DESC', (table,))
        for name, unique in indexes.fetchall():
            if unique:
                names = [r[0] for r in conn.execute("SELECT name FROM pragma_index_info(?)", (name,))]
                if names and all(n in not_null for n in names):
                    return tuple(names)
        return ()

    def rows(
        self, db: str, table: str, columns: Sequence[str], where: KeyRange | None = None
    ) -> Iterator[tuple[object, ...]]:
        names = ", ".join(quote_identifier(c, '"') for c in columns)
        condition, params = range_condition(where, '"', "?")
        ref = quote_identifier(table, '"')
        query = f"SELECT {names} FROM {ref}{condition}"  # noqa: S608 - quoted names, placeholders
        try:
            cursor = self._conn(db).execute(query, params)
            while batch := cursor.fetchmany(FETCH):
                yield from batch
        except sqlite3.Error as exc:
            raise self._failed(exc, f"reading {db}.{table}") from exc

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
