"""The transactional writer: run a transaction upstream and emit its binlogs, two-phase.

::

    writer = TxnWriter(open_upstream("sqlite:///data/up.db"), pumps_client)
    writer.ddl("CREATE TABLE test (id INT NOT NULL PRIMARY KEY, name VARCHAR(24))")
    with writer.transaction() as txn:
        txn.insert("test", {"id": 1, "name": "a"})
        txn.update("test", {"id": 1}, {"name": "c"})
        txn.delete("test", {"id": 1})
    txn.commit_ts  # set once committed

A transaction, as in the seeds' database (:meth:`Transaction.commit` runs
steps 3-7 when the ``with`` block ends without an exception):

1. take start_ts from the TSO and BEGIN upstream;
2. each change locks its rows and captures before/after images from the
   database (:mod:`bridge.producer.capture`), appended to its table's
   ``TableMutation`` in order (``sequence``);
3. write the Prewrite binlog — if that fails, roll back upstream and raise
   :class:`PrewriteFailed`;
4. take commit_ts, still holding every row lock;
5. insert (start_ts, commit_ts) into ``bridge_txn_status`` in the same
   transaction;
6. COMMIT upstream;
7. write the Commit binlog.

A failure after the Prewrite and before a successful COMMIT rolls back and
writes a Rollback binlog (:class:`CommitFailed`). If the COMMIT's answer is
lost, the writer asks ``bridge_txn_status`` on a fresh connection (a locking
read, so it waits for the transaction's outcome) and writes the Commit or
Rollback accordingly; if even that fails, :class:`CommitUnknown` is raised and
the pump's lost-commit resolver decides later. An exception inside the
``with`` block rolls back upstream; no binlog was written yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from bridge import binlog
from bridge.errors import BridgeError
from bridge.producer import capture
from bridge.producer.catalog import Catalog, TableEntry
from bridge.producer.ddl import DdlResult, DdlRunner
from bridge.producer.errors import (
    CommitFailed,
    CommitUnknown,
    PrewriteFailed,
    ProducerError,
    UpstreamError,
    UpstreamUnavailable,
)
from bridge.producer.status import committed_ts, purge_before, record_commit
from bridge.producer.timestamps import TimestampBatcher
from bridge.producer.txnlog import BinlogSink, prewrite_key, send_second_phase
from bridge.producer.upstream import Session, SessionPool, Upstream
from bridge.proto import binlog_pb2, row_pb2
from bridge.retry import Backoff

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Table:
    """One table within one transaction: its schema, row locator and collected changes."""

    __slots__ = ("builder", "entry", "locator")

    def __init__(self, session: Session, entry: TableEntry) -> None:
        self.entry = entry
        self.locator = capture.locator_for(session, entry)
        self.builder = binlog.TableMutationBuilder(entry.table_id)


def _batches(rows: Iterable[Mapping[str, object]], size: int) -> Iterator[list[Mapping[str, object]]]:
    """Consecutive rows with the same column names, at most ``size`` per batch."""
    group: list[Mapping[str, object]] = []
    for row in rows:
        if group and (len(group) >= size or row.keys() != group[0].keys()):
            yield group
            group = []
        group.append(row)
    if group:
        yield group


class Transaction:
    """One upstream transaction and its binlogs; see the module docstring.

    Made by :meth:`TxnWriter.transaction`; used by one thread. After any
    failed change the transaction only rolls back.
    """

    def __init__(self, writer: TxnWriter, session: Session, start_ts: int) -> None:
        self._writer = writer
        self._session = session
        self.start_ts = start_ts
        self.commit_ts = 0
        self.rows = 0  # row changes captured so far
        self._tables: dict[str, _Table] = {}
        self._failed: BaseException | None = None

    def insert(self, table: str, values: Mapping[str, object]) -> dict[str, Any]:
        """INSERT one row; returns the row as stored (defaults and auto-increment filled in)."""

        def change(t: _Table) -> dict[str, Any]:
            image = capture.insert_row(self._session, t.locator, t.entry, t.entry.driver_values(values))
            after = t.entry.codec_values(image)
            t.builder.insert(t.entry.codec.encode(after))
            self.rows += 1
            return dict(zip(t.entry.names, after, strict=True))

        return self._change(table, change)

    def insert_many(self, table: str, rows: Iterable[Mapping[str, object]], batch: int = 500) -> int:
        """INSERT many rows; returns how many. Consecutive rows giving the same columns go in one
        multi-row statement of up to ``batch`` rows where the server has INSERT ... RETURNING."""

        def change(t: _Table) -> int:
            count = 0
            for group in _batches(rows, batch):
                driver_rows = [t.entry.driver_values(values) for values in group]
                for image in capture.insert_rows(self._session, t.locator, t.entry, driver_rows):
                    t.builder.insert(t.entry.codec.encode(t.entry.codec_values(image)))
                count += len(group)
            self.rows += count
            return count

        return self._change(table, change)

    def update(self, table: str, where: Mapping[str, object], changes: Mapping[str, object]) -> int:
        """UPDATE the rows whose columns equal ``where`` (NULL matches NULL); rows changed.

        ``changes`` may include key columns: the row moves to its new key.
        A row the update leaves as it was is not recorded.
        """

        def change(t: _Table) -> int:
            entry = t.entry
            pairs = capture.update_rows(t.locator, entry.driver_values(where), entry.driver_values(changes))
            for before, after in pairs:
                t.builder.update(
                    *entry.codec.encode_update(entry.codec_values(before), entry.codec_values(after))
                )
            self.rows += len(pairs)
            return len(pairs)

        return self._change(table, change) if changes else 0

    def delete(self, table: str, where: Mapping[str, object]) -> int:
        """DELETE the rows whose columns equal ``where``; rows deleted."""

        def change(t: _Table) -> int:
            befores = capture.delete_rows(self._session, t.locator, t.entry, t.entry.driver_values(where))
            for before in befores:
                t.builder.delete(t.entry.codec.encode(t.entry.codec_values(before)))
            self.rows += len(befores)
            return len(befores)

        return self._change(table, change)

    def _change(self, table: str, change: Callable[[_Table], T]) -> T:
        if self._failed is not None:
            raise ProducerError(f"transaction {self.start_ts} failed earlier and can only roll back") from (
                self._failed
            )
        try:
            return change(self._use(table))
        except BaseException as exc:
            self._failed = exc
            raise

    def _use(self, table: str) -> _Table:
        used = self._tables.get(table)
        if used is None:
            entry = self._writer.catalog.use(self._session, table)
            used = self._tables[table] = _Table(self._session, entry)
        return used

    def mutations(self) -> list[binlog_pb2.TableMutation]:
        """The collected TableMutations, one per changed table, in first-touched order."""
        return [t.builder.build() for t in self._tables.values() if len(t.builder)]

    def rollback(self) -> None:
        self._session.rollback()

    def commit(self) -> None:
        """Steps 3-7 of the module docstring. A transaction that changed nothing writes no binlog."""
        if self._failed is not None:
            self._session.rollback()
            raise ProducerError(f"transaction {self.start_ts} had a failed change; rolled back") from (
                self._failed
            )
        mutations = self.mutations()
        if not mutations:
            self._session.rollback()
            return
        pumps, database = self._writer.pumps, self._writer.upstream.database
        try:
            pumps.write_binlog(
                binlog.prewrite(self.start_ts, mutations, prewrite_key(database, self.start_ts))
            )
        except BaseException as exc:
            self._session.rollback()
            raise PrewriteFailed(
                f"transaction {self.start_ts} rolled back: its Prewrite failed: {exc}"
            ) from exc
        self.commit_ts = self._commit_upstream()
        send_second_phase(pumps, binlog.commit(self.start_ts, self.commit_ts))

    def _commit_upstream(self) -> int:
        try:
            commit_ts = self._writer.timestamp()
            record_commit(self._session, self.start_ts, commit_ts)
            self._session.commit()
        except UpstreamUnavailable as exc:
            return self._resolve_lost_commit(exc)
        except BaseException as exc:
            self._session.rollback()
            send_second_phase(self._writer.pumps, binlog.rollback(self.start_ts))
            raise CommitFailed(f"transaction {self.start_ts} rolled back at commit: {exc}") from exc
        return commit_ts

    def _resolve_lost_commit(self, exc: UpstreamUnavailable) -> int:
        """The connection broke around COMMIT: ask the status table what happened."""
        try:
            with self._writer.pool.session() as session:
                found = committed_ts(session, self.start_ts)
        except UpstreamError as lookup_exc:
            raise CommitUnknown(
                f"transaction {self.start_ts}: the upstream connection broke during commit ({exc}) and its "
                f"outcome could not be read ({lookup_exc}); the pump's lost-commit resolver will settle it"
            ) from exc
        if found is None:
            send_second_phase(self._writer.pumps, binlog.rollback(self.start_ts))
            raise CommitFailed(f"transaction {self.start_ts} did not commit: {exc}") from exc
        log.warning("transaction %d committed although its connection broke: %s", self.start_ts, exc)
        return found


class TxnWriter:
    """Runs transactions and DDL on one upstream and writes their binlogs through ``pumps``.

    Thread-safe: each transaction takes its own upstream connection from a
    pool. Creates ``bridge_txn_status`` and ``bridge_schema`` upstream when
    missing. ``pumps`` is usually a :class:`bridge.pumpclient.PumpsClient`.
    """

    def __init__(self, upstream: Upstream, pumps: BinlogSink) -> None:
        self.upstream = upstream
        self.pumps = pumps
        self.pool = SessionPool(upstream)
        self.catalog = Catalog(upstream)
        self._timestamps = TimestampBatcher(pumps.get_timestamps)
        self._ddl = DdlRunner(upstream, self.catalog, pumps, self.pool, self.timestamp)
        with self.pool.session() as session:
            for statement in upstream.bookkeeping_ddl():
                session.execute(statement)

    def timestamp(self) -> int:
        """A fresh TSO timestamp; concurrent requests share TSO calls."""
        return self._timestamps.get()

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """A transaction that commits (two-phase) when the block ends, or rolls back on an exception."""
        with self.pool.session() as session:
            start_ts = self.timestamp()
            session.begin()
            txn = Transaction(self, session, start_ts)
            try:
                yield txn
            except BaseException:
                txn.rollback()
                raise
            txn.commit()

    def run(self, body: Callable[[Transaction], T], attempts: int = 3, backoff: float = 0.02) -> T:
        """Run ``body`` in a transaction, again (up to ``attempts`` in all) after a retriable error.

        The pauses are :class:`bridge.retry.Backoff`'s: ``backoff``, doubling,
        at most ``backoff * (attempts - 1)`` (0.02 s then 0.04 s by default).
        """
        pacing = Backoff(backoff, backoff * max(1, attempts - 1))
        for attempt in range(1, attempts + 1):
            try:
                with self.transaction() as txn:
                    return body(txn)
            except BridgeError as exc:
                if not exc.retriable or attempt == attempts:
                    raise
                log.debug("transaction attempt %d failed, retrying: %s", attempt, exc)
                time.sleep(pacing.next_delay())
        raise AssertionError("unreachable")

    def ddl(self, sql: str) -> DdlResult | None:
        """Execute one DDL statement and emit its DDL binlog; see :mod:`bridge.producer.ddl`."""
        return self._ddl.run(sql)

    def read(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Run a read-only query on a pooled connection, outside any transaction; no binlog.

        Placeholders are the upstream's (``writer.upstream.dialect.param``).
        """
        with self.pool.session() as session:
            return session.query(sql, params)

    def schema(self, table: str) -> row_pb2.TableSchema:
        """The schema (with its ids) that the last DDL binlog of ``table`` carried."""
        with self.pool.session() as session:
            return self.catalog.use(session, table).schema

    def tables(self) -> list[str]:
        """The live tables created through the writer, oldest first."""
        with self.pool.session() as session:
            return self.catalog.tables(session)

    def purge_status(self, before_ts: int) -> int:
        """Delete ``bridge_txn_status`` rows of transactions started before ``before_ts``."""
        with self.pool.session() as session:
            return purge_before(session, before_ts)

    def close(self) -> None:
        """Close the pooled connections (the pump client and upstream belong to the caller)."""
        self.pool.close()
