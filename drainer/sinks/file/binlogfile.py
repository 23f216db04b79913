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
  set), in strictly increasing commit_ts;
- part payload: ``0x03 | commit_ts u64 | binlog``: one part of a transaction
  that travelled in chunks (a ``PrewriteChunk`` binlog as pulled, commit_ts
  set). A chunked transaction is its parts in chunk order, then its event
  record (the final binlog, ``chunks = n``), all with its commit_ts, all in
  one file: a file rotates only between transactions.

A file is rotated once it reaches the size limit, always between
transactions. A crash can leave the last file's last record incomplete (a
*torn tail*), or end it with the parts of a transaction whose event record
was never written: the writer truncates both at open (so the transaction is
written again, whole), the reader stops before them. A bad record anywhere
else is corruption and raises :class:`~bridge.errors.ProtocolError`.

Only what a crash can leave is a torn tail: an incomplete record head or
payload, a record that is not one (no magic, an impossible length) or one
whose CRC32C fails. A record that is whole and checks (magic, length and CRC
all good) was written completely, so it is never truncated, in any file:

- of a kind other than 1, 2, 3 it was written by a newer binlog-bridge (a
  later format adds kinds): :class:`UnknownRecordKind`, a ProtocolError
  naming the kind, the offset and the file; the writer refuses to open the
  directory instead of cutting the newer data off;
- a header that is not first, or a first record that is not a header, is
  corruption (ProtocolError), not a torn tail.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import google_crc32c

from bridge.binlog import parse_binlog, read_schema_change
from bridge.chunks import ChunkAssembler, SpilledParts
from bridge.errors import ProtocolError
from bridge.proto import row_pb2
from bridge.sink.schema import SchemaTracker

log = logging.getLogger(__name__)

MAGIC = 0x42424631
RECORD_HEAD = struct.Struct(">IQI")
KIND_HEADER = 1
KIND_EVENT = 2
KIND_PART = 3
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


def encode_parts(kind: int, commit_ts: int, binlog: bytes) -> tuple[bytes, bytes]:
    """An event or part record as (head + kind + commit_ts, binlog): written one after the
    other, so a large binlog is never copied into a record."""
    prefix = bytes((kind,)) + _TS.pack(commit_ts)
    crc = google_crc32c.extend(google_crc32c.value(prefix), binlog)
    return RECORD_HEAD.pack(MAGIC, len(prefix) + len(binlog), crc) + prefix, binlog


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


class UnknownRecordKind(ProtocolError):
    """A whole record (its CRC32C checks) of a kind this version does not know: the file was
    written by a newer binlog-bridge. Never a torn tail, so never truncated."""

    def __init__(self, path: Path, offset: int, kind: int) -> None:
        super().__init__(
            f"binlog file {path}: record kind {kind} at offset {offset} is unknown to this version "
            f"(it knows kinds {KIND_HEADER}-{KIND_PART}): the file was written by a newer "
            "binlog-bridge; read it with that version (the file is left as it is)"
        )
        self.path = path
        self.offset = offset
        self.kind = kind


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    return data if len(data) == size else b""


def iter_records(path: Path) -> Iterator[Record]:
    """The records of one file; raises :class:`TornTail` where they stop being well-formed
    (what a crash can leave) and :class:`ProtocolError` at a whole record that is wrong
    (:class:`UnknownRecordKind`: a newer version's)."""
    with path.open("rb") as stream:
        offset = 0
        while True:
            head = stream.read(RECORD_HEAD.size)
            if not head:
                return
            if len(head) < RECORD_HEAD.size:
                raise TornTail(offset, "incomplete record header")
            magic, length, crc = RECORD_HEAD.unpack(head)
            if magic != MAGIC or length < 1 or length > MAX_RECORD:
                raise TornTail(offset, f"no record at offset {offset}")
            payload = _read_exact(stream, length)
            if not payload:
                raise TornTail(offset, "incomplete record payload")
            if google_crc32c.value(payload) != crc:
                raise TornTail(offset, f"record at offset {offset} fails its CRC32C")
            # From here the record is whole: whatever is wrong with it, a crash did not do it.
            kind = payload[0]
            if kind not in (KIND_HEADER, KIND_EVENT, KIND_PART):
                raise UnknownRecordKind(path, offset, kind)
            if (kind == KIND_HEADER) != (offset == 0) or length < 1 + _TS.size:
                what = (
                    f"a {length}-byte record of kind {kind}"
                    if length < 1 + _TS.size
                    else "a header after the first record"
                    if kind == KIND_HEADER
                    else f"the first record is of kind {kind}, not a header"
                )
                raise ProtocolError(
                    f"binlog file {path}: corrupt at offset {offset}: {what} (its CRC32C checks, so "
                    "it is no torn tail; the file is left as it is)"
                )
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
    header's snapshot + the DDLs after it) and ``last_ts``. A whole record it
    cannot use (a newer version's kind, a misplaced header) raises
    :class:`~bridge.errors.ProtocolError` and nothing is truncated.
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
        cut: int | None = None  # where a torn tail or an unfinished chunked transaction starts
        parts_from: int | None = None  # offset of the first part of a transaction not finished yet
        parts = 0
        try:
            for record in iter_records(path):
                if record.kind == KIND_HEADER:
                    header = record
                    self.tracker = SchemaTracker.restore(record.data)
                    self.last_ts = record.commit_ts
                elif record.kind == KIND_PART:
                    parts_from = end if parts_from is None else parts_from
                    parts += 1
                else:
                    apply_ddl_record(self.tracker, record.data)
                    self.last_ts = record.commit_ts
                    parts_from, parts = None, 0
                end = record.end
        except TornTail as torn:
            log.warning("binlog file %s: torn tail at offset %d (%s); truncating", path, torn.offset, torn)
            cut = torn.offset
        if parts_from is not None:
            log.warning(
                "binlog file %s: ends with %d parts of a transaction whose last binlog was never "
                "written; truncating at offset %d (the transaction is written again whole)",
                path,
                parts,
                parts_from,
            )
            cut = end = parts_from
        if cut is not None:
            with path.open("r+b") as stream:
                stream.truncate(cut)
                os.fsync(stream.fileno())
        return end, header

    def append(
        self,
        commit_ts: int,
        binlog: bytes,
        change: row_pb2.SchemaChange | None = None,
        parts: Iterable[bytes] = (),
    ) -> None:
        """Store one event; ``change`` is its schema change when it is a DDL; ``parts`` the
        PrewriteChunk binlogs of a transaction that travelled in chunks, stored before it in
        the same file. Whatever fails (a write, reading a part) leaves nothing of the event."""
        if self._stream is None or self._size >= self.max_file_size:
            self._rotate()
        stream = self._stream
        assert stream is not None
        written = 0
        try:
            for part in parts:
                written += self._write(stream, KIND_PART, commit_ts, part)
            written += self._write(stream, KIND_EVENT, commit_ts, binlog)
            stream.flush()
        except BaseException:
            # No partial record or transaction stays behind; the seek matters for a file this
            # writer created (not opened for appending), where writes go at the position.
            stream.truncate(self._size)
            stream.seek(self._size)
            raise
        self._size += written
        if change is not None:
            self.tracker.apply(change)
        self.last_ts = commit_ts

    @staticmethod
    def _write(stream: BinaryIO, kind: int, commit_ts: int, binlog: bytes) -> int:
        head, data = encode_parts(kind, commit_ts, binlog)
        stream.write(head)
        stream.write(data)
        return len(head) + len(data)

    def _rotate(self) -> None:
        if self._stream is not None:
            self.sync()
            self._stream.close()
            self._stream = None  # a new file that cannot be made leaves no closed stream behind
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
    """One stored event; ``parts``: the spilled parts of a chunked transaction (the reader's
    caller closes them, or the garbage collector does)."""

    commit_ts: int
    binlog: bytes
    path: Path
    parts: SpilledParts | None = None


class BinlogFileReader:
    """Reads a directory's events in order from the file holding a starting commit_ts."""

    def __init__(self, directory: Path, spill_dir: Path | None = None) -> None:
        self.directory = directory
        self.spill_dir = spill_dir  # where the parts of chunked transactions are gathered
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

    def events(self, first_file: int = 0, parts: bool = True) -> Iterator[StoredEvent]:
        """The events from file ``first_file`` on. A chunked transaction's parts are gathered
        on disk (:class:`bridge.chunks.ChunkAssembler`, one part in memory at a time) and come
        with its event; ``parts=False`` skips them (for callers after commit_ts or DDLs only).
        Parts that end the last file without their event (a crash while they were written)
        are dropped; anywhere else that is corruption."""
        last = len(self.files) - 1
        for position in range(first_file, len(self.files)):
            path = self.files[position][1]
            assembler = ChunkAssembler(f"binlog file {path}", self.spill_dir)
            held = 0
            try:
                for record in read_file(path, last=position == last):
                    if record.kind == KIND_PART:
                        held += 1
                        if parts:
                            assembler.add(record.data)
                    elif record.kind == KIND_EVENT:
                        spilled = assembler.finish(record.data) if parts else None
                        held = 0
                        yield StoredEvent(record.commit_ts, record.data, path, spilled)
                if held and position != last:
                    raise ProtocolError(
                        f"binlog file {path}: ends with {held} parts of a transaction whose last "
                        "binlog is not there (corrupt: a transaction never spans two files)"
                    )
                if held:
                    log.warning(
                        "binlog file %s: ends with %d parts of an unfinished transaction (a crash "
                        "while it was written); not read",
                        path,
                        held,
                    )
            finally:
                assembler.reset()
