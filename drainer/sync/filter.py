"""Which databases and tables the drainer replicates, and which transactions it skips.

Rules (the ``[filter]`` table of the drainer's config; names compare
case-insensitively, as MySQL does on most systems):

- ``do-db``: database names. ``do-table``: ``"db.table"`` names. When
  either is set, a table is replicated only if its database is in
  ``do-db`` or the table is in ``do-table``; when neither is set, every
  table is.
- ``ignore-db`` / ``ignore-table``: never replicated, whatever ``do-*`` says.
- An entry starting with ``~`` is a regular expression (Python syntax,
  searched, so anchor it with ``^``/``$``): in ``do-db``/``ignore-db`` it is
  matched against the database name, in ``do-table``/``ignore-table``
  against ``db.table``. ``"~^shop_\\d+$"``; ``"~^shop\\.order_"``.
- ``ignore-txn-commit-ts``: commit timestamps of transactions (DML or DDL)
  an operator decided to skip, e.g. one the schema tracker cannot apply.
  Each is logged when it is skipped; a skipped DDL is not applied to the
  tracked schema either.

A filtered table's DDL is still applied to the tracked schema (so a later
``do-table`` change or a rename finds it) but not handed to the sink.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bridge.errors import ConfigError
from bridge.proto import row_pb2

SchemaChange = row_pb2.SchemaChange


@dataclass(frozen=True)
class Pattern:
    """One filter entry: an exact name (lower-cased) or a ``~`` regular expression."""

    text: str
    regex: re.Pattern[str] | None

    @classmethod
    def parse(cls, entry: str, key: str, qualified: bool) -> Pattern:
        if entry.startswith("~"):
            try:
                return cls(entry, re.compile(entry[1:], re.IGNORECASE))
            except re.error as exc:
                raise ConfigError(f"{key}: invalid regular expression {entry[1:]!r}: {exc}") from None
        if not entry or (qualified and entry.count(".") != 1) or (not qualified and "." in entry):
            shape = '"db.table"' if qualified else "a database name"
            raise ConfigError(f"{key}: expected {shape} or a ~regex, got {entry!r}")
        return cls(entry.lower(), None)

    def matches(self, name: str) -> bool:
        if self.regex is not None:
            return self.regex.search(name) is not None
        return self.text == name.lower()

    def database(self) -> str | None:
        """The database an exact ``db.table`` entry names (None for a regex)."""
        return None if self.regex is not None else self.text.split(".", 1)[0]


def _patterns(entries: Iterable[str], key: str, qualified: bool) -> tuple[Pattern, ...]:
    return tuple(Pattern.parse(entry, key, qualified) for entry in entries)


class TableFilter:
    """Decides per table (and per DDL) whether the sink sees it; see the module docstring."""

    def __init__(
        self,
        do_db: Sequence[str] = (),
        do_table: Sequence[str] = (),
        ignore_db: Sequence[str] = (),
        ignore_table: Sequence[str] = (),
    ) -> None:
        self._do_db = _patterns(do_db, "filter.do-db", qualified=False)
        self._do_table = _patterns(do_table, "filter.do-table", qualified=True)
        self._ignore_db = _patterns(ignore_db, "filter.ignore-db", qualified=False)
        self._ignore_table = _patterns(ignore_table, "filter.ignore-table", qualified=True)
        self._cache: dict[tuple[str, str], bool] = {}

    @property
    def replicates_everything(self) -> bool:
        return not (self._do_db or self._do_table or self._ignore_db or self._ignore_table)

    def allows(self, db: str, table: str) -> bool:
        """Whether changes to ``db.table`` reach the sink."""
        key = (db, table)
        allowed = self._cache.get(key)
        if allowed is None:
            allowed = self._decide(db, table)
            if len(self._cache) < 100_000:
                self._cache[key] = allowed
        return allowed

    def _decide(self, db: str, table: str) -> bool:
        qualified = f"{db}.{table}"
        if any(p.matches(db) for p in self._ignore_db):
            return False
        if any(p.matches(qualified) for p in self._ignore_table):
            return False
        if not (self._do_db or self._do_table):
            return True
        return any(p.matches(db) for p in self._do_db) or any(p.matches(qualified) for p in self._do_table)

    def allows_db(self, db: str) -> bool:
        """Whether a database-level DDL (CREATE/DROP DATABASE) of ``db`` reaches the sink:
        unless ignored, when some rule may replicate a table of it."""
        if any(p.matches(db) for p in self._ignore_db):
            return False
        if not (self._do_db or self._do_table):
            return True
        if any(p.matches(db) for p in self._do_db):
            return True
        return any(p.database() in (None, db.lower()) for p in self._do_table)

    def allows_change(self, change: row_pb2.SchemaChange) -> bool:
        """Whether a DDL reaches the sink; a rename is judged by the table's new name."""
        if change.kind in (SchemaChange.CREATE_DATABASE, SchemaChange.DROP_DATABASE):
            return self.allows_db(change.db)
        return self.allows(change.db, change.table)
