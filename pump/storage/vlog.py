"""The value log: the pump's durable, append-only record of every binlog.

Segments ``value/000001.vlog``, ``000002.vlog``, ... (format in
:mod:`pump.storage.segment`). Only the newest segment takes appends; once it
holds ``segment_size`` bytes it is sealed with a footer carrying its max ts,
fsynced, and a new segment is created (and the directory fsynced).

On open every unsealed segment is scanned and checked: a torn last record
(short header or payload at EOF) is truncated, a damaged record inside the log
raises :class:`~pump.storage.errors.CorruptLog` naming file and offset.

Threads: one writer calls :meth:`append` and :meth:`sync`; any thread may
:meth:`read` and :meth:`scan` below a position the writer has published, and
:meth:`remove_before` (GC) may run beside them.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Generator, Sequence
from pathlib import Path

from bridge.durable import fsync_dir
from pump.storage.errors import RecordGone, StorageFailed, StorageFull
from pump.storage.segment import (
    FOOTER,
    HEADER,
    Pointer,
    Segment,
    encode_header,
    iter_records,
    read_footer,
    read_record,
    recover,
)

log = logging.getLogger(__name__)
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})  # a full disk: the write can be retried later

SUFFIX = ".vlog"
IOV_MAX = 1024
_new_tuple = tuple.__new__
BIG_CHUNK = 1 << 16


def segment_name(seg_id: int) -> str:
    return f"{seg_id:06d}{SUFFIX}"


class ValueLog:
    """Append-only segments of checksummed records; see the module docstring."""

    def __init__(self, directory: Path, segments: list[Segment], segment_size: int, sync: bool) -> None:
        self.directory = directory
        self.segment_size = segment_size
        self.sync_enabled = sync
        self._segments = {s.id: s for s in segments}
        self._active = segments[-1]
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls, directory: Path, *, segment_size: int, sync: bool, ts_of: Callable[[bytes], int]
    ) -> ValueLog:
        """Open or create the log in ``directory``, recovering unsealed segments.

        ``ts_of(payload)`` gives a record's ts, to rebuild the max ts of a
        segment that has no footer yet.
        """
        directory.mkdir(parents=True, exist_ok=True)
        ids = sorted(int(p.name[: -len(SUFFIX)]) for p in directory.glob(f"*{SUFFIX}") if p.stem.isdigit())
        segments = [_open_segment(directory, seg_id, ts_of) for seg_id in ids]
        for segment in segments[:-1]:
            if not segment.sealed:
                log.warning("sealing %s, which had no footer (a crash during rotation)", segment.path)
                segment.seal(sync)
        if not segments or segments[-1].sealed:
            segments.append(_create_segment(directory, ids[-1] + 1 if ids else 1, sync))
        return cls(directory, segments, segment_size, sync)

    @property
    def head(self) -> Pointer:
        """Where the next record will be appended (writer thread's view)."""
        return Pointer(self._active.id, self._active.data_end)

    @property
    def first(self) -> Pointer:
        with self._lock:
            return Pointer(min(self._segments), 0)

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.file_size for s in self._segments.values())

    def segment_count(self) -> int:
        with self._lock:
            return len(self._segments)

    def append(self, records: Sequence[tuple[bytes, int]]) -> list[Pointer]:
        """Write (payload, ts) records after the head; returns their pointers.

        Not durable until :meth:`sync`. On an I/O error the segment is cut
        back to where the call started and :class:`StorageFailed` is raised;
        :class:`StorageFull` instead when the disk was full and the log is
        exactly as before the call (no segment was sealed by it).
        """
        first = self._active.id
        try:
            return self._append(records)
        except StorageFull as exc:
            if self._active.id == first:
                raise
            raise StorageFailed(f"{exc} (after sealing segments in the same write)") from exc

    def _append(self, records: Sequence[tuple[bytes, int]]) -> list[Pointer]:
        # Runs per binlog: locals instead of attribute lookups, and each Pointer
        # built by tuple.__new__ (a NamedTuple's own __new__ costs ~0.3 us more).
        pointers: list[Pointer] = []
        chunks: list[bytes] = []
        active, pos, limit, header_size = self._active, self._active.data_end, self.segment_size, HEADER.size
        max_ts = active.max_ts
        for payload, ts in records:
            if pos >= limit and pos > 0:
                active.max_ts = max_ts
                self._write(chunks, pos)
                chunks = []
                self._rotate()
                active, pos = self._active, 0
                max_ts = active.max_ts
            pointers.append(_new_tuple(Pointer, (active.id, pos)))
            chunks += (encode_header(payload), payload)
            pos += header_size + len(payload)
            if ts > max_ts:
                max_ts = ts
        active.max_ts = max_ts
        self._write(chunks, pos)
        return pointers

    def _write(self, chunks: list[bytes], end: int) -> None:
        active = self._active
        start = active.data_end
        try:
            _pwrite_all(active.fd, chunks, start)
        except OSError as exc:
            try:
                os.ftruncate(active.fd, start)
            except OSError:
                log.exception("cannot cut %s back to %d after a failed write", active.path, start)
            else:
                if exc.errno in _NO_SPACE:
                    raise StorageFull(f"{active.path}: no space to write at offset {start}: {exc}") from exc
            raise StorageFailed(f"{active.path}: write at offset {start} failed: {exc}") from exc
        active.data_end = end

    def _rotate(self) -> None:
        old = self._active
        try:
            old.seal(self.sync_enabled)
            new = _create_segment(self.directory, old.id + 1, self.sync_enabled)
        except OSError as exc:
            raise StorageFailed(f"{old.path}: sealing and rotating the segment failed: {exc}") from exc
        with self._lock:
            self._segments[new.id] = new
            self._active = new
        log.info("value log: sealed %s (max ts %d), now writing %s", old.path.name, old.max_ts, new.path.name)

    def sync(self) -> None:
        """Make everything appended so far durable (no-op when sync is off)."""
        if not self.sync_enabled:
            return
        try:
            os.fdatasync(self._active.fd)
        except OSError as exc:
            raise StorageFailed(f"{self._active.path}: fsync failed: {exc}") from exc

    def _acquire(self, seg_id: int) -> Segment:
        with self._lock:
            segment = self._segments.get(seg_id)
        if segment is None or not segment.acquire():
            raise RecordGone(f"value-log segment {segment_name(seg_id)} was removed by GC")
        return segment

    def read(self, pointer: Pointer) -> bytes:
        """The payload at ``pointer``, checked against its CRC."""
        segment = self._acquire(pointer.segment)
        try:
            return read_record(segment.fd, segment.path, pointer.offset)
        finally:
            segment.release()

    def scan(self, start: Pointer, stop: Pointer) -> Generator[tuple[Pointer, Pointer, bytes], None, None]:
        """Yield (pointer, end, payload) of every record from ``start`` up to ``stop``.

        ``start`` must be a record boundary (or the end of a segment); ``stop``
        a position the writer has published. Removed segments are skipped.
        """
        seg_id, offset = start
        while seg_id <= stop.segment:
            try:
                segment = self._acquire(seg_id)
            except RecordGone:
                if seg_id >= self.first.segment:
                    raise
                seg_id, offset = self.first.segment, 0
                continue
            try:
                end = stop.offset if seg_id == stop.segment else segment.data_end
                for pos, payload in iter_records(segment.fd, segment.path, offset, end):
                    yield Pointer(seg_id, pos), Pointer(seg_id, pos + HEADER.size + len(payload)), payload
            finally:
                segment.release()
            seg_id, offset = seg_id + 1, 0

    def next_position(self, position: Pointer) -> Pointer:
        """``position`` moved past the end of its sealed segment, if it is there."""
        with self._lock:
            segment = self._segments.get(position.segment)
        if segment is not None and segment.sealed and position.offset >= segment.data_end:
            return Pointer(position.segment + 1, 0)
        return position

    def holds_position(self, position: Pointer) -> bool:
        """Whether ``position`` is a place inside the log (not past a lost tail)."""
        with self._lock:
            segment = self._segments.get(position.segment)
            first = min(self._segments)
        if segment is None:
            return first > position.segment  # removed by GC: the log continues after it
        return position.offset <= segment.data_end

    def remove_before(self, ts: int, below_segment: int) -> list[int]:
        """GC: delete the oldest sealed segments whose max ts < ``ts`` and whose id
        < ``below_segment``, stopping at the first that does not qualify."""
        removed: list[Segment] = []
        with self._lock:
            for seg_id in sorted(self._segments):
                segment = self._segments[seg_id]
                if not segment.sealed or seg_id >= below_segment or segment.max_ts >= ts:
                    break
                removed.append(self._segments.pop(seg_id))
        for segment in removed:
            segment.path.unlink()
            segment.retire()
            log.info("value log GC: removed %s (max ts %d < %d)", segment.path.name, segment.max_ts, ts)
        if removed and self.sync_enabled:
            fsync_dir(self.directory)
        return [s.id for s in removed]

    def close(self) -> None:
        with self._lock:
            segments = list(self._segments.values())
            self._segments.clear()
        for segment in segments:
            if segment is self._active and self.sync_enabled:
                os.fdatasync(segment.fd)
            segment.retire()


def _open_segment(directory: Path, seg_id: int, ts_of: Callable[[bytes], int]) -> Segment:
    path = directory / segment_name(seg_id)
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    size = os.fstat(fd).st_size
    footer_ts = read_footer(fd, size)
    segment = Segment(seg_id, path, fd, data_end=0, max_ts=0, sealed=False)
    if footer_ts is not None and _footer_is_trusted(directory, seg_id):
        segment.data_end, segment.max_ts, segment.sealed = size - FOOTER.size, footer_ts, True
        return segment
    for repair in recover(segment, size, ts_of):
        log.warning("value log recovery: %s", repair)
    return segment


def _footer_is_trusted(directory: Path, seg_id: int) -> bool:
    """Only a segment with a successor was sealed by rotation; the newest one is
    always scanned, since its last bytes could resemble a footer by chance."""
    return (directory / segment_name(seg_id + 1)).exists()


def _create_segment(directory: Path, seg_id: int, sync: bool) -> Segment:
    path = directory / segment_name(seg_id)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    if sync:
        fsync_dir(directory)
    return Segment(seg_id, path, fd, data_end=0, max_ts=0, sealed=False)


def _coalesce(chunks: list[bytes]) -> list[bytes]:
    """Join runs of small chunks (one copy is cheaper than an iovec each); keep
    big payloads as their own iovec so a 100 MB binlog is not copied."""
    out: list[bytes] = []
    run: list[bytes] = []
    for chunk in chunks:
        if len(chunk) < BIG_CHUNK:
            run.append(chunk)
            continue
        if run:
            out.append(b"".join(run))
            run = []
        out.append(chunk)
    if run:
        out.append(b"".join(run))
    return out


def _pwrite_all(fd: int, chunks: list[bytes], offset: int) -> None:
    """pwritev every chunk at ``offset``, resuming after short writes."""
    views = [memoryview(c) for c in _coalesce(chunks) if c]
    i = 0
    while i < len(views):
        written = os.pwritev(fd, views[i : i + IOV_MAX], offset)
        if written <= 0:
            raise OSError("pwritev wrote nothing")
        offset += written
        while i < len(views) and written >= len(views[i]):
            written -= len(views[i])
            i += 1
        if written:
            views[i] = views[i][written:]
