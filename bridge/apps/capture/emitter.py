"""Writing captured transactions to the pumps, two-phase, with the journal around them.

For each transaction (:meth:`Emitter.rows`, :meth:`Emitter.ddl`):

1. start_ts from the TSO; journal ``begin``;
2. the Prewrite binlog — returns once a pump has it durably;
3. commit_ts from the TSO; journal ``commit`` with the position after the
   upstream transaction (and the schemas a DDL changed);
4. the Commit binlog.

Transactions go one after the other, in the upstream's commit order, so
their commit_ts follow that order. :meth:`Emitter.settle` finishes the
second phase a crash interrupted (see :mod:`bridge.apps.capture.journal`).
A Commit that cannot be delivered is retried until it is: the upstream
transaction did commit, and no later transaction may overtake it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from bridge import binlog
from bridge.apps.capture import metrics
from bridge.apps.capture.journal import Journal
from bridge.apps.capture.position import Position
from bridge.errors import PumpError
from bridge.producer.txnlog import BinlogSink
from bridge.proto import binlog_pb2, row_pb2

log = logging.getLogger(__name__)

COMMIT_RETRY_SECONDS = 1.0


def prewrite_key(server_id: int, start_ts: int) -> bytes:
    """The capture's key for a transaction (no status table upstream: a pump cannot ask)."""
    return f"capture/{server_id}/{start_ts}".encode()


class Emitter:
    def __init__(
        self,
        pumps: BinlogSink,
        journal: Journal,
        server_id: int,
        on_schema: Callable[[dict[str, row_pb2.TableSchema | None]], None],
    ) -> None:
        self._pumps = pumps
        self._journal = journal
        self._server_id = server_id
        self._on_schema = on_schema  # the catalog takes a DDL's schemas once it is journaled
        self.last_commit_ts = 0
        self.transactions = 0  # DML transactions written, snapshot chunks included (as in /metrics)

    def rows(
        self,
        mutations: list[binlog_pb2.TableMutation],
        position: Position,
        tables: dict[str, row_pb2.TableSchema | None] | None = None,
    ) -> int:
        """Write one DML transaction; its commit_ts."""
        start_ts = self._begin()
        self._write(binlog.prewrite(start_ts, mutations, prewrite_key(self._server_id, start_ts)), "prewrite")
        commit_ts = self._finish(start_ts, position, tables or {})
        metrics.TRANSACTIONS.inc()
        self.transactions += 1
        return commit_ts

    def ddl(
        self,
        sql: str,
        change_for: Callable[[int], tuple[row_pb2.SchemaChange, dict[str, row_pb2.TableSchema | None]]],
        position: Position,
    ) -> int:
        """Write one DDL transaction; ``change_for(start_ts)`` gives its SchemaChange and catalog update."""
        start_ts = self._begin()
        change, updates = change_for(start_ts)
        key = prewrite_key(self._server_id, start_ts)
        self._write(binlog.ddl_prewrite(start_ts, sql, start_ts, change, key), "ddl")
        commit_ts = self._finish(start_ts, position, updates)
        metrics.DDL.inc()
        return commit_ts

    def _begin(self) -> int:
        start_ts = self._pumps.get_timestamps(1)
        self._journal.begin(start_ts)
        return start_ts

    def _write(self, message: binlog_pb2.Binlog, kind: str) -> None:
        started = time.perf_counter()
        self._pumps.write_binlog(message)
        metrics.WRITE_SECONDS.labels(kind).observe(time.perf_counter() - started)

    def _finish(
        self, start_ts: int, position: Position, updates: dict[str, row_pb2.TableSchema | None]
    ) -> int:
        commit_ts = self._pumps.get_timestamps(1)
        self._journal.commit(start_ts, commit_ts, position, updates)
        if updates:
            self._on_schema(updates)
        self._commit(start_ts, commit_ts)
        return commit_ts

    def _commit(self, start_ts: int, commit_ts: int) -> None:
        while True:
            try:
                self._write(binlog.commit(start_ts, commit_ts), "commit")
                self.last_commit_ts = commit_ts
                return
            except PumpError as exc:
                metrics.ERRORS.labels("commit").inc()
                log.error("the Commit of start_ts %d was not written (%s); retrying", start_ts, exc)
                time.sleep(COMMIT_RETRY_SECONDS)

    def settle(self) -> None:
        """After a restart: finish the second phase of the last journaled transaction."""
        pending = self._journal.state.pending
        if pending is None:
            return
        if pending.commit_ts:
            log.info(
                "sending the Commit of start_ts %d again (the capture stopped around it)", pending.start_ts
            )
            self._commit(pending.start_ts, pending.commit_ts)
        else:
            log.info(
                "rolling back start_ts %d, whose Prewrite may not have been acknowledged", pending.start_ts
            )
            try:
                self._write(binlog.rollback(pending.start_ts), "rollback")
            except PumpError as exc:
                log.warning(
                    "the Rollback of start_ts %d was not written (%s); the pump's resolver drops "
                    "its Prewrite, if it has one, after max-txn-timeout",
                    pending.start_ts,
                    exc,
                )
        self._journal.settled()
