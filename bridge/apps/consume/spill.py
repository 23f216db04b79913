"""Row changes of a large transaction kept on disk while ``consume --apply`` waits to apply them.

:class:`~bridge.apps.consume.ordering.ResolvedBuffer` holds every row change
it reads until the watermarks pass its commit_ts. A transaction of a million
rows would be a million decoded Avro records in memory (several GiB), so once
one commit_ts has ``SPILL_ROWS`` row changes buffered they move to a
:class:`SpillStore`: a private temporary SQLite database on disk (created on
first use, deleted when closed; SQLite keeps only its page cache in memory).
Its primary key is the apply order (commit_ts, position, topic), which also
drops a re-delivered message (same topic, commit_ts, position) as the
in-memory buffer does.

What the buffer releases for such a commit_ts is one :class:`SpilledRows`:
``items()`` reads the rows back in apply order, one page at a time, as often
as asked (a sink's failed flush makes the driver write the transaction
again); ``close()`` deletes them once they are applied.
"""

from __future__ import annotations

import pickle
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field

from bridge.apps.consume.items import RowItem

SPILL_ROWS = 20_000  # row changes of one commit_ts kept in memory before they move to disk
_INSERT_BATCH = 2_000  # rows written to SQLite per executemany
_READ_BATCH = 1_000  # rows fetched per round when reading back


class SpillStore:
    """The on-disk rows of every spilled commit_ts of one buffer (see the module docstring)."""

    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None
        self._pending: list[tuple[int, int, str, bytes]] = []
        self.duplicates = 0  # re-deliveries dropped on insert

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            db = sqlite3.connect("")  # "": a private temporary database on disk, deleted on close
            db.execute("PRAGMA journal_mode = OFF")
            db.execute("PRAGMA synchronous = OFF")
            db.execute(
                "CREATE TABLE rows (commit_ts INTEGER, pos INTEGER, topic TEXT, item BLOB, "
                "PRIMARY KEY (commit_ts, pos, topic)) WITHOUT ROWID"
            )
            self._db = db
        return self._db

    def add(self, item: RowItem) -> None:
        blob = pickle.dumps(item, pickle.HIGHEST_PROTOCOL)
        self._pending.append((item.commit_ts, item.pos, item.where.topic, blob))
        if len(self._pending) >= _INSERT_BATCH:
            self._write()

    def _write(self) -> None:
        pending, self._pending = self._pending, []
        if not pending:
            return
        db = self._conn()
        with db:
            cursor = db.executemany("INSERT OR IGNORE INTO rows VALUES (?, ?, ?, ?)", pending)
            self.duplicates += len(pending) - cursor.rowcount

    def release(self, commit_ts: int) -> SpilledRows:
        """The spilled rows of ``commit_ts`` (every one added so far)."""
        self._write()
        query = "SELECT COUNT(*) FROM rows WHERE commit_ts = ?"
        (count,) = self._conn().execute(query, (commit_ts,)).fetchone()
        return SpilledRows(self, commit_ts, int(count))

    def read(self, commit_ts: int) -> Iterator[RowItem]:
        """The rows of ``commit_ts`` in apply order (position, then topic), a page at a time."""
        db = self._conn()
        after: tuple[int, str] = (-1, "")
        while True:
            page = db.execute(
                "SELECT pos, topic, item FROM rows WHERE commit_ts = ? AND (pos, topic) > (?, ?) "
                "ORDER BY pos, topic LIMIT ?",
                (commit_ts, after[0], after[1], _READ_BATCH),
            ).fetchall()
            if not page:
                return
            for _pos, _topic, blob in page:
                yield pickle.loads(blob)  # noqa: S301 - written by this process above
            after = (page[-1][0], page[-1][1])

    def drop(self, commit_ts: int) -> None:
        if self._db is not None:
            with self._db:
                self._db.execute("DELETE FROM rows WHERE commit_ts = ?", (commit_ts,))

    def close(self) -> None:
        db, self._db = self._db, None
        self._pending = []
        if db is not None:
            db.close()


@dataclass(eq=False)
class SpilledRows:
    """The row changes of one commit_ts, on disk (see the module docstring)."""

    store: SpillStore = field(repr=False)
    commit_ts: int
    count: int

    def items(self) -> Iterator[RowItem]:
        return self.store.read(self.commit_ts)

    def first(self) -> RowItem | None:
        return next(self.items(), None)

    def close(self) -> None:
        self.store.drop(self.commit_ts)
