"""One value-log segment file: its record format, reading and crash recovery.

A segment is ``value/NNNNNN.vlog``: records, then a footer once it is sealed.
All integers are **little-endian** (as in the original pump)::

    record := magic u32 = 0x823a56e8 | length u64 | crc32c(payload) u32 | payload
    footer := max_ts u64 | magic u32 = 0x123ab922

``max_ts`` is the largest start_ts or commit_ts of the segment's records: GC
removes a sealed segment once it is older than the GC ts without reading it.
The checksum is CRC32C (Castagnoli) computed by ``google-crc32c`` (C code).
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import google_crc32c

from pump.storage.errors import CorruptLog

RECORD_MAGIC = 0x823A56E8
FOOTER_MAGIC = 0x123AB922
HEADER = struct.Struct("<IQI")
FOOTER = struct.Struct("<QI")
READ_CHUNK = 1 << 20


class Pointer(NamedTuple):
    """Where a record starts (or, as a position, where the next one would)."""

    segment: int
    offset: int


def crc32c(payload: bytes) -> int:
    value: int = google_crc32c.value(payload)
    return value


def encode_header(payload: bytes) -> bytes:
    return HEADER.pack(RECORD_MAGIC, len(payload), crc32c(payload))


class TornRecord(Exception):
    """A record runs past the end of the readable range: a torn write at EOF."""

    def __init__(self, offset: int) -> None:
        super().__init__(offset)
        self.offset = offset


class _ChunkReader:
    """pread through a window of READ_CHUNK bytes, so small records cost no syscall each."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.base = 0
        self.buf = b""

    def read(self, offset: int, size: int) -> bytes:
        start = offset - self.base
        if start >= 0 and start + size <= len(self.buf):
            return self.buf[start : start + size]
        if size >= READ_CHUNK:
            return os.pread(self.fd, size, offset)
        self.base, self.buf = offset, os.pread(self.fd, READ_CHUNK, offset)
        return self.buf[:size]


def iter_records(fd: int, path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, payload) of every record in [start, end), checking each.

    Raises :class:`CorruptLog` on a bad magic or checksum and
    :class:`TornRecord` when a record does not fit before ``end``.
    """
    reader = _ChunkReader(fd)
    pos = start
    while pos < end:
        if end - pos < HEADER.size:
            raise TornRecord(pos)
        header = reader.read(pos, HEADER.size)
        if len(header) < HEADER.size:
            raise TornRecord(pos)
        magic, length, checksum = HEADER.unpack(header)
        if magic != RECORD_MAGIC:
            raise CorruptLog(path, pos, f"bad record magic {magic:#010x}")
        if pos + HEADER.size + length > end:
            raise TornRecord(pos)
        payload = reader.read(pos + HEADER.size, length)
        if len(payload) != length:
            raise TornRecord(pos)
        if crc32c(payload) != checksum:
            raise CorruptLog(path, pos, "CRC32C mismatch")
        yield pos, payload
        pos += HEADER.size + length


def read_record(fd: int, path: Path, offset: int) -> bytes:
    """The payload of the record at ``offset``, checked."""
    header = os.pread(fd, HEADER.size, offset)
    if len(header) < HEADER.size:
        raise CorruptLog(path, offset, "pointer past the end of the segment")
    magic, length, checksum = HEADER.unpack(header)
    if magic != RECORD_MAGIC:
        raise CorruptLog(path, offset, f"bad record magic {magic:#010x}")
    payload = os.pread(fd, length, offset + HEADER.size)
    if len(payload) != length:
        raise CorruptLog(path, offset, "record runs past the end of the segment")
    if crc32c(payload) != checksum:
        raise CorruptLog(path, offset, "CRC32C mismatch")
    return payload


class Segment:
    """An open segment file. ``data_end`` is where its records end (the footer
    starts there once sealed). Readers hold a reference while they read so
    that GC closes the descriptor only after the last read."""

    def __init__(self, seg_id: int, path: Path, fd: int, data_end: int, max_ts: int, sealed: bool) -> None:
        self.id = seg_id
        self.path = path
        self.fd = fd
        self.data_end = data_end
        self.max_ts = max_ts
        self.sealed = sealed
        self._refs = 0
        self._retired = False
        self._lock = threading.Lock()

    @property
    def file_size(self) -> int:
        return self.data_end + (FOOTER.size if self.sealed else 0)

    def acquire(self) -> bool:
        with self._lock:
            if self._retired:
                return False
            self._refs += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._refs -= 1
            close = self._retired and self._refs == 0
        if close:
            os.close(self.fd)

    def retire(self) -> None:
        """Close the descriptor now, or when the last reader releases it."""
        with self._lock:
            self._retired = True
            close = self._refs == 0
        if close:
            os.close(self.fd)

    def seal(self, sync: bool) -> None:
        os.pwrite(self.fd, FOOTER.pack(self.max_ts, FOOTER_MAGIC), self.data_end)
        if sync:
            os.fsync(self.fd)
        self.sealed = True


def read_footer(fd: int, size: int) -> int | None:
    """The footer's max ts when the file ends with a footer, else None."""
    if size < FOOTER.size:
        return None
    max_ts, magic = FOOTER.unpack(os.pread(fd, FOOTER.size, size - FOOTER.size))
    return max_ts if magic == FOOTER_MAGIC else None


def recover(segment: Segment, size: int, ts_of: Callable[[bytes], int]) -> list[str]:
    """Scan an unsealed segment of ``size`` bytes: set its data_end and max_ts,
    detect a footer, truncate a torn last record. Returns what was repaired.

    Raises :class:`CorruptLog` when a damaged record is followed by valid ones:
    that is corruption inside the log, not a torn write.
    """
    max_ts = 0
    try:
        for _, payload in iter_records(segment.fd, segment.path, 0, size):
            max_ts = max(max_ts, ts_of(payload))
    except TornRecord as torn:
        segment.max_ts = max_ts
        return _recover_torn(segment, size, torn.offset)
    except CorruptLog as exc:
        if not _is_zero_tail(segment.fd, exc.offset, size):
            raise
        segment.max_ts = max_ts
        _truncate(segment, exc.offset)
        return [f"{segment.path}: truncated {size - exc.offset} zero bytes at offset {exc.offset}"]
    segment.data_end, segment.max_ts = size, max_ts
    return []


def _recover_torn(segment: Segment, size: int, offset: int) -> list[str]:
    if size - offset == FOOTER.size:
        footer_ts = read_footer(segment.fd, size)
        if footer_ts is not None:
            segment.data_end, segment.sealed = offset, True
            segment.max_ts = max(segment.max_ts, footer_ts)
            return []
    later = _valid_record_after(segment.fd, offset, size)
    if later is not None:
        raise CorruptLog(segment.path, offset, f"damaged record followed by a valid record at offset {later}")
    _truncate(segment, offset)
    return [f"{segment.path}: truncated a torn record of {size - offset} bytes at offset {offset}"]


def _truncate(segment: Segment, offset: int) -> None:
    os.ftruncate(segment.fd, offset)
    os.fsync(segment.fd)
    segment.data_end = offset


def _valid_record_after(fd: int, offset: int, size: int) -> int | None:
    """The offset of a checksum-valid record somewhere in (offset, size), if any."""
    magic = struct.pack("<I", RECORD_MAGIC)
    with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mm:
        pos = mm.find(magic, offset + 1)
        while pos != -1:
            if pos + HEADER.size <= size:
                _, length, checksum = HEADER.unpack(mm[pos : pos + HEADER.size])
                end = pos + HEADER.size + length
                if end <= size and crc32c(mm[pos + HEADER.size : end]) == checksum:
                    return pos
            pos = mm.find(magic, pos + 1)
    return None


def _is_zero_tail(fd: int, offset: int, size: int) -> bool:
    """A machine crash can leave a file extended with zeros that were never written."""
    pos = offset
    while pos < size:
        chunk = os.pread(fd, min(READ_CHUNK, size - pos), pos)
        if not chunk or chunk.count(0) != len(chunk):
            return False
        pos += len(chunk)
    return True
