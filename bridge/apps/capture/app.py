"""``binlog-bridge capture``: the upstream's row binlog -> one binlog per transaction in the pumps.

:meth:`CaptureApp.run`:

1. open the journal (``data-dir``), check the source (:func:`source.check_server`),
   connect to the pumps, finish the second phase a crash interrupted
   (:meth:`Emitter.settle`);
2. choose where to start: the journaled position; or, on a first start (or a
   lost position with ``snapshot = "when-needed"``), the initial snapshot's
   position (:mod:`bridge.apps.capture.snapshot`) — with ``snapshot =
   "never"`` the current end of the binlog, after announcing the existing
   tables;
3. stream: each upstream transaction with changes to captured tables becomes
   one DML binlog, each DDL on one a DDL binlog, in binlog order
   (:mod:`bridge.apps.capture.stream`, :mod:`bridge.apps.capture.emitter`).
   A broken replication connection is opened again from the last position.

:meth:`CaptureApp.stop` (SIGTERM, SIGINT) ends the stream after the
transaction being written; one that is only being read is dropped and read
again at the next start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.apps.capture import metrics, source
from bridge.apps.capture.config import CaptureFile
from bridge.apps.capture.emitter import Emitter
from bridge.apps.capture.errors import PositionLost
from bridge.apps.capture.journal import Journal
from bridge.apps.capture.pipeline import WriteBehind
from bridge.apps.capture.position import Position
from bridge.apps.capture.snapshot import Snapshot, SnapshotStopped
from bridge.apps.capture.status import StatusServer
from bridge.apps.capture.stream import DdlEvent, Idle, RowsTxn, Transactions
from bridge.apps.capture.tables import TableCatalog
from bridge.errors import BridgeError
from bridge.producer.ddlparse import Kind
from bridge.pumpclient import PumpsClient

log = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0
MOVE_EVERY_SECONDS = 10.0  # journal a position moved only by skipped transactions at most this often


class _Stop(Exception):
    """Raised into a blocking binlog read by :meth:`CaptureApp.stop`."""


class CaptureApp:
    def __init__(self, config: CaptureFile) -> None:
        self.config = config
        self.capture = config.capture
        self.state = "starting"
        self.position: Position | None = None
        self.error: str | None = None
        self.lag = 0.0
        self.row_changes = 0
        self._stopping = threading.Event()
        self._reading = False
        self._journal: Journal | None = None
        self._emitter: Emitter | None = None
        self._moved_at = 0.0
        self._moved_to: Position | None = None
        self._writer: WriteBehind  # set while streaming

    # ------------------------------------------------------------ control

    def stop(self) -> None:
        """Stop after the transaction being written (safe to call from a signal handler)."""
        self._stopping.set()
        if self._reading:
            raise _Stop

    def status(self) -> Mapping[str, object]:
        journal = self._journal
        return {
            "state": self.state,
            # the position written (journaled); "read" is where the reader is, maybe ahead
            "position": journal.state.position.to_json() if journal and journal.state.position else None,
            "read_position": self.position.to_json() if self.position else None,
            "lag_seconds": round(self.lag, 3),
            "last_commit_ts": self._emitter.last_commit_ts if self._emitter else 0,
            "transactions": self._emitter.transactions if self._emitter else 0,
            "row_changes": self.row_changes,
            "snapshot": journal.state.snapshot if journal else None,
            "error": self.error,
        }

    # ------------------------------------------------------------ run

    def run(self) -> int:
        """Capture until stopped; 0 after a clean stop. Raises what stopped it otherwise."""
        dsn = self.capture.dsn()
        capture = self.capture
        log.info(
            "config: source %s, meta %s, data-dir %s, databases %s, tables %s, snapshot %s, status-addr %s",
            dsn.redacted(), capture.meta, capture.data_dir, ",".join(capture.databases),
            ",".join(capture.tables) or "(all)", capture.snapshot, capture.status_addr or "none",
        )  # fmt: skip
        status = StatusServer(self.capture.status_addr, self.status) if self.capture.status_addr else None
        if status is not None:
            status.start()
        self._journal = journal = Journal(Path(self.capture.data_dir), fsync=self.capture.fsync)
        conn = source.connect(dsn)
        try:
            source.check_server(conn)
            flavor = source.flavor_of(conn)
            mode = source.choose_mode(conn, flavor, self.capture.position)
            with PumpsClient(self.capture.meta, self.config.pump_client) as pumps:
                catalog = TableCatalog(self.capture, dsn, dict(journal.state.tables), journal.shadow_before)
                undo = journal.state.shadow_undo
                if undo is not None:  # a DDL ran on the shadow, its binlog was not journaled
                    catalog.shadow(str(undo["db"])).restore(dict(undo["tables"]))
                self._emitter = Emitter(pumps, journal, self.capture.server_id, catalog.apply)
                try:
                    self._emitter.settle()
                    self.position = self._start_at(conn, catalog, flavor, mode)
                    source.close_quietly(conn)
                    self._stream(catalog)
                finally:
                    catalog.close()
        except BridgeError as exc:
            self.state, self.error = "failed", str(exc)
            raise
        except (_Stop, SnapshotStopped):
            log.info("capture stopping: asked to stop; the journal is at the last transaction written")
        finally:
            source.close_quietly(conn)
            journal.close()
            if status is not None:
                status.stop()
        self.state = "stopped"
        return 0

    def _start_at(self, conn: Any, catalog: TableCatalog, flavor: str, mode: str) -> Position:
        journal, emitter = self._journal, self._emitter
        assert journal is not None and emitter is not None
        state, wanted = journal.state, self.capture.snapshot
        if state.position is not None and state.snapshot not in ("running", "announcing"):
            try:
                source.check_available(conn, state.position)
                return state.position
            except PositionLost:
                if wanted != "when-needed":
                    raise
                log.warning("the journaled position was purged upstream; taking a new snapshot")
                journal.snapshot("running")
        if state.snapshot == "running" or (wanted != "never" and state.snapshot != "announcing"):
            self.state = "snapshot"
            chunk = self.capture.snapshot_chunk
            snapshot = Snapshot(self.capture.dsn(), catalog, emitter, journal, chunk, self._stopping)
            position = snapshot.run(flavor, mode, self.capture.databases)
            self.row_changes += snapshot.rows
            return position
        return self._announce_only(conn, catalog, flavor, mode)

    def _announce_only(self, conn: Any, catalog: TableCatalog, flavor: str, mode: str) -> Position:
        """``snapshot = "never"``: a CREATE_TABLE for each selected table at the binlog's end, no rows.

        Journaled as "announcing" until every table is announced, so a restart in between
        announces the rest at the same position instead of streaming without them.
        """
        journal, emitter = self._journal, self._emitter
        assert journal is not None and emitter is not None
        position = journal.state.position
        if journal.state.snapshot != "announcing" or position is None:
            position = source.current_position(conn, flavor, mode)
            journal.snapshot("announcing", position)
        for db, table in catalog.live_tables():
            if catalog.get(db, table) is not None:
                continue

            def change_for(ts: int, db: str = db, table: str = table) -> Any:
                ddl = catalog.created(db, table, ts)
                return ddl.change, ddl.updates

            sql = f"CREATE TABLE `{db}`.`{table}` /* announced by binlog-bridge capture */"
            emitter.ddl(sql, change_for, position)
        journal.snapshot("done")
        return position

    def _stream(self, catalog: TableCatalog) -> None:
        assert self._emitter is not None and self._journal is not None and self.position is not None
        self._writer = WriteBehind(self._emitter, self._journal, self._written)
        self.state = "streaming"
        log.info("capture streaming from %s", self.position.describe())
        log.info(
            "capture ready: source=%s meta=%s status=%s",
            self.capture.dsn().redacted(),
            self.capture.meta,
            self.capture.status_addr or "none",
        )
        try:
            self._stream_until_stopped(catalog)
        finally:
            self._writer.close()

    def _written(self, rows: int) -> None:
        self.row_changes += rows
        metrics.ROW_CHANGES.labels("binlog").inc(rows)

    def _stream_until_stopped(self, catalog: TableCatalog) -> None:
        while not self._stopping.is_set():
            assert self.position is not None
            stream = source.open_stream(
                self.capture.dsn(),
                self.capture.server_id,
                self.position,
                self.capture.databases,
                self.capture.heartbeat,
            )
            try:
                self._pump_events(Transactions(stream, self.position, catalog, self.capture))
            except BridgeError as exc:
                if not exc.retriable:
                    raise
                metrics.ERRORS.labels("source").inc()
                metrics.RESTARTS.inc()
                log.warning(
                    "binlog stream interrupted (%s); reopening from %s", exc, self.position.describe()
                )
                time.sleep(RECONNECT_SECONDS)
            finally:
                self._reading = False
                stream.close()

    def _pump_events(self, txns: Transactions) -> None:
        items = iter(txns)
        while not self._stopping.is_set():
            self._reading = True
            try:
                item = next(items)
            except StopIteration:
                return
            finally:
                self._reading = False
            if isinstance(item, RowsTxn):
                self._rows(item)
            elif isinstance(item, DdlEvent):
                self._ddl(item, txns)
            else:
                self._idle(item)

    def _rows(self, txn: RowsTxn) -> None:
        self.lag = max(0.0, time.time() - txn.timestamp)
        metrics.LAG.set(self.lag)
        if txn.mutations:
            self._writer.rows(txn.mutations, txn.position, txn.rows)
            metrics.POSITION_TIME.set(txn.timestamp)
        else:
            metrics.SKIPPED.inc()
            self._maybe_journal_move(txn.position)
        self.position = txn.position

    def _ddl(self, event: DdlEvent, txns: Transactions) -> None:
        assert self._emitter is not None
        catalog = txns.catalog
        found = catalog.recognise(event.db, event.sql)
        if found is None or (
            found[1].kind == Kind.DROP_TABLE and catalog.get(found[0], found[1].table) is None
        ):
            self._maybe_journal_move(event.position)
            self.position = event.position
            return
        db, statement = found

        def change_for(start_ts: int) -> Any:
            ddl = catalog.change_for(db, event.sql, statement, lambda: start_ts)
            return ddl.change, ddl.updates

        self._writer.drain()  # the DDL's binlog follows every transaction read before it
        self._emitter.ddl(event.sql, change_for, event.position)
        txns.forget_tables()
        self.position = event.position
        metrics.POSITION_TIME.set(event.timestamp)
        log.info("DDL captured: %.200s", " ".join(event.sql.split()))

    def _idle(self, idle: Idle) -> None:
        self.lag = 0.0
        metrics.LAG.set(0.0)
        self._maybe_journal_move(idle.position, force=True)

    def _maybe_journal_move(self, position: Position, force: bool = False) -> None:
        """Journal a position reached without writing a binlog, now and then (it saves re-reading)."""
        now = time.monotonic()
        if self._moved_to != position and (force or now - self._moved_at >= MOVE_EVERY_SECONDS):
            self._writer.moved(position)
            self._moved_at, self._moved_to = now, position
