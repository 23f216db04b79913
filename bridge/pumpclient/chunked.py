"""Writing one large transaction's Prewrite to one pump as PrewriteChunk parts.

A DML Prewrite whose ``prewrite_value`` is longer than ``chunk-bytes`` is
written as n PrewriteChunk binlogs (same start_ts, ``chunk`` = 1..n, each
``prewrite_value`` the next part of the changes, see :mod:`bridge.chunking`),
then the Prewrite itself with ``chunks`` = n and the last part. Every one goes
to the same pump, at most ``max-inflight-batches`` parts queued at a time (a
pump stores each part under (start_ts, chunk), so their order of arrival does
not matter), and the Prewrite once every part is durable. A huge transaction
thus holds a bounded share of the pump's write queue: other callers' binlogs
interleave with its parts.

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
# Every Binlog field is a scalar: the final Prewrite copies all but the value.
_OTHER_FIELDS = tuple(f.name for f in binlog_pb2.Binlog.DESCRIPTOR.fields if f.name != "prewrite_value")


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
    for name in _OTHER_FIELDS:  # not ListFields(): it would copy the whole prewrite_value
        if binlog.HasField(name):
            setattr(final, name, getattr(binlog, name))
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
    window: int,
    remaining: Callable[[], float],
    progressed: Callable[[], None],
) -> int:
    """Write ``binlog`` (whose changes are ``value``) to ``node`` in parts; the number of parts.

    Up to ``window`` parts are in the pump's queue at once; the final Prewrite
    leaves once every part is durable. ``remaining()`` is the time left for the
    next binlog; ``progressed()`` is called after each part is durable. Raises
    what :meth:`PumpNode.write` raises (the first failure; the parts still
    queued are withdrawn).
    """
    maker = await asyncio.to_thread(_PartMaker, binlog, value, chunk_bytes)
    in_flight: set[asyncio.Task[None]] = set()

    async def settle(until: int) -> None:
        """Wait until at most ``until`` parts are in flight; raise the first failure."""
        nonlocal in_flight
        while len(in_flight) > until:
            done, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
                metrics.CHUNK_PARTS.inc()
                progressed()

    try:
        while True:
            payload, final = await asyncio.to_thread(maker.next_payload)
            if final:
                await settle(0)
                await node.write(payload, "prewrite", remaining())
                return maker.made
            in_flight.add(asyncio.create_task(node.write(payload, CHUNK_KIND, remaining())))
            del payload
            await settle(window - 1)
    finally:
        for task in in_flight:
            task.cancel()
        if in_flight:
            await asyncio.gather(*in_flight, return_exceptions=True)
