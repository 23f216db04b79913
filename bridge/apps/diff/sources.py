"""The two sides of a diff: tables, columns, keys and rows of a SQLite or MySQL database.

A :class:`Source` is opened from a DSN (:func:`open_source`):

- ``sqlite:///path/file.db``: one SQLite file, database ``main`` (what a
  SQLite upstream names it);
- ``sqlite:///path/dir``: a directory laid out like the sqlite sink's, each
  ``<name>.db`` file one database (``_bridge.sqlite`` is the sink's own);
- ``mysql://user@host:port/db``: that database; without ``/db`` every
  database except the server's own (``mysql``, ``sys``,
  ``information_schema``, ``performance_schema``).

Bridge-internal tables are never compared (:data:`INTERNAL_TABLES`, any name
starting with ``_bridge`` or ``sqlite_``). Sources only read: SQLite files
are opened read-only; MySQL sessions use UTC for TIMESTAMP and stream rows
with an unbuffered cursor.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bridge.errors import UserError
from bridge.producer.dsn import parse_dsn

INTERNAL_TABLES = frozenset(("bridge_txn_status", "bridge_schema", "bridge_checkpoint"))
SYSTEM_DATABASES = frozenset(("mysql", "sys", "information_schema", "performance_schema"))
SINK_MAIN_FILE = "_bridge.sqlite"
FETCH = 2000


def is_internal(table: str) -> bool:
    lowered = table.lower()
    return lowered in INTERNAL_TABLES or lowered.startswith(("_bridge", "sqlite_"))


@dataclass(frozen=True)
class Column:
    name: str
    kind: str
    nullable: bool


@dataclass(frozen=True)
class TableInfo:
    db: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]  # primary key, else a unique key over NOT NULL columns, else ()


@dataclass(frozen=True)
class KeyRange:
    """``low <= key < high`` over ``columns`` (either bound may be absent); integer keys only."""

    columns: tuple[str, ...]
    low: tuple[object, ...] | None
    high: tuple[object, ...] | None


class Source(Protocol):
    label: str

    def tables(self) -> list[tuple[str, str]]: ...

    def table_info(self, db: str, table: str) -> TableInfo: ...

    def rows(
        self, db: str, table: str, columns: Sequence[str], where: KeyRange | None = None
    ) -> Iterator[tuple[object, ...]]: ...

    def close(self) -> None: ...


class DiffSourceError(UserError):
    """A side of the diff cannot be read."""


def range_condition(where: KeyRange | None, quote_char: str, placeholder: str) -> tuple[str, list[object]]:
    """`` WHERE (k1, k2) >= (?, ?) AND (k1, k2) < (?, ?)`` for ``where`` (empty when None)."""
    if where is None:
        return "", []
    names = ", ".join(quote_identifier(c, quote_char) for c in where.columns)
    marks = ", ".join([placeholder] * len(where.columns))
    parts, params = [], []
    if where.low is not None:
        parts.append(f"({names}) >= ({marks})")
        params += list(where.low)
    if where.high is not None:
        parts.append(f"({names}) < ({marks})")
        params += list(where.high)
    return (" WHERE " + " AND ".join(parts)) if parts else "", params


def quote_identifier(name: str, char: str) -> str:
    return char + name.replace(char, char * 2) + char


def open_source(dsn_text: str, key: str) -> Source:
    """The source a DSN names; ``key`` (``--upstream``) names it in errors."""
    dsn = parse_dsn(dsn_text, key=key)
    if dsn.is_sqlite:
        from bridge.apps.diff.sqlite_source import SQLiteSource

        return SQLiteSource(Path(dsn.path))
    from bridge.apps.diff.mysql_source import MySQLSource

    return MySQLSource(dsn.with_password_from_env())
