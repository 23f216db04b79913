"""What a pull yields, and the blocking reads behind it.

A pull serves only what the index holds and only up to the published
watermark: every committed transaction with after < commit_ts <= watermark,
in commit_ts order, each once, followed by ``Watermark(watermark)`` once the
stretch is exhausted. A transaction whose Prewrite lived in a segment GC has
removed is skipped with a warning.

A chunked transaction comes as its parts (:class:`ChunkPart`, in chunk
order) and then its :class:`CommittedTxn`. A batch may end between two of
them once ``max_bytes`` is reached: the reader then returns the cursor
``commit_ts - 1`` with the number of parts already sent, and the next read
continues with the next part. A part that is missing (never written, or
removed by GC) is logged as an error; the drainer refuses the transaction,
whose part count does not match.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from bridge.proto import binlog_pb2
from pump.storage.errors import RecordGone
from pump.storage.index import Index
from pump.storage.sorter import Part
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
class ChunkPart:
    """Part ``chunk`` of a committed chunked transaction: its PrewriteChunk binlog as sent."""

    start_ts: int
    commit_ts: int
    chunk: int
    payload: bytes

    def commit_payload(self) -> bytes:
        """The part as pulled: ``commit_ts`` appended, ``tp`` still PrewriteChunk."""
        return self.payload + binlog_pb2.Binlog(commit_ts=self.commit_ts).SerializeToString()


@dataclass(frozen=True, slots=True)
class Watermark:
    """No committed transaction at or below ``ts`` is still to come from this pump."""

    ts: int


PullItem = CommittedTxn | ChunkPart | Watermark


class PullReader:
    """Reads one pull batch; runs in a worker thread."""

    def __init__(self, index: Index, vlog: ValueLog) -> None:
        self._index = index
        self._vlog = vlog
        self.dangling = 0

    def read(
        self, after: int, watermark: int, max_entries: int, max_bytes: int, parts_sent: int = 0
    ) -> tuple[list[PullItem], int, int]:
        """Items after ``after`` up to ``watermark``, the new cursor and parts sent of
        the transaction after the cursor (0 unless a batch ended inside it).

        ``parts_sent`` parts of the first transaction after ``after`` were already
        sent. Stops after ``max_entries`` transactions or once ``max_bytes`` of
        payload are collected (always at least one item; a chunked transaction
        is cut between its binlogs); ends with a Watermark when everything up
        to ``watermark`` has been read.
        """
        commits = self._index.commits(after, watermark, max_entries)
        chunked: dict[int, list[Part]] = {}
        if commits and self._index.has_parts():  # one lookup per batch while no part is indexed
            chunked = self._index.parts_of([commit.start_ts for commit in commits])
        items: list[PullItem] = []
        cursor, size = after, 0
        for commit_ts, start_ts, pointer in commits:
            parts: list[Part] = []
            if chunked:
                parts = chunked.get(start_ts, parts)
                if parts:
                    sent = parts_sent if commit_ts == after + 1 else 0  # the cut one: cursor commit_ts - 1
                    size, stop = self._add_parts(items, parts, commit_ts, sent, size, max_bytes)
                    if stop is not None:
                        return items, commit_ts - 1, stop
                    if size >= max_bytes and items:  # the final binlog waits for the next batch
                        return items, commit_ts - 1, len(parts)
            cursor = commit_ts
            try:
                payload = self._vlog.read(pointer)
            except RecordGone:
                self.dangling += 1
                log.warning("commit_ts %d: its Prewrite (start_ts %d) was removed by GC", commit_ts, start_ts)
                continue
            if parts:
                _check_count(payload, start_ts, commit_ts, len(parts))
            items.append(CommittedTxn(start_ts, commit_ts, payload))
            size += len(payload)
            if size >= max_bytes and cursor < watermark:
                return items, cursor, 0
        if len(commits) < max_entries or cursor >= watermark:
            items.append(Watermark(watermark))
            cursor = watermark
        return items, cursor, 0

    def _add_parts(
        self, items: list[PullItem], parts: list[Part], commit_ts: int, sent: int, size: int, max_bytes: int
    ) -> tuple[int, int | None]:
        """Append the parts after the first ``sent``; (size, parts sent when the batch is full)."""
        start_ts = parts[0].start_ts
        if sent == 0 and parts[-1].chunk != len(parts):
            chunks = [part.chunk for part in parts]
            log.error(
                "transaction start_ts %d, commit_ts %d: its parts are not 1..n, found chunks %s; "
                "the drainer will refuse it",
                start_ts,
                commit_ts,
                chunks if len(chunks) <= 10 else f"{chunks[:10]}...",
            )
        for index in range(sent, len(parts)):
            if size >= max_bytes and items:
                return size, index
            chunk, pointer = parts[index].chunk, parts[index].pointer
            try:
                payload = self._vlog.read(pointer)
            except RecordGone:
                self.dangling += 1
                log.error(
                    "transaction start_ts %d, commit_ts %d: its part %d was removed by GC; "
                    "the drainer will refuse it",
                    start_ts,
                    commit_ts,
                    chunk,
                )
                continue
            items.append(ChunkPart(start_ts, commit_ts, chunk, payload))
            size += len(payload)
        return size, None


def _check_count(payload: bytes, start_ts: int, commit_ts: int, found: int) -> None:
    """Log an error when a chunked transaction's Prewrite announces other than ``found`` parts."""
    try:
        chunks = binlog_pb2.Binlog.FromString(payload).chunks
    except DecodeError:
        return  # the drainer names the broken payload
    if chunks != found:
        log.error(
            "transaction start_ts %d, commit_ts %d: its Prewrite announces %d parts, %d are stored; "
            "the drainer will refuse it",
            start_ts,
            commit_ts,
            chunks,
            found,
        )
