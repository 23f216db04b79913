"""Reading a serialized Binlog's top-level fields without parsing its rows.

A transaction of a million rows is one ``prewrite_value`` of ~100 MB; parsing
the whole Binlog to learn its type and timestamps would copy it. :func:`scan_header`
walks the top-level protobuf fields instead and notes where ``prewrite_value``
lies, so the bytes stay one ``bytes`` object until a sink decodes them. The
drainer's pull streams (:mod:`drainer.collect.pull`) and the chunk assembler
(:mod:`bridge.chunks`) both read binlogs this way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from bridge.binlog import BinlogType
from bridge.errors import ProtocolError
from bridge.proto.binlog_pb2 import Binlog

SCAN_FROM_BYTES = 64 << 10  # larger payloads are scanned, not parsed, so their rows are not copied

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5
_TP, _START_TS, _COMMIT_TS, _PREWRITE_VALUE, _DDL_JOB_ID = 1, 2, 3, 5, 7
_CHUNK, _CHUNKS = 21, 22
PREWRITE_CHUNK = BinlogType.PrewriteChunk


@dataclass(frozen=True, slots=True)
class BinlogHeader:
    """The scalar fields of a serialized Binlog and where ``prewrite_value`` lies (None: not
    located; the payload is small enough to parse again). ``chunk`` is a PrewriteChunk's
    1-based index, ``chunks`` the number of parts before a chunked transaction's Prewrite."""

    tp: int
    start_ts: int
    commit_ts: int
    ddl_job_id: int
    value_span: tuple[int, int] | None
    chunk: int = 0
    chunks: int = 0


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``data[pos:]`` and the position after it."""
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ProtocolError("binlog payload: truncated or overlong varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def int64(value: int) -> int:
    """A varint read as protobuf's (signed) int64."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def scan_header(payload: bytes, *, locate: bool = False) -> BinlogHeader:
    """Read the top-level fields of a serialized Binlog without copying its row data.

    A payload up to :data:`SCAN_FROM_BYTES` is simply parsed (protobuf's C
    parser beats a Python scan there) and its ``value_span`` is None: the
    builder parses it again for its rows — unless ``locate`` asks for the span
    whatever the size. A larger one is walked field by field; the last value
    of a field wins, as in protobuf parsing (a pump appends ``tp = Commit``
    and ``commit_ts`` to the stored Prewrite). Raises :class:`ProtocolError`
    for bytes that are not protobuf wire format.
    """
    if not locate and len(payload) <= SCAN_FROM_BYTES:
        try:
            binlog = Binlog.FromString(payload)
        except DecodeError as exc:
            raise ProtocolError(f"binlog payload: not a binlog.Binlog: {exc}") from None
        return BinlogHeader(
            binlog.tp,
            binlog.start_ts,
            binlog.commit_ts,
            binlog.ddl_job_id,
            None,
            binlog.chunk,
            binlog.chunks,
        )
    scalars = {_TP: 0, _START_TS: 0, _COMMIT_TS: 0, _DDL_JOB_ID: 0, _CHUNK: 0, _CHUNKS: 0}
    span: tuple[int, int] | None = None
    for number, wire, first, last in fields(payload, 0, len(payload), "binlog payload"):
        if wire == VARINT:
            if number in scalars:
                scalars[number] = int64(first)
        elif number == _PREWRITE_VALUE:
            span = (first, last)
    if span is None and locate:
        span = (0, 0)  # no prewrite_value: an empty PrewriteValue
    # int32 fields are sign-extended to 64 bits on the wire; int64() reads them back
    return BinlogHeader(
        scalars[_TP],
        scalars[_START_TS],
        scalars[_COMMIT_TS],
        scalars[_DDL_JOB_ID],
        span,
        scalars[_CHUNK],
        scalars[_CHUNKS],
    )


def fields(data: bytes, pos: int, end: int, where: str) -> Iterator[tuple[int, int, int, int]]:
    """``(number, wire type, value or start, end)`` of each field in ``data[pos:end]``: a varint's
    value (end -1), a length-delimited field's span; fixed-width fields are skipped.
    :class:`ProtocolError` (prefixed with ``where``) for bytes that are not wire format."""
    while pos < end:
        key, pos = varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = varint(data, pos)
            yield number, wire, value, -1
        elif wire == LENGTH:
            length, pos = varint(data, pos)
            if pos + length > end:
                raise ProtocolError(f"{where}: field {number} runs past the end")
            yield number, wire, pos, pos + length
            pos += length
        elif wire in (FIXED64, FIXED32):
            pos += 8 if wire == FIXED64 else 4
        else:
            raise ProtocolError(f"{where}: unsupported wire type {wire} in field {number}")
    if pos != end:
        raise ProtocolError(f"{where}: truncated field")
