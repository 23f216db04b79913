"""Gathering a chunked transaction's parts on disk, in order (binlog.proto ``Binlog.chunk``).

A transaction larger than its producer's ``chunk-bytes`` travels as n
PrewriteChunk binlogs (``chunk`` = 1..n, the same start_ts) followed by the
Prewrite (``chunks`` = n) holding the last part. A pump serves a committed
chunked transaction as its n parts in chunk order, each with commit_ts set
and still typed PrewriteChunk, then the Prewrite re-typed Commit.

:class:`ChunkAssembler` takes one source's stream of them. Each part goes
straight to an unlinked temporary file (:class:`SpilledParts`), so a reader
holds at most one part in memory however large the transaction is; the
final binlog closes the transaction and hands its parts over. Anything out
of order — a gap, a duplicate, a part of another transaction, a final whose
``chunks`` does not match — is a :class:`~bridge.errors.ProtocolError`
naming the source, the timestamps and what is wrong. When the stream breaks
mid-transaction :meth:`ChunkAssembler.reset` drops the parts received (the
source re-sends the transaction from part 1).

The file is unlinked from the start, so a crash leaves nothing behind; it is
closed by :meth:`SpilledParts.close` or, failing that, when the object is
garbage collected. Reads use ``os.pread`` so several threads may read the
parts at once.

A spill file that cannot be created or written (a full disk, a quota, an I/O
error) raises :class:`SpillFailed` naming the spill directory, the source,
the transaction, the bytes gathered so far and the OS error; the assembler
drops the partial file at once (its space goes back) so nothing partial is
handed on, and the source can send the transaction again once there is room.
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from bridge.binlogscan import PREWRITE_CHUNK, BinlogHeader, scan_header
from bridge.errors import BridgeError, ProtocolError


class SpillFailed(BridgeError):
    """A part could not be written to the spill directory (ENOSPC, EDQUOT, EIO, ...).

    Retriable: the disk may be freed, and the source sends the transaction again from part 1.
    ``gathered``: the bytes of the transaction's parts written before the failure;
    ``__cause__`` is the OSError.
    """

    retriable = True

    def __init__(
        self, where: str, spill_dir: Path | None, start_ts: int, commit_ts: int, gathered: int, exc: OSError
    ) -> None:
        directory = str(spill_dir) if spill_dir is not None else f"{tempfile.gettempdir()} (system default)"
        prefix = f"{where}: " if where else ""
        super().__init__(
            f"{prefix}spill-dir {directory}: cannot gather the chunked transaction (start_ts {start_ts}, "
            f"commit_ts {commit_ts}): writing its parts failed after {gathered} bytes gathered: {exc}; "
            "the parts are dropped"
        )
        self.spill_dir = spill_dir
        self.start_ts = start_ts
        self.commit_ts = commit_ts
        self.gathered = gathered
        self.errno = exc.errno


class SpilledParts:
    """The PrewriteChunk binlogs of one transaction, in an unlinked temporary file.

    ``count`` parts of ``size`` bytes in all; :meth:`binlogs` reads each part's
    binlog back as received, :meth:`values` each part's ``prewrite_value`` (a
    serialized PrewriteValue), one at a time, in chunk order.
    """

    __slots__ = (
        "__weakref__",
        "_closer",
        "_file",
        "_spans",
        "_spill_dir",
        "_where",
        "commit_ts",
        "size",
        "start_ts",
    )

    def __init__(
        self, spill_dir: Path | None = None, start_ts: int = 0, commit_ts: int = 0, where: str = ""
    ) -> None:
        """``where`` names the source in a :class:`SpillFailed` (e.g. ``"pump pump-1"``)."""
        self._spill_dir = spill_dir
        self._where = where
        self.size = 0
        self.start_ts = start_ts
        self.commit_ts = commit_ts
        try:
            # closed by close() or the finalizer below, not a with block: the parts outlive this call
            self._file: IO[bytes] = tempfile.TemporaryFile(  # noqa: SIM115
                prefix="chunks-", dir=None if spill_dir is None else str(spill_dir), buffering=0
            )
        except OSError as exc:
            raise SpillFailed(where, spill_dir, start_ts, commit_ts, 0, exc) from exc
        self._closer = weakref.finalize(self, self._file.close)
        # per part: (offset in the file, binlog length, prewrite_value start, end within the binlog)
        self._spans: list[tuple[int, int, int, int]] = []

    @property
    def count(self) -> int:
        return len(self._spans)

    @property
    def closed(self) -> bool:
        return not self._closer.alive

    def append(self, payload: bytes, value_span: tuple[int, int]) -> None:
        """Write one part's binlog; ``value_span`` is where its ``prewrite_value`` lies in it.
        :class:`SpillFailed` when the write fails; the part is then not counted (bytes of it
        already written stay in the file until it is closed)."""
        view = memoryview(payload)
        fd = self._file.fileno()
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(fd, view[written:], self.size + written)
        except OSError as exc:
            raise SpillFailed(
                self._where, self._spill_dir, self.start_ts, self.commit_ts, self.size + written, exc
            ) from exc
        self._spans.append((self.size, len(payload), value_span[0], value_span[1]))
        self.size += len(payload)

    def binlogs(self) -> Iterator[bytes]:
        """Each part's binlog bytes as received (commit_ts set), in chunk order."""
        for offset, length, _, _ in self._spans:
            yield self._read(offset, length)

    def values(self) -> Iterator[bytes]:
        """Each part's ``prewrite_value`` (a serialized PrewriteValue), in chunk order."""
        for offset, _, first, last in self._spans:
            yield self._read(offset + first, last - first)

    def _read(self, offset: int, length: int) -> bytes:
        if self.closed:
            raise ProtocolError(
                f"the parts of the transaction at commit_ts {self.commit_ts} were released before being read"
            )
        fd = self._file.fileno()
        data = os.pread(fd, length, offset)
        if len(data) == length:
            return data
        chunks = [data]
        got = len(data)
        while got < length:
            more = os.pread(fd, length - got, offset + got)
            if not more:
                raise ProtocolError(f"spill file: part at {offset} ends after {got} of {length} bytes")
            chunks.append(more)
            got += len(more)
        return b"".join(chunks)

    def close(self) -> None:
        """Release the file (its space goes back to the disk). Idempotent."""
        self._closer()

    def __repr__(self) -> str:
        return f"SpilledParts(commit_ts={self.commit_ts}, count={self.count}, size={self.size})"


class ChunkAssembler:
    """Gathers the parts of one source's chunked transactions, in order.

    ``where`` names the source in errors (e.g. ``"pump pump-1"``); ``spill_dir``
    is where the temporary files go (None: the system's temporary directory).
    """

    def __init__(self, where: str, spill_dir: Path | None = None) -> None:
        self._where = where
        self._spill_dir = spill_dir
        self._parts: SpilledParts | None = None
        # finished transactions' parts, weakly held: gone once dropped, pruned once closed
        self._handed: weakref.WeakSet[SpilledParts] = weakref.WeakSet()

    @property
    def pending(self) -> int:
        """Parts held for a transaction whose final binlog has not arrived."""
        return 0 if self._parts is None else self._parts.count

    @property
    def live(self) -> int:
        """Finished transactions whose parts are still open (on their way to the sink): a
        reader bounds the disk it uses by waiting while there are too many."""
        for parts in [parts for parts in self._handed if parts.closed]:
            self._handed.discard(parts)
        return len(self._handed)

    @property
    def pending_commit_ts(self) -> int:
        """The commit_ts of the unfinished transaction (0: none)."""
        return 0 if self._parts is None else self._parts.commit_ts

    def add(self, payload: bytes, header: BinlogHeader | None = None) -> None:
        """Take one PrewriteChunk binlog (commit_ts set); ``header``: its :func:`scan_header`
        if already read. :class:`ProtocolError` on a gap, a duplicate or another transaction's part;
        :class:`SpillFailed` when the spill file cannot take it (the parts held are dropped)."""
        if header is None or header.value_span is None:
            header = scan_header(payload, locate=True)
        if header.tp != PREWRITE_CHUNK:
            raise self._error(header, f"binlog type {header.tp} is not a PrewriteChunk")
        if header.start_ts <= 0 or header.commit_ts <= header.start_ts:
            raise self._error(header, "a part needs start_ts > 0 and commit_ts above it")
        parts = self._parts
        if parts is not None and (parts.start_ts, parts.commit_ts) != (header.start_ts, header.commit_ts):
            raise self._error(
                header,
                f"part {header.chunk} arrived while the transaction at start_ts {parts.start_ts}, "
                f"commit_ts {parts.commit_ts} has {parts.count} parts and is not finished",
            )
        expected = 1 if parts is None else parts.count + 1
        if header.chunk != expected:
            what = "a duplicate" if 0 < header.chunk < expected else "out of order"
            raise self._error(header, f"part {header.chunk} is {what}: part {expected} is next")
        if parts is None:
            parts = self._parts = SpilledParts(
                self._spill_dir, header.start_ts, header.commit_ts, self._where
            )
        assert header.value_span is not None
        try:
            parts.append(payload, header.value_span)
        except SpillFailed:
            self.reset()  # the partial file goes at once: its space may be what the disk lacks
            raise

    def finish(self, payload: bytes, header: BinlogHeader | None = None) -> SpilledParts | None:
        """Close the transaction with its final binlog (the Prewrite re-typed Commit): its parts,
        or None for a transaction that came whole (``chunks`` 0 and nothing pending).
        :class:`ProtocolError` when the count or the timestamps do not match the parts."""
        if header is None:
            header = scan_header(payload)
        parts = self._parts
        if parts is None:
            if header.chunks:
                raise self._error(header, f"the final binlog says {header.chunks} parts, none arrived")
            return None
        self._parts = None
        try:
            if (parts.start_ts, parts.commit_ts) != (header.start_ts, header.commit_ts):
                raise self._error(
                    header,
                    f"the transaction at start_ts {parts.start_ts}, commit_ts {parts.commit_ts} "
                    f"has {parts.count} parts but never finished: another transaction's binlog came",
                )
            if header.tp == PREWRITE_CHUNK:
                raise self._error(header, "a PrewriteChunk cannot close a transaction")
            if header.ddl_job_id > 0:
                raise self._error(header, "a DDL binlog is never chunked")
            if header.chunks != parts.count:
                raise self._error(
                    header, f"the final binlog says {header.chunks} parts, {parts.count} arrived"
                )
        except ProtocolError:
            parts.close()
            raise
        self._handed.add(parts)
        return parts

    def reset(self) -> None:
        """Drop a partially received transaction (the stream broke; the source re-sends it)."""
        if self._parts is not None:
            self._parts.close()
            self._parts = None

    def _error(self, header: BinlogHeader, problem: str) -> ProtocolError:
        return ProtocolError(
            f"{self._where}: chunked transaction (start_ts {header.start_ts}, commit_ts "
            f"{header.commit_ts}): {problem}"
        )
