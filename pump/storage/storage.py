"""The storage engine's facade: what the pump server calls.

::

    storage = await Storage.open(data_dir, StorageConfig())
    await storage.write([(binlog, payload), ...])      # durable on return
    async for items in storage.pull(after_commit_ts):  # CommittedTxn ... Watermark
        ...
    await storage.close()

Data dir layout: ``value/`` (the value log), ``kv/`` (the LMDB index), ``settled.log``
(the lost-commit settlements, :mod:`pump.storage.late_commits`),
``LOCK`` (an flock held while open). How the pieces fit: docs/pump-storage.md.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from pathlib import Path

import lmdb
from google.protobuf.message import DecodeError

from bridge.binlog import commit, fake_binlog, rollback
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2
from bridge.tso import compose
from pump.storage.chaser import Chaser
from pump.storage.config import StorageConfig
from pump.storage.errors import DataDirLocked, StorageClosed, StorageError
from pump.storage.index import Index
from pump.storage.late_commits import LateCommitGate
from pump.storage.pull import ChunkPart, CommittedTxn, PullItem, PullReader, Watermark
from pump.storage.segment import Pointer
from pump.storage.sorter import (
    COMMIT,
    PREWRITE,
    PREWRITE_CHUNK,
    ROLLBACK,
    Sorter,
    SorterCounters,
    SorterState,
    seconds_to_ts,
)
from pump.storage.vlog import ValueLog
from pump.storage.writer import GroupCommitter, Record

log = logging.getLogger(__name__)

__all__ = ["ChunkPart", "CommittedTxn", "PullItem", "Storage", "StorageStats", "Watermark"]


@dataclass(frozen=True)
class StorageStats:
    """A snapshot for metrics and the status page."""

    watermark: int
    max_commit_ts: int
    gc_ts: int
    size_bytes: int
    segments: int
    head: Pointer
    indexed: Pointer
    unpaired: int
    orphans: int
    read_back: int
    batches: int
    records: int
    sorter: SorterCounters


def _record_of(payload: bytes) -> tuple[int, int, int]:
    """(tp, start_ts, commit_ts) of a stored payload, for the chaser's slow path; for a
    PrewriteChunk, which has no commit_ts, (tp, start_ts, chunk) and for a Prewrite (tp,
    start_ts, chunks), as :meth:`Storage.write` records them."""
    try:
        binlog = binlog_pb2.Binlog.FromString(payload)
    except DecodeError:
        log.error("a value-log record passed its checksum but is not a Binlog; ignoring it")
        return -1, 0, 0
    tp = binlog.tp
    if tp == PREWRITE_CHUNK:
        return tp, binlog.start_ts, binlog.chunk
    if tp == PREWRITE:
        return tp, binlog.start_ts, max(binlog.chunks, 0)
    return tp, binlog.start_ts, binlog.commit_ts


def _ts_of(payload: bytes) -> int:
    try:
        binlog = binlog_pb2.Binlog.FromString(payload)
    except DecodeError:
        return 0
    return max(binlog.start_ts, binlog.commit_ts)


def _check(tp: int, start_ts: int, commit_ts: int) -> None:
    """What the storage relies on (the server's parse_binlog checks the rest):
    a stored type and timestamps that fit it. Plain ints: this runs per binlog."""
    if tp == PREWRITE:
        problem = "" if start_ts > 0 and commit_ts == 0 else "a Prewrite needs start_ts > 0 and no commit_ts"
    elif tp == COMMIT:
        problem = "" if 0 < start_ts < commit_ts else "a Commit needs 0 < start_ts < commit_ts"
    elif tp == ROLLBACK:
        ok = start_ts > 0 and commit_ts in (0, start_ts)
        problem = "" if ok else "a Rollback needs start_ts > 0 and no commit_ts (or = start_ts: fake)"
    elif tp == PREWRITE_CHUNK:
        problem = (
            "" if start_ts > 0 and commit_ts == 0 else "a PrewriteChunk needs start_ts > 0 and no commit_ts"
        )
    else:
        problem = f"binlog type {tp} is not stored by a pump"
    if problem:
        raise ProtocolError(f"invalid binlog (start_ts {start_ts}, commit_ts {commit_ts}): {problem}")


def _lock_data_dir(data_dir: Path) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / "LOCK", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirLocked(f"{data_dir}: another process has this pump data dir open") from None
    return fd


class Storage:
    """The pump's storage engine. Create with :meth:`open` inside a running event loop."""

    def __init__(
        self, data_dir: Path, config: StorageConfig, lock_fd: int, vlog: ValueLog, index: Index
    ) -> None:
        self.data_dir = data_dir
        self.config = config
        self._lock_fd = lock_fd
        self._vlog = vlog
        self._index = index
        self._loop = asyncio.get_running_loop()
        applied, self._gc_ts, state = self._load_index()
        self._sorter = Sorter(
            state,
            orphan_timeout_ts=seconds_to_ts(config.orphan_commit_timeout),
            is_committed=index.has_commit,
        )
        self._watermark = state.watermark
        self._max_commit_ts = state.max_seen
        self._changed = asyncio.Event()
        self._closing = False
        self._closed = False
        self._reads: set[asyncio.Future[tuple[list[PullItem], int, int]]] = set()
        self._failure: BaseException | None = None
        self._chaser = Chaser(
            vlog,
            index,
            self._sorter,
            applied,
            parse=_record_of,
            on_applied=self._applied_from_thread,
            on_failed=self._failed_from_thread,
            queue_limit=config.index_queue_batches,
        )
        self._writer = GroupCommitter(
            vlog, self._chaser, max_batch_bytes=config.max_batch_bytes, ack_wait=config.index_ack_wait
        )
        self._reader = PullReader(index, vlog)
        self._late_commits = LateCommitGate(self._sorter, self._chaser.lock, data_dir / "settled.log")
        self._chaser.start()

    @classmethod
    async def open(cls, data_dir: Path | str, config: StorageConfig | None = None) -> Storage:
        """Open (or create) the storage in ``data_dir``; recovers after a crash."""
        config = config or StorageConfig()
        data_dir = Path(data_dir)
        lock_fd = _lock_data_dir(data_dir)
        vlog: ValueLog | None = None
        try:
            vlog = await asyncio.to_thread(
                ValueLog.open,
                data_dir / "value",
                segment_size=config.segment_size,
                sync=config.sync,
                ts_of=_ts_of,
            )
            index = Index(data_dir / "kv", map_size=config.index_map_size, sync=config.index_sync)
        except BaseException as exc:
            if vlog is not None:
                vlog.close()
            os.close(lock_fd)
            if isinstance(exc, OSError | lmdb.Error):
                raise StorageError(f"{data_dir}: cannot open the pump storage: {exc}") from exc
            raise
        if not config.sync:
            log.warning(
                "storage.sync = false: binlogs are acknowledged WITHOUT fsync; a crash of the machine "
                "loses acknowledged binlogs. Use this for benchmarks only."
            )
        return cls(data_dir, config, lock_fd, vlog, index)

    def _load_index(self) -> tuple[Pointer, int, SorterState]:
        applied, gc_ts, state = self._index.load()
        if applied is None:
            return self._vlog.first, gc_ts, state
        if not self._vlog.holds_position(applied):
            log.warning(
                "the index stands at %s, past the end of the value log (its tail was lost or cut): "
                "rebuilding the index from the log",
                applied,
            )
            self._index.reset()
            _, gc_ts, state = self._index.load()
            return self._vlog.first, gc_ts, state
        return applied, gc_ts, state

    # --- writing -------------------------------------------------------------

    async def write(self, binlogs: Sequence[tuple[binlog_pb2.Binlog, bytes]]) -> None:
        """Store parsed binlogs with their payloads; returns once they are durable.

        All or nothing for validation: a binlog of an unknown or unstored type
        or with impossible timestamps raises :class:`ProtocolError` and nothing
        of the call is written. Probes (start_ts = commit_ts = 0) are not
        stored. Many concurrent callers share one append and one fsync. A
        Commit the pump would not deliver raises :class:`LateCommit` (a
        ProtocolError; :mod:`pump.storage.late_commits`).
        """
        records: list[Record] = []
        for binlog, payload in binlogs:
            tp, start_ts, commit_ts = binlog.tp, binlog.start_ts, binlog.commit_ts  # each read once
            if start_ts == 0 and commit_ts == 0:
                continue  # a probe
            _check(tp, start_ts, commit_ts)
            if tp == PREWRITE_CHUNK:  # its record carries the chunk index where others carry commit_ts
                commit_ts = binlog.chunk
                if commit_ts < 1:
                    raise ProtocolError(
                        f"invalid binlog (start_ts {start_ts}): a PrewriteChunk needs chunk >= 1"
                    )
            elif tp == PREWRITE:  # and a Prewrite the parts it announces (the index drops any above)
                commit_ts = max(binlog.chunks, 0)
            records.append((payload, tp, start_ts, commit_ts))
        if not records:
            return
        self._check_open()
        if self._late_commits.suspects(records) and self._late_commits.refusal(records):
            await self.wait_indexed()  # a duplicate Commit may be paired but not yet indexed
            self._late_commits.refuse(records)  # nothing awaited from here to the submit
        await self._writer.submit(records)

    async def write_fake(self, ts: int) -> None:
        """Store a fake binlog (the watermark a pump writes on an interval) at ``ts``."""
        fake = fake_binlog(ts)
        await self.write([(fake, fake.SerializeToString())])

    async def resolve(
        self, start_ts: int, commit_ts: int | None, by: str = "the lost-commit resolver"
    ) -> None:
        """Settle an unpaired Prewrite: write its Commit at ``commit_ts``, or a
        Rollback when None (the Prewrite is discarded). Durable on return; does
        nothing when the Prewrite is no longer unpaired. ``by`` names the
        resolver in the refusal of a later Commit of ``start_ts``."""
        with self._chaser.lock:
            pending = self._sorter.is_unpaired(start_ts)
        if not pending:
            log.info("resolve(%d): the Prewrite is no longer unpaired; nothing to do", start_ts)
            return
        self._late_commits.settle(start_ts, commit_ts, by)
        binlog = rollback(start_ts) if commit_ts is None else commit(start_ts, commit_ts)
        await self.write([(binlog, binlog.SerializeToString())])
        await self._late_commits.persist(start_ts)

    def unpaired_before(self, ts: int) -> list[int]:
        """start_ts of the unpaired Prewrites with start_ts < ``ts``, oldest first."""
        with self._chaser.lock:
            return [start_ts for start_ts, _ in self._sorter.unpaired_before(ts)]

    def unpaired_older_than(self, age: float) -> list[int]:
        """start_ts of the unpaired Prewrites whose start_ts is at least ``age``
        seconds old by this machine's clock, oldest first."""
        return self.unpaired_before(compose(int((time.time() - age) * 1000), 0))

    # --- reading -------------------------------------------------------------

    async def pull(
        self,
        after_commit_ts: int,
        *,
        max_entries: int = 1024,
        max_bytes: int = 4 << 20,
        interval: float = 0.0,
    ) -> AsyncGenerator[list[PullItem], None]:
        """Committed transactions after ``after_commit_ts`` in commit_ts order, each
        once, interleaved with :class:`Watermark` items, following new data until
        the storage closes. See :mod:`pump.storage.pull`.

        Once caught up, a change that comes less than ``interval`` seconds after
        the last read waits out the rest of it, so a busy stream reads (and its
        caller sends) at most once per ``interval`` however many group commits
        came meanwhile; a change after a quiet spell is read at once."""
        cursor, parts_sent = after_commit_ts, 0  # parts sent of the transaction after the cursor
        if cursor + 1 < self._gc_ts:  # binlogs at or above gc_ts are all still there
            log.warning("pull from commit_ts %d: binlogs below the GC ts %d are gone", cursor, self._gc_ts)
        last_read = -interval
        while not self._closed:
            if self._failure is not None:
                raise StorageError(f"the index failed: {self._failure}") from self._failure
            watermark, changed = self._watermark, self._changed
            if cursor >= watermark:
                await changed.wait()
                early = last_read + interval - self._loop.time()
                if early > 0:
                    await asyncio.sleep(early)
                continue
            last_read = self._loop.time()
            read = asyncio.ensure_future(
                asyncio.to_thread(self._reader.read, cursor, watermark, max_entries, max_bytes, parts_sent)
            )
            self._reads.add(read)
            read.add_done_callback(self._reads.discard)
            items, cursor, parts_sent = await asyncio.shield(read)
            if items:
                yield items

    # --- upkeep --------------------------------------------------------------

    async def gc(self, before_ts: int) -> int:
        """Remove sealed segments whose binlogs are all older than ``before_ts``
        and the index entries of commits below it; returns the GC ts reached.

        Never removes what is still needed: the GC ts is capped by the
        watermark, the oldest unpaired Prewrite and the indexed position."""
        self._check_open()
        future = self._chaser.call(lambda: self._gc_in_chaser(before_ts))
        result = await asyncio.wrap_future(future)
        assert isinstance(result, int)
        return result

    def _gc_in_chaser(self, before_ts: int) -> int:
        with self._chaser.lock:
            limit = min(before_ts, self._sorter.watermark + 1)
            oldest = self._sorter.min_unpaired()
        if oldest is not None:
            limit = min(limit, oldest)
        if limit <= self._gc_ts:
            return self._gc_ts
        below = self._vlog.next_position(self._chaser.applied).segment
        removed = self._vlog.remove_before(limit, below)
        deleted = self._index.delete_commits_before(limit)
        parts = self._index.delete_parts_before(limit)
        self._index.set_gc_ts(limit)
        self._gc_ts = limit
        log.info(
            "GC to ts %d: removed %d segments, %d commit entries and %d parts",
            limit,
            len(removed),
            deleted,
            parts,
        )
        return limit

    async def wait_indexed(self) -> None:
        """Wait until the index has applied everything written so far."""
        target = self._vlog.head
        while self._vlog.next_position(self._chaser.applied) < self._vlog.next_position(target):
            self._check_open()
            if self._failure is not None:
                raise StorageError(f"the index failed: {self._failure}") from self._failure
            await self._changed.wait()

    # --- state ---------------------------------------------------------------

    @property
    def watermark(self) -> int:
        """Highest ts at which every transaction here is final (published to pulls)."""
        return self._watermark

    @property
    def max_commit_ts(self) -> int:
        """Highest commit_ts or fake-binlog ts indexed."""
        return self._max_commit_ts

    @property
    def gc_ts(self) -> int:
        return self._gc_ts

    @property
    def records_written(self) -> int:
        """Binlogs (fake ones included) the value log has taken since the storage opened."""
        return self._writer.records

    @property
    def size_bytes(self) -> int:
        """Bytes of the value log (the index is a small fraction of it)."""
        return self._vlog.size_bytes

    @property
    def unpaired_count(self) -> int:
        return self._sorter.unpaired_count

    def stats(self) -> StorageStats:
        with self._chaser.lock:
            counters = SorterCounters(**vars(self._sorter.counters))
            unpaired, orphans = self._sorter.unpaired_count, self._sorter.orphan_count
        return StorageStats(
            watermark=self._watermark,
            max_commit_ts=self._max_commit_ts,
            gc_ts=self._gc_ts,
            size_bytes=self._vlog.size_bytes,
            segments=self._vlog.segment_count(),
            head=self._vlog.head,
            indexed=self._chaser.applied,
            unpaired=unpaired,
            orphans=orphans,
            read_back=self._chaser.read_back,
            batches=self._writer.batches,
            records=self._writer.records,
            sorter=counters,
        )

    def _check_open(self) -> None:
        if self._closing:
            raise StorageClosed("the storage is closed")

    def _applied_from_thread(self, applied: Pointer, watermark: int) -> None:
        max_commit_ts = self._sorter.max_seen
        self._loop.call_soon_threadsafe(self._on_applied, applied, watermark, max_commit_ts)

    def _failed_from_thread(self, exc: BaseException) -> None:
        self._loop.call_soon_threadsafe(self._on_failed, exc)

    def _on_applied(self, applied: Pointer, watermark: int, max_commit_ts: int) -> None:
        self._writer.on_applied(applied)
        self._max_commit_ts = max(self._max_commit_ts, max_commit_ts)
        self._watermark = max(self._watermark, watermark)
        self._notify()

    def _on_failed(self, exc: BaseException) -> None:
        self._failure = exc
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def close(self) -> None:
        """Write what is pending, index everything written, close the files."""
        if self._closing:
            return
        self._closing = True
        await self._writer.close()
        await asyncio.to_thread(self._chaser.stop)
        self._closed = True
        self._notify()
        await asyncio.gather(*self._reads, return_exceptions=True)
        self._index.close()
        self._vlog.close()
        os.close(self._lock_fd)
        log.info("storage closed at watermark %d", self._watermark)
