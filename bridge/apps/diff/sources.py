"""What both sides of a diff are: the :class:`Source` protocol, table descriptions, key ranges.

The implementations (:mod:`~bridge.apps.diff.sqlite_source`,
:mod:`~bridge.apps.diff.mysql_source`) import this module; the factory that
picks one for a DSN is :mod:`bridge.apps.diff.open`.

Bridge-internal tables are never compared (:data:`INTERNAL_TABLES`, any name
starting with ``_bridge`` or ``sqlite_``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from bridge.errors import Unreachable, UserError

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


class DiffSourceUnreachable(DiffSourceError, Unreachable):
    """A side of the diff did not answer (connection refused, timed out)."""


class NothingToCompareError(UserError):
    """The diff would compare nothing that was asked for: a ``tables`` entry matching no
    table on either side, or no table at all. Saying "equal" then would be a lie."""


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
