"""Lost commits: deciding Prewrites whose Commit binlog never arrived.

A producer writes the Prewrite binlog, commits upstream, then writes the
Commit binlog. If it dies in between, the pump holds a Prewrite nobody will
pair, and that Prewrite holds the pump's watermark back. After
``max-txn-timeout`` the :class:`LostCommitSweeper` asks a
:class:`LostCommitResolver` what happened upstream:

- committed (the resolver returns its commit_ts): the pump writes the Commit
  itself;
- not committed (None): the Prewrite is discarded;
- either way, a Commit of that start_ts arriving later is refused, never
  acknowledged (:mod:`pump.storage.late_commits`);
- the resolver failed: nothing is decided; the Prewrite stays pending and is
  asked about again on the next sweep. An error never discards anything.

:class:`MySQLStatusResolver` asks the upstream database's status table
``bridge_txn_status(start_ts BIGINT PRIMARY KEY, commit_ts BIGINT NOT NULL)``,
which the transactional writer fills inside each upstream transaction, so a
row exists exactly when the transaction committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import pymysql
import pymysql.err

from bridge import mysql
from bridge.dsn import Dsn, parse_dsn, parse_mysql_dsn
from bridge.errors import ConfigError
from bridge.retry import Backoff
from pump import metrics
from pump.config import ResolverConfig
from pump.resolver_base import LostCommitResolver, ResolverError, ResolverUnavailable, StatusTableMissing
from pump.resolver_sqlite import SQLiteStatusResolver

log = logging.getLogger(__name__)

DEFAULT_TABLE = "bridge_txn_status"

_NO_SUCH_TABLE = 1146
_ERROR_LOG_EVERY = 30.0  # seconds between repeats of the same resolver error in the log
_NO_SUCH_DATABASE = 1049


class NoStatusResolver:
    """``type = "none"``: nobody to ask, so every lost commit is treated as not committed."""

    name = 'resolver "none" (upstream not asked)'

    async def resolve(self, start_ts: int) -> int | None:
        return None

    async def close(self) -> None:
        return None


class MySQLStatusResolver:
    """Looks ``start_ts`` up in the upstream's status table over one pymysql connection.

    The blocking driver runs on one dedicated thread, so calls are serialized
    and the connection is only ever used by that thread. A lost connection is
    reopened on the next attempt; retriable errors are retried with backoff up
    to ``attempts`` times per call, then :class:`ResolverUnavailable` is raised.
    """

    def __init__(
        self,
        dsn: Dsn | str,
        password: str | None = None,
        table: str = DEFAULT_TABLE,
        timeout: float = 5.0,
        attempts: int = 4,
    ) -> None:
        self.dsn = parse_mysql_dsn(dsn, key="resolver.dsn") if isinstance(dsn, str) else dsn
        if not self.dsn.database:
            raise ConfigError(f"resolver.dsn: name the upstream database that holds {table} ({self.dsn})")
        self._password = self.dsn.password or password or ""
        self._table = table
        self._timeout = timeout
        self._attempts = max(1, attempts)
        self._conn: Any = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="resolver-mysql")
        self.name = f'resolver "mysql" ({self.dsn})'  # the Dsn prints without its password

    async def resolve(self, start_ts: int) -> int | None:
        backoff = Backoff(initial=0.1, cap=2.0)
        attempt = 1
        while True:
            try:
                return await asyncio.get_running_loop().run_in_executor(
                    self._executor, self._lookup, start_ts
                )
            except ResolverUnavailable as exc:
                if attempt >= self._attempts:
                    raise
                delay = backoff.next_delay()
                log.info(
                    "resolver: %s (attempt %d of %d); retrying in %.1fs", exc, attempt, self._attempts, delay
                )
                await asyncio.sleep(delay)
            attempt += 1

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, self._disconnect)
        self._executor.shutdown(wait=True)

    def _connect(self) -> Any:
        timeouts = mysql.MySQLTimeouts(self._timeout, self._timeout, self._timeout)
        return mysql.connect(self.dsn, timeouts, password=self._password, autocommit=True)

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except pymysql.err.Error:
                log.debug("resolver: closing a broken connection failed", exc_info=True)

    def _lookup(self, start_ts: int) -> int | None:
        """On the resolver thread: one parameterized SELECT; errors translated here."""
        try:
            if self._conn is None:
                self._conn = self._connect()
            with self._conn.cursor() as cursor:
                # The table name is validated config (a plain identifier), never input.
                cursor.execute(
                    f"SELECT commit_ts FROM {mysql.quote_identifier(self._table)} WHERE start_ts = %s",  # noqa: S608
                    (start_ts,),
                )
                row = cursor.fetchone()
        except pymysql.err.Error as exc:
            raise self._translate(exc) from exc
        return None if row is None else int(row[0])

    def _translate(self, exc: pymysql.err.Error) -> ResolverError:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
        if code == _NO_SUCH_TABLE:
            return StatusTableMissing(
                f"status table `{self.dsn.database}`.`{self._table}` does not exist in the upstream "
                f"{self.dsn}: create it as ({self._table}(start_ts BIGINT PRIMARY KEY, "
                "commit_ts BIGINT NOT NULL)) or point resolver.dsn at the right database"
            )
        if code == _NO_SUCH_DATABASE:
            return StatusTableMissing(
                f"database `{self.dsn.database}` does not exist in the upstream {self.dsn}"
            )
        self._disconnect()
        if mysql.is_retriable(exc):
            return ResolverUnavailable(f"upstream {self.dsn} unreachable: {exc}")
        return ResolverError(f"status lookup in {self.dsn} failed: {exc}")


class UnpairedPrewrites(Protocol):
    """What the sweeper needs from storage."""

    def unpaired_older_than(self, age: float) -> Sequence[int]:
        """start_ts of every Prewrite unpaired for at least ``age`` seconds, oldest first."""
        ...

    async def resolve(self, start_ts: int, commit_ts: int | None, by: str) -> None:
        """Pair the Prewrite with a Commit at ``commit_ts`` (durably), or discard it when None;
        ``by`` names the resolver (a later Commit of ``start_ts`` is refused naming it)."""
        ...


@dataclass
class SweepResult:
    found: int = 0
    discarded: int = 0
    pending: int = 0


class LostCommitSweeper:
    """Every ``interval`` seconds, resolves Prewrites unpaired for ``max_txn_timeout`` seconds."""

    def __init__(
        self,
        storage: UnpairedPrewrites,
        resolver: LostCommitResolver,
        max_txn_timeout: float,
        interval: float,
    ) -> None:
        self._storage = storage
        self._resolver = resolver
        self._max_txn_timeout = max_txn_timeout
        self._interval = interval
        self._last_error_log = 0.0
        self._last_error = ""

    async def run(self) -> None:
        """Sweep until cancelled. A failed sweep is logged and retried next interval."""
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.sweep_once()
            except Exception:
                # The sweeper must outlive one bad sweep: whatever storage raised,
                # nothing was decided for the Prewrites left, so they are asked again.
                metrics.ERRORS.labels("lost_commit").inc()
                log.exception("lost commits: a sweep failed; retrying next interval")

    async def sweep_once(self) -> SweepResult:
        """Resolve what is old enough now. Stops at the first resolver error, leaving the rest pending."""
        result = SweepResult()
        candidates = list(self._storage.unpaired_older_than(self._max_txn_timeout))
        for index, start_ts in enumerate(candidates):
            try:
                commit_ts = await self._resolver.resolve(start_ts)
                if commit_ts is not None and commit_ts <= start_ts:
                    raise ResolverError(
                        f"status row for start_ts {start_ts} has commit_ts {commit_ts} <= start_ts"
                    )
            except ResolverError as exc:
                result.pending = len(candidates) - index
                self._log_resolver_error(exc, result.pending)
                break
            await self._storage.resolve(start_ts, commit_ts, by=self._resolver.name)
            if commit_ts is None:
                result.discarded += 1
                metrics.LOST_COMMITS.labels("discarded").inc()
                log.warning("lost commit: start_ts %d never committed upstream; Prewrite discarded", start_ts)
            else:
                result.found += 1
                metrics.LOST_COMMITS.labels("found").inc()
                log.info(
                    "lost commit: start_ts %d committed upstream at %d; Commit written", start_ts, commit_ts
                )
        return result

    def _log_resolver_error(self, exc: ResolverError, pending: int) -> None:
        metrics.ERRORS.labels("resolver").inc()
        now = time.monotonic()
        message = str(exc)
        if message != self._last_error or now - self._last_error_log >= _ERROR_LOG_EVERY:
            self._last_error, self._last_error_log = message, now
            level = logging.WARNING if exc.retriable else logging.ERROR
            log.log(level, "lost commits: %d Prewrites stay pending: %s", pending, message)


def build_resolver(config: ResolverConfig) -> LostCommitResolver:
    """The resolver ``[resolver]`` asks for. The password never reaches a log line."""
    if config.type == "none":
        log.warning(
            "resolver.type = none: a Prewrite unpaired for max-txn-timeout is discarded "
            "without asking upstream"
        )
        return NoStatusResolver()
    if config.type == "sqlite":
        path = parse_dsn(config.dsn).path
        log.info("resolver: status table %s in SQLite file %s", config.table, path)
        return SQLiteStatusResolver(path, config.table)
    dsn = parse_dsn(config.dsn, key="resolver.dsn")
    log.info("resolver: status table %s in %s", config.table, dsn)
    return MySQLStatusResolver(
        dsn, password=config.effective_password(), table=config.table, timeout=config.timeout
    )
