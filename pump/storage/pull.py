"""What a pull yields, and the blocking reads behind it.

A pull serves only what the index holds and only up to the published
watermark: every committed transaction with after < commit_ts <= watermark,
in commit_ts order, each once, followed by ``Watermark(watermark)`` once the
stretch is exhausted. A transaction whose Prewrite lived in a segment GC has
removed is skipped with a warning.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bridge.proto import binlog_pb2
from pump.storage.errors import RecordGone
from pump.storage.index import Index
from pump.storage.vlog import ValueLog

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CommittedTxn:
    """A committed transaction: its Prewrite binlog exactly as the producer sent it."""

    start_ts: int
    commit_ts: int
    payload: bytes

    def commit_payload(self) -> bytes:
        """The Prewrite re-typed as the Commit: ``tp = Commit`` and ``commit_ts`` set.

        Appends the two fields to the serialized Prewrite instead of parsing it
        (protobuf keeps the last value of a repeated scalar field), so a 100 MB
        payload costs one copy.
        """
        suffix = binlog_pb2.Binlog(tp=binlog_pb2.BinlogType.Commit, commit_ts=self.commit_ts)
        return self.payload + suffix.SerializeToString()


@dataclass(frozen=True, slots=True)
class Watermark:
    """No committed transaction at or below ``ts`` is still to come from this pump."""

    ts: int


PullItem = CommittedTxn | Watermark


class PullReader:
    """Reads one pull batch; runs in a worker thread."""

    def __init__(self, index: Index, vlog: ValueLog) -> None:
        self._index = index
        self._vlog = vlog
        self.dangling = 0

    def read(
        self, after: int, watermark: int, max_entries: int, max_bytes: int
    ) -> tuple[list[PullItem], int]:
        """Items after ``after`` up to ``watermark`` and the new cursor.

        Stops after ``max_entries`` transactions or once ``max_bytes`` of
        payload are collected (always at least one); ends with a Watermark
        when everything up to ``watermark`` has been read.
        """
        commits = self._index.commits(after, watermark, max_entries)
        items: list[PullItem] = []
        cursor, size = after, 0
        for commit_ts, start_ts, pointer in commits:
            cursor = commit_ts
            try:
                payload = self._vlog.read(pointer)
            except RecordGone:
                self.dangling += 1
                log.warning("commit_ts %d: its Prewrite (start_ts %d) was removed by GC", commit_ts, start_ts)
                continue
            items.append(CommittedTxn(start_ts, commit_ts, payload))
            size += len(payload)
            if size >= max_bytes and cursor < watermark:
                return items, cursor
        if len(commits) < max_entries or cursor >= watermark:
            items.append(Watermark(watermark))
            cursor = watermark
        return items, cursor
