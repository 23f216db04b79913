"""The lost-commit resolver for a SQLite upstream (``[resolver] type = "sqlite"``).

The transactional writer keeps ``bridge_txn_status(start_ts, commit_ts)`` in
the upstream file itself, written inside each transaction, so a row there
means the transaction committed. The file is opened read-only on a thread of
its own; a busy database is retried, never taken as "not committed".
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bridge.dsn import connect_sqlite
from bridge.retry import Backoff
from pump.resolver_base import ResolverError, ResolverUnavailable, StatusTableMissing

log = logging.getLogger(__name__)

BUSY_TIMEOUT = 5.0


class SQLiteStatusResolver:
    """Looks ``start_ts`` up in the status table of the SQLite file at ``path``."""

    def __init__(self, path: str | Path, table: str, attempts: int = 4) -> None:
        self.path = Path(path)
        self._table = table
        self._attempts = max(1, attempts)
        self._conn: sqlite3.Connection | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="resolver-sqlite")
        self.name = f'resolver "sqlite" ({self.path})'

    async def resolve(self, start_ts: int) -> int | None:
        loop = asyncio.get_running_loop()
        backoff = Backoff(initial=0.2, cap=0.2 * 2 ** (self._attempts - 1))
        for attempt in range(1, self._attempts + 1):
            try:
                return await loop.run_in_executor(self._executor, self._lookup, start_ts)
            except ResolverUnavailable as exc:
                if attempt == self._attempts:
                    raise
                log.info("resolver: %s (attempt %d of %d); retrying", exc, attempt, self._attempts)
                await backoff.sleep()
        raise AssertionError("unreachable")  # the loop returns or raises

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._disconnect)
        self._executor.shutdown(wait=True)

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _lookup(self, start_ts: int) -> int | None:
        """On the resolver thread: one parameterized SELECT; errors translated here."""
        try:
            if self._conn is None:
                if not self.path.exists():
                    raise ResolverUnavailable(f"upstream SQLite file {self.path} does not exist")
                self._conn = connect_sqlite(self.path, read_only=True, timeout=BUSY_TIMEOUT)
            # The table name is validated config (a plain identifier), never input.
            row = self._conn.execute(
                f'SELECT commit_ts FROM "{self._table}" WHERE start_ts = ?',  # noqa: S608
                (start_ts,),
            ).fetchone()
        except sqlite3.Error as exc:
            raise self._translate(exc) from exc
        return None if row is None else int(row[0])

    def _translate(self, exc: sqlite3.Error) -> ResolverError:
        message = str(exc)
        if "no such table" in message:
            return StatusTableMissing(
                f"status table {self._table} does not exist in the upstream {self.path}: the "
                "transactional writer creates it; point resolver.dsn at the upstream file"
            )
        self._disconnect()
        if isinstance(exc, sqlite3.OperationalError):  # locked, busy, unreadable for now
            return ResolverUnavailable(f"upstream {self.path} unavailable: {message}")
        return ResolverError(f"status lookup in {self.path} failed: {message}")
