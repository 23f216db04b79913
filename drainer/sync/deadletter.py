"""``[skip] on-error = "skip-and-log"``: transactions the drainer cannot build are stored and skipped.

With ``on-error = "halt"`` (the default) a transaction the builder cannot
replicate (:class:`~drainer.sync.builder.HaltError`: a DDL the schema
tracker cannot apply, rows of a table no tracked DDL created, a malformed
binlog) stops the drainer. With ``"skip-and-log"`` it is appended to the
dead-letter directory (``[skip] dead-letter-dir``, relative to data-dir) in
the file sink's binlog format (:mod:`drainer.sinks.file.binlogfile`: the
first file's header holds the tracked schema at the first skip), fsynced,
logged with its commit_ts and the error, counted as ``ignored``, and the
drainer carries on. A transaction skipped whole by a rule (``[filter]
ignore-txn-commit-ts``, ``[skip] commit-ts``) is stored there too, so the
directory holds every transaction skipped whole. ``binlog-bridge replay
--dir`` reads it like the file sink's directory (``--to sqlite:DIR`` or
``mysql://...``); the tables of the first file's schema that the target
lacks are created first, and a transaction the schema tracker could not
follow fails there the same way.

A change the downstream refuses (:class:`~bridge.sink.errors.SinkApplyError`,
e.g. MySQL error 1146 for a table dropped downstream) is found by the syncer: it
reopens the sink at the last flushed position and applies the unflushed
events one at a time; the one refused is stored here and logged (with
``"halt"`` the drainer stops instead, naming the ``[skip]`` line that skips
it), and the rest are applied. A row that does not fit its schema (found when
the sink decodes it) still stops the drainer.

After a restart the transactions above the checkpoint are built again: one
already stored (``commit_ts`` at or below the directory's last) is not
stored twice. A transaction that travelled in chunks is stored whole: its
parts, then its final binlog (a crash between them leaves parts that the
next open truncates, and the transaction is stored again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from bridge.errors import BridgeError
from drainer import metrics
from drainer.collect.merger import PulledTxn
from drainer.sinks.file.binlogfile import BinlogFileWriter

log = logging.getLogger(__name__)

MAX_FILE_SIZE = 64 << 20


class DeadLetter:
    """The dead-letter directory of one drainer; ``snapshot`` gives the tracked schema now."""

    def __init__(self, directory: Path, snapshot: Callable[[], bytes]) -> None:
        self.directory = directory
        self._snapshot = snapshot
        self._writer: BinlogFileWriter | None = None
        self.stored = 0

    def put(self, txn: PulledTxn, error: BridgeError) -> None:
        """Store ``txn``, which could not be built because of ``error``, and log it."""
        self.store(txn)
        metrics.EVENTS.labels("ignored").inc()
        log.warning(
            "on-error = skip-and-log: skipped the transaction at commit_ts %d, stored in %s: %s",
            txn.commit_ts,
            self.directory,
            error,
        )

    def refused(
        self,
        commit_ts: int,
        payload: bytes,
        error: BridgeError,
        parts: Callable[[], Iterable[bytes]] | None = None,
    ) -> None:
        """Store the transaction (or DDL) at ``commit_ts`` the downstream refused, and log it;
        ``parts``: a chunked transaction's parts (``TxnEvent.parts``)."""
        self.store_binlog(commit_ts, payload, () if parts is None else parts())
        metrics.EVENTS.labels("ignored").inc()
        log.warning(
            "on-error = skip-and-log: the downstream refused the transaction at commit_ts %d; "
            "skipped, stored in %s: %s",
            commit_ts,
            self.directory,
            error,
        )

    def store(self, txn: PulledTxn) -> None:
        """Append ``txn`` (fsynced) unless a run before a restart stored it already."""
        parts = txn.parts.binlogs() if txn.parts is not None else ()
        self.store_binlog(txn.commit_ts, txn.payload, parts)

    def store_binlog(self, commit_ts: int, payload: bytes, parts: Iterable[bytes] = ()) -> None:
        """Append one binlog (after ``parts``, the PrewriteChunk binlogs of a chunked
        transaction: all of them or nothing is stored), fsynced."""
        writer = self._writer
        if writer is None:
            writer = self._writer = BinlogFileWriter(self.directory, MAX_FILE_SIZE)
            writer.open(self._snapshot())
        if commit_ts > writer.last_ts:
            writer.append(commit_ts, payload, parts=parts)
            writer.sync()
            self.stored += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
