"""Binlog files: the file sink's format, read back by ``binlog-bridge replay``.

A directory holds ``binlog-0000000001.bbf``, ``binlog-0000000002.bbf``, ...
Each file is a sequence of records::

    magic u32 = 0x42424631 ("BBF1") | length u64 | CRC32C(payload) u32 | payload

all big-endian. The first record of every file is its **header**, the rest
are **events**:

- header payload: ``0x01 | prev_ts u64 | schema snapshot``: ``prev_ts`` is
  the highest commit_ts stored before this file (every event in it is
  above), the snapshot (:meth:`bridge.sink.schema.SchemaTracker.snapshot`) is
  every table schema valid at that point, so a file decodes on its own;
- event payload: ``0x02 | commit_ts u64 | binlog``: the transaction's or
  DDL's binlog bytes as pulled from the pump (``tp = Commit``, commit_ts
  set), in strictly increasing commit_ts.

A file is rotated once it reaches the size limit, always between records. A
crash can leave the last file's last record incomplete (a *torn tail*): the
writer truncates it at open, the reader stops before it. A bad record
anywhere else is corruption and raises :class:`~bridge.errors.ProtocolError`.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import google_crc32c

from bridge.binlog import parse_binlog, read_schema_change
from bridge.errors import ProtocolError
from bridge.proto import row_pb2
from bridge.sink.schema import SchemaTracker

log = logging.getLogger(__name__)

MAGIC = 0x42424631
RECORD_HEAD = struct.Struct(">IQI")
KIND_HEADER = 1
KIND_EVENT = 2
_TS = struct.Struct(">Q")
_NAME = re.compile(r"^binlog-(\d{10})\.bbf$")
MAX_RECORD = 1 << 36  # a length beyond this is garbage, not a record


def file_name(index: int) -> str:
    return f"binlog-{index:010d}.bbf"


def list_files(directory: Path) -> list[tuple[int, Path]]:
    """The binlog files in ``directory``, by index."""
    if not directory.is_dir():
        return []
    found = [(int(m[1]), p) for p in directory.iterdir() if (m := _NAME.match(p.name))]
    return sorted(found)


def encode_record(payload: bytes) -> bytes:
    return RECORD_HEAD.pack(MAGIC, len(payload), google_crc32c.value(payload)) + payload


def header_payload(prev_ts: int, snapshot: bytes) -> bytes:
    return bytes((KIND_HEADER,)) + _TS.pack(prev_ts) + snapshot


def event_payload(commit_ts: int, binlog: bytes) -> bytes:
    return bytes((KIND_EVENT,)) + _TS.pack(commit_ts) + binlog


@dataclass(frozen=True, slots=True)
class Record:
    kind: int
    commit_ts: int  # the header's prev_ts for a header
    data: bytes  # snapshot (header) or binlog (event)
    end: int  # file offset just past this record


class TornTail(Exception):
    """The records of a file stop at ``offset`` with an incomplete or failing record."""

    def __init__(self, offset: int, why: str) -> None:
        super().__init__(why)
        self.offset = offset


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    return data if len(data) == size else b""


def iter_records(path: Path) -> Iterator[Record]:
    """The records of one file; raises :class:`TornTail` where they stop being well-formed."""
    with path.open("rb") as stream:
        offset = 0
        while True:
            head = stream.read(RECORD_HEAD.size)
            if not head:
                return
            if len(head) < RECORD_HEAD.size:
                raise TornTail(offset, "incomplete record header")
            magic, length, crc = RECORD_HEAD.unpack(head)
            if magic != MAGIC or length < 1 + _TS.size or length > MAX_RECORD:
                raise TornTail(offset, f"no record at offset {offset}")
            payload = _read_exact(stream, length)
            if not payload:
                raise TornTail(offset, "incomplete record payload")
            if google_crc32c.value(payload) != crc:
                raise TornTail(offset, f"record at offset {offset} fails its CRC32C")
            kind = payload[0]
            if kind not in (KIND_HEADER, KIND_EVENT) or (kind == KIND_HEADER) != (offset == 0):
                raise TornTail(offset, f"record of kind {kind} at offset {offset}")
            offset += RECORD_HEAD.size + length
            (ts,) = _TS.unpack_from(payload, 1)
            yield Record(kind, ts, payload[1 + _TS.size :], offset)


def read_file(path: Path, last: bool) -> Iterator[Record]:
    """Records of ``path``: a torn tail ends the last file quietly and is corruption elsewhere."""
    try:
        yield from iter_records(path)
    except TornTail as torn:
        if not last:
            raise ProtocolError(f"binlog file {path}: corrupt at offset {torn.offset}: {torn}") from None
        log.warning("binlog file %s: stopping at offset %d: %s (torn tail)", path, torn.offset, torn)


def apply_ddl_record(tracker: SchemaTracker, binlog: bytes) -> row_pb2.SchemaChange | None:
    """Apply a stored binlog's schema change to ``tracker``; ``None`` for a DML binlog."""
    parsed = parse_binlog(binlog, deep=False)
    if parsed.ddl_job_id <= 0:
        return None
    change = read_schema_change(parsed)
    if change is not None:
        tracker.apply(change)
    return change


class BinlogFileWriter:
    """Appends event records, rotating by size; see the module docstring.

    :meth:`open` recovers the directory: truncates a torn tail, drops a last
    file without a complete header, and rebuilds the schema state (last
    header's snapshot + the DDLs after it) and ``last_ts``.
    """

    def __init__(self, directory: Path, max_file_size: int) -> None:
        self.directory = directory
        self.max_file_size = max_file_size
        self.tracker = SchemaTracker()
        self.last_ts = 0
        self._index = 0
        self._stream: BinaryIO | None = None
        self._size = 0

    def open(self, snapshot: bytes = b"") -> int:
        """Recover and return the highest commit_ts stored; ``snapshot`` seeds an empty directory."""
        self.directory.mkdir(parents=True, exist_ok=True)
        files = list_files(self.directory)
        while files:
            index, path = files[-1]
            end, header = self._recover(path)
            if header is not None:
                self._index, self._size = index, end
                self._stream = path.open("ab")
                return self.last_ts
            log.warning("binlog file %s has no complete header; removing it", path)
            path.unlink()
            files.pop()
        self.tracker = SchemaTracker.restore(snapshot)
        return self.last_ts

    def _recover(self, path: Path) -> tuple[int, Record | None]:
        header: Record | None = None
        end = 0
        try:
            for record in iter_records(path):
                if record.kind == KIND_HEADER:
                    header = record
                    self.tracker = SchemaTracker.restore(record.data)
                    self.last_ts = record.commit_ts
                else:
                    apply_ddl_record(self.tracker, record.data)
                    self.last_ts = record.commit_ts
                end = record.end
        except TornTail as torn:
            log.warning("binlog file %s: torn tail at offset %d (%s); truncating", path, torn.offset, torn)
            with path.open("r+b") as stream:
                stream.truncate(torn.offset)
                os.fsync(stream.fileno())
        return end, header

    def append(self, commit_ts: int, binlog: bytes, change: row_pb2.SchemaChange | None = None) -> None:
        """Store one event; ``change`` is its schema change when it is a DDL."""
        if self._stream is None or self._size >= self.max_file_size:
            self._rotate()
        assert self._stream is not None
        record = encode_record(event_payload(commit_ts, binlog))
        try:
            self._stream.write(record)
            self._stream.flush()
        except OSError:
            self._stream.truncate(self._size)  # no partial record stays behind a failed write
            raise
        self._size += len(record)
        if change is not None:
            self.tracker.apply(change)
        self.last_ts = commit_ts

    def _rotate(self) -> None:
        if self._stream is not None:
            self.sync()
            self._stream.close()
        self._index += 1
        path = self.directory / file_name(self._index)
        self._stream = path.open("xb")
        header = encode_record(header_payload(self.last_ts, self.tracker.snapshot()))
        self._stream.write(header)
        self._size = len(header)
        self.sync()
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)  # the new file's name is durable too
        finally:
            os.close(fd)

    def sync(self) -> None:
        if self._stream is not None:
            self._stream.flush()
            os.fsync(self._stream.fileno())

    def close(self) -> None:
        if self._stream is not None:
            self.sync()
            self._stream.close()
            self._stream = None


@dataclass(frozen=True, slots=True)
class StoredEvent:
    commit_ts: int
    binlog: bytes
    path: Path


class BinlogFileReader:
    """Reads a directory's events in order from the file holding a starting commit_ts."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.files = list_files(directory)

    def start(self, start_ts: int) -> tuple[int, bytes]:
        """Where reading for ``start_ts`` begins: (position in :attr:`files`, that file's snapshot).

        The file is the last one whose header's ``prev_ts`` is below ``start_ts``.
        """
        chosen, snapshot = 0, b""
        for position, (_, path) in enumerate(self.files):
            header = next(read_file(path, last=position == len(self.files) - 1), None)
            if header is None:
                break
            if position and header.commit_ts >= start_ts:
                break
            chosen, snapshot = position, header.data
        return chosen, snapshot

    def events(self, first_file: int = 0) -> Iterator[StoredEvent]:
        last = len(self.files) - 1
        for position in range(first_file, len(self.files)):
            path = self.files[position][1]
            for record in read_file(path, last=position == last):
                if record.kind == KIND_EVENT:
                    yield StoredEvent(record.commit_ts, record.data, path)
