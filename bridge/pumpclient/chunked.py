"""Writing one large transaction's Prewrite to one pump as PrewriteChunk parts.

A DML Prewrite whose ``prewrite_value`` is longer than ``chunk-bytes`` is
written as n PrewriteChunk binlogs (same start_ts, ``chunk`` = 1..n, each
``prewrite_value`` the next part of the changes, see :mod:`bridge.chunking`),
then the Prewrite itself with ``chunks`` = n and the last part. Every one goes
to the same pump, one at a time: part k+1 leaves when part k is durable, so the
pump receives them in order and a huge transaction holds at most one slot of
the pump's write queue - other callers' binlogs interleave with its parts.

Parts are made one ahead of the one being written (the last part must be known
before it is sent, as it travels in the Prewrite), and each is serialized just
before it leaves, so beside the caller's transaction and its parsed copy the
client holds about two parts. Making a part is a Python loop over its rows; it
runs in a worker thread so that the event loop keeps serving other callers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

from google.protobuf.message import DecodeError

from bridge.chunking import iter_prewrite_parts
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2
from bridge.pumpclient import metrics
from bridge.pumpclient.node import PumpNode

PREWRITE_CHUNK = binlog_pb2.PrewriteChunk
CHUNK_KIND = "prewritechunk"  # the metrics label, as client._KINDS names the type


def needs_chunks(binlog: binlog_pb2.Binlog, chunk_bytes: int) -> bool:
    """True for a DML Prewrite whose row changes are longer than ``chunk_bytes`` (0 = never)."""
    return (
        chunk_bytes > 0
        and binlog.tp == binlog_pb2.Prewrite
        and binlog.ddl_job_id == 0
        and binlog.chunks == 0  # a caller that wrote its own parts
        and len(binlog.prewrite_value) > chunk_bytes
    )


def parse_value(binlog: binlog_pb2.Binlog) -> binlog_pb2.PrewriteValue:
    """The Prewrite's changes; ProtocolError when they are not a PrewriteValue (a pump would refuse them)."""
    try:
        return binlog_pb2.PrewriteValue.FromString(binlog.prewrite_value)
    except DecodeError as exc:
        raise ProtocolError(
            f"the prewrite binlog of start_ts {binlog.start_ts} cannot be split into parts: "
            f"prewrite_value is not a binlog.PrewriteValue: {exc}"
        ) from None


def _final_binlog(binlog: binlog_pb2.Binlog, chunks: int, last: bytes) -> bytes:
    """``binlog`` with ``chunks`` and the last part as its value, without copying its whole value."""
    final = binlog_pb2.Binlog()
    for field, value in binlog.ListFields():
        if field.name != "prewrite_value":
            setattr(final, field.name, value)
    if chunks:
        final.chunks = chunks
    final.prewrite_value = last
    return final.SerializeToString()


class _PartMaker:
    """Serialized PrewriteChunk payloads, one at a time, and at the end the final Prewrite."""

    def __init__(self, binlog: binlog_pb2.Binlog, value: binlog_pb2.PrewriteValue, chunk_bytes: int) -> None:
        self._binlog = binlog
        self._parts: Iterator[binlog_pb2.PrewriteValue] = iter_prewrite_parts(value, chunk_bytes)
        self._ahead: binlog_pb2.PrewriteValue | None = next(self._parts)
        self.made = 0  # PrewriteChunk payloads handed out

    def next_payload(self) -> tuple[bytes, bool]:
        """The next payload to write and whether it is the final Prewrite."""
        current = self._ahead
        assert current is not None, "next_payload after the final Prewrite"
        self._ahead = next(self._parts, None)
        serialized = current.SerializeToString()
        del current
        if self._ahead is None:
            return _final_binlog(self._binlog, self.made, serialized), True
        self.made += 1
        part = binlog_pb2.Binlog(
            tp=PREWRITE_CHUNK, start_ts=self._binlog.start_ts, chunk=self.made, prewrite_value=serialized
        )
        return part.SerializeToString(), False


async def write_chunked(
    node: PumpNode,
    binlog: binlog_pb2.Binlog,
    value: binlog_pb2.PrewriteValue,
    chunk_bytes: int,
    remaining: Callable[[], float],
    progressed: Callable[[], None],
) -> int:
    """Write ``binlog`` (whose changes are ``value``) to ``node`` in parts; the number of parts.

    ``remaining()`` is the time left for the next binlog; ``progressed()`` is
    called after each part is durable. Raises what :meth:`PumpNode.write`
    raises; PumpUnavailable when the time is up between parts.
    """
    maker = await asyncio.to_thread(_PartMaker, binlog, value, chunk_bytes)
    while True:
        payload, final = await asyncio.to_thread(maker.next_payload)
        await node.write(payload, "prewrite" if final else CHUNK_KIND, remaining())
        del payload
        if final:
            return maker.made
        metrics.CHUNK_PARTS.inc()
        progressed()
