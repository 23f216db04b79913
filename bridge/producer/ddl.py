"""DDL through the writer: run it upstream and emit its DDL binlog with the resulting schema.

The flow, for one statement (:class:`DdlRunner.run`):

1. recognise it (:func:`bridge.producer.ddlparse.parse_ddl`) and open the
   *bookkeeping* transaction: lock the table's ``bridge_schema`` row
   exclusively (every DML on the table waits from here on);
2. take start_ts (a CREATE claims it as the new table's id, unique across the
   cluster's producers); on MySQL fix the session time (``SET timestamp``), so
   ``CURRENT_TIMESTAMP``/``NOW()`` in defaults and expressions give the rows that
   exist one known instant, recorded as the schema's ``session_time_us`` for
   sinks to set the same; execute the statement; describe the table it left and give
   it ids (:func:`bridge.producer.catalog.assign_ids`: columns keep theirs,
   new ones take fresh ones);
3. write the DDL Prewrite (``ddl_job_id`` = start_ts, ``ddl_schema_change``
   = a ``SchemaChange`` with the resulting ``TableSchema``, unset for a drop);
4. take commit_ts; save the schema (version = commit_ts) and the
   ``bridge_txn_status`` row in the bookkeeping transaction; COMMIT it —
   only now may DML on the table go on, and its commit_ts is above ours;
5. write the Commit binlog.

On SQLite the statement runs inside the bookkeeping transaction, so any
failure rolls the DDL back too (a Rollback binlog follows a written
Prewrite). A DEFAULT or generated expression no downstream can reproduce
(``RAND()``, ``UUID()``...) is refused before anything runs
(:func:`bridge.producer.ddlparse.refuse_nondeterministic`). MySQL commits a
DDL implicitly, so it runs on a second connection and cannot be undone: if
its Prewrite cannot be written the writer raises :class:`DdlNotLogged`, and DML on the table then stops with
:class:`SchemaDrift` until an operator reconciles upstream and downstream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from bridge import binlog
from bridge.errors import BridgeError
from bridge.producer.catalog import Catalog, assign_ids
from bridge.producer.ddlparse import DdlStatement, Kind, parse_ddl, refuse_nondeterministic
from bridge.producer.errors import (
    CommitFailed,
    DdlNotLogged,
    PrewriteFailed,
    UnknownTable,
    UnsupportedSchema,
    UpstreamError,
)
from bridge.producer.status import record_commit
from bridge.producer.txnlog import BinlogSink, prewrite_key, send_second_phase
from bridge.producer.upstream import MYSQL, Session, SessionPool, Upstream
from bridge.proto import row_pb2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DdlResult:
    """A DDL that committed: its timestamps and the SchemaChange its binlog carried."""

    start_ts: int
    commit_ts: int
    change: row_pb2.SchemaChange


@dataclass
class _Plan:
    statement: DdlStatement
    sql: str
    table_id: int
    previous: row_pb2.TableSchema | None
    start_ts: int = 0
    session_time_us: int = 0  # the upstream session time the DDL ran with (MySQL); 0 = not fixed


class DdlRunner:
    """Runs DDL statements for a :class:`~bridge.producer.writer.TxnWriter`; thread-safe."""

    def __init__(
        self,
        upstream: Upstream,
        catalog: Catalog,
        pumps: BinlogSink,
        pool: SessionPool,
        timestamp: Callable[[], int],
    ) -> None:
        self._upstream = upstream
        self._catalog = catalog
        self._pumps = pumps
        self._pool = pool
        self._timestamp = timestamp

    def run(self, sql: str) -> DdlResult | None:
        """Execute one DDL and emit its binlogs; None when IF [NOT] EXISTS made it a no-op."""
        statement = parse_ddl(sql, self._upstream.database)
        if statement.kind in (Kind.CREATE_TABLE, Kind.ALTER_TABLE, Kind.RENAME_TABLE):
            refuse_nondeterministic(sql)
        with self._pool.session() as book:
            if self._upstream.transactional_ddl:
                return self._run(statement, sql, book, book)
            with self._pool.session() as executor:
                return self._run(statement, sql, book, executor)

    def _run(self, statement: DdlStatement, sql: str, book: Session, executor: Session) -> DdlResult | None:
        book.begin()
        try:
            plan = self._plan(statement, sql, book)
            if plan is None:
                book.rollback()
                return None
            plan.start_ts = self._timestamp()
            if plan.statement.kind == Kind.CREATE_TABLE:
                plan.table_id = plan.start_ts
                self._catalog.reserve_id(book, plan.statement.table, plan.table_id)
            self._execute(plan, executor)
            change = self._described(plan, executor)
            self._prewrite(plan, change, book)
            commit_ts = self._finish(plan, change, book)
        except BaseException:
            book.rollback()
            raise
        send_second_phase(self._pumps, binlog.commit(plan.start_ts, commit_ts))
        log.info("DDL committed at %d: %s", commit_ts, " ".join(sql.split())[:200])
        return DdlResult(plan.start_ts, commit_ts, change)

    def _execute(self, plan: _Plan, executor: Session) -> None:
        """Run the statement; on MySQL at a fixed session time, put back to the clock afterwards."""
        if self._upstream.dialect is not MYSQL:
            executor.execute(plan.sql)
            return
        plan.session_time_us = time.time_ns() // 1000
        seconds, micros = divmod(plan.session_time_us, 1_000_000)
        executor.execute(f"SET timestamp = {seconds}.{micros:06d}")
        try:
            executor.execute(plan.sql)
        finally:
            try:
                executor.execute("SET timestamp = DEFAULT")
            except UpstreamError as exc:  # a broken session is not reused; the DDL's own error matters
                log.warning("resetting the session time after a DDL failed: %s", exc)

    def _plan(self, statement: DdlStatement, sql: str, book: Session) -> _Plan | None:
        """Lock the table (or reserve an id); None when the statement is a no-op."""
        if statement.index:
            table = self._upstream.table_for_index(book, statement.index)
            if table is None:
                raise UpstreamError(f"DDL {sql!r}: no index named {statement.index!r}")
            statement = DdlStatement(statement.kind, table, if_exists=statement.if_exists)
        locked = self._catalog.lock_for_ddl(book, statement.target)
        exists = locked is not None or self._upstream.describe_table(book, statement.target) is not None
        if statement.if_exists and exists == (statement.kind == Kind.CREATE_TABLE):
            return None  # CREATE IF NOT EXISTS of an existing table, DROP IF EXISTS of a missing one
        if statement.kind == Kind.CREATE_TABLE:
            return _Plan(statement, sql, 0, None)  # its table id is its start_ts
        if locked is None:
            raise UnknownTable(
                f"DDL on {self._upstream.database}.{statement.target}, which has no schema in bridge_schema: "
                "the writer carries DDL only for tables it created"
            )
        return _Plan(statement, sql, locked[0], locked[1])

    def _described(self, plan: _Plan, executor: Session) -> row_pb2.SchemaChange:
        try:
            return self._schema_change(plan, executor)
        except UnsupportedSchema as exc:
            if self._upstream.transactional_ddl:
                raise  # rolled back with the bookkeeping transaction
            raise UnsupportedSchema(
                f"{exc}; the statement took effect upstream, but no binlog was written and the writer "
                "refuses DML on the table"
            ) from exc

    def _schema_change(self, plan: _Plan, executor: Session) -> row_pb2.SchemaChange:
        statement = plan.statement
        change = row_pb2.SchemaChange(kind=statement.kind, db=self._upstream.database, table=statement.table)
        if statement.kind == Kind.RENAME_TABLE:
            change.old_db, change.old_table = self._upstream.database, statement.old_table
        if statement.kind == Kind.DROP_TABLE:
            return change
        live = self._upstream.describe_table(executor, statement.table)
        if live is None:
            raise UpstreamError(f"table {statement.table!r} is missing after {plan.sql!r}")
        change.table = live.table  # the name as the database spells it
        change.table_schema.CopyFrom(assign_ids(live, plan.previous, plan.table_id, statement.renames))
        change.table_schema.session_time_us = plan.session_time_us
        return change

    def _prewrite(self, plan: _Plan, change: row_pb2.SchemaChange, book: Session) -> None:
        key = prewrite_key(self._upstream.database, plan.start_ts)
        prewrite = binlog.ddl_prewrite(plan.start_ts, plan.sql, plan.start_ts, change, key)
        try:
            self._pumps.write_binlog(prewrite)
        except BaseException as exc:
            self._catalog.forget(plan.statement.target)
            if self._upstream.transactional_ddl:
                raise PrewriteFailed(f"DDL {plan.sql!r} rolled back: its Prewrite failed: {exc}") from exc
            raise DdlNotLogged(
                f"DDL {plan.sql!r} took effect upstream but its binlog could not be written ({exc}); "
                f"consumers will not see it, and DML on {change.table!r} stops until it is reconciled"
            ) from exc

    def _finish(self, plan: _Plan, change: row_pb2.SchemaChange, book: Session) -> int:
        """Take commit_ts and commit the bookkeeping (schema and status row)."""
        commit_ts = 0
        try:
            commit_ts = self._timestamp()
            schema = change.table_schema if change.HasField("table_schema") else plan.previous
            assert schema is not None
            self._catalog.save(book, schema, commit_ts, live=plan.statement.kind != Kind.DROP_TABLE)
            record_commit(book, plan.start_ts, commit_ts)
            book.commit()
        except BaseException as exc:
            book.rollback()
            self._catalog.forget(plan.statement.target)
            raise self._bookkeeping_failed(plan, commit_ts, exc) from exc
        self._catalog.forget(plan.statement.target)
        return commit_ts

    def _bookkeeping_failed(self, plan: _Plan, commit_ts: int, exc: BaseException) -> BridgeError:
        """Send what the outcome calls for; the error to raise."""
        if self._upstream.transactional_ddl:  # the DDL rolled back with the bookkeeping
            send_second_phase(self._pumps, binlog.rollback(plan.start_ts))
            return CommitFailed(f"DDL {plan.sql!r} rolled back at commit: {exc}")
        if not commit_ts:
            return DdlNotLogged(
                f"DDL {plan.sql!r} took effect upstream but no commit_ts could be taken ({exc}); "
                "its Prewrite will be dropped, so consumers will not see it"
            )
        # The DDL stands upstream, so its binlog must commit; only bridge_schema is stale.
        send_second_phase(self._pumps, binlog.commit(plan.start_ts, commit_ts))
        return UpstreamError(
            f"DDL {plan.sql!r} committed at {commit_ts}, but saving its schema in bridge_schema failed "
            f"({exc}); DML on the table stops (SchemaDrift) until bridge_schema is repaired"
        )
