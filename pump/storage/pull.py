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

The parts sent are exactly those the Prewrite announces (``chunks``): parts
stored above that number (an earlier attempt of the producer wrote parts
1..5, its retry 1..3 and a Prewrite with ``chunks = 3``) are ignored with a
warning; the index deletes them when the Prewrite is applied
(:mod:`pump.storage.index`), this covers those that came after it. So the
reader reads a chunked transaction's Prewrite before its parts, once: the
count is remembered for the next batches of the same transaction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from bridge.binlogscan import scan_header
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2
from pump.storage.errors import RecordGone
from pump.storage.index import Index
from pump.storage.segment import Pointer
from pump.storage.sorter import Part
from pump.storage.vlog import ValueLog

log = logging.getLogger(__name__)

ANNOUNCED_CACHE = 4096  # chunked transactions whose part count a reader remembers


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
    """Reads one pull batch; runs in a worker thread (several at once)."""

    def __init__(self, index: Index, vlog: ValueLog) -> None:
        self._index = index
        self._vlog = vlog
        self.dangling = 0
        # start_ts -> parts its Prewrite announces, for the chunked transactions read lately: a
        # batch cut inside one goes on without reading the Prewrite again
        self._announced: dict[int, int] = {}

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
            payload: bytes | None = None
            parts = chunked.get(start_ts, []) if chunked else []
            if parts:
                sent = parts_sent if commit_ts == after + 1 else 0  # the cut one: cursor commit_ts - 1
                try:
                    parts, payload = self._own_parts(parts, commit_ts, pointer, sent)
                except RecordGone:
                    cursor = commit_ts
                    self._gone(start_ts, commit_ts)
                    continue
                size, stop = self._add_parts(items, parts, commit_ts, sent, size, max_bytes)
                if stop is not None:
                    return items, commit_ts - 1, stop
                if parts and size >= max_bytes and items:  # the final binlog waits for the next batch
                    return items, commit_ts - 1, len(parts)
            cursor = commit_ts
            if payload is None:
                try:
                    payload = self._vlog.read(pointer)
                except RecordGone:
                    self._gone(start_ts, commit_ts)
                    continue
            items.append(CommittedTxn(start_ts, commit_ts, payload))
            size += len(payload)
            if size >= max_bytes and cursor < watermark:
                return items, cursor, 0
        if len(commits) < max_entries or cursor >= watermark:
            items.append(Watermark(watermark))
            cursor = watermark
        return items, cursor, 0

    def _gone(self, start_ts: int, commit_ts: int) -> None:
        self.dangling += 1
        log.warning("commit_ts %d: its Prewrite (start_ts %d) was removed by GC", commit_ts, start_ts)

    def _own_parts(
        self, parts: list[Part], commit_ts: int, pointer: Pointer, sent: int
    ) -> tuple[list[Part], bytes | None]:
        """The parts of ``parts`` the transaction's Prewrite announces, and the Prewrite's
        payload when it had to be read to learn how many (None otherwise). Logs stale parts
        and missing ones once per transaction read (``sent`` = 0). :class:`RecordGone` when
        the Prewrite was removed by GC."""
        start_ts = parts[0].start_ts
        announced = self._announced.get(start_ts)
        payload: bytes | None = None
        if announced is None:
            payload = self._vlog.read(pointer)
            try:
                announced = scan_header(payload).chunks
            except ProtocolError:
                return parts, payload  # the drainer names the broken payload
            if len(self._announced) >= ANNOUNCED_CACHE:
                self._announced.clear()
            self._announced[start_ts] = announced
        own = [part for part in parts if part.chunk <= announced]
        if sent:
            return own, payload
        if len(own) < len(parts):
            stale = [part.chunk for part in parts[len(own) :]]
            log.warning(
                "transaction start_ts %d, commit_ts %d: ignoring %d stale parts above the %d its "
                "Prewrite announces (chunks %s), left by an earlier attempt of the producer",
                start_ts,
                commit_ts,
                len(stale),
                announced,
                stale if len(stale) <= 10 else f"{stale[:10]}...",
            )
        if len(own) != announced or (own and own[-1].chunk != len(own)):
            chunks = [part.chunk for part in own]
            log.error(
                "transaction start_ts %d, commit_ts %d: its Prewrite announces %d parts, stored are "
                "chunks %s; the drainer will refuse it",
                start_ts,
                commit_ts,
                announced,
                chunks if len(chunks) <= 10 else f"{chunks[:10]}...",
            )
        return own, payload

    def _add_parts(
        self, items: list[PullItem], parts: list[Part], commit_ts: int, sent: int, size: int, max_bytes: int
    ) -> tuple[int, int | None]:
        """Append the parts after the first ``sent``; (size, parts sent when the batch is full)."""
        for index in range(sent, len(parts)):
            if size >= max_bytes and items:
                return size, index
            start_ts, chunk, pointer = parts[index]
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
