"""One PullBinlogs stream per pump, reconnecting until the pump is let go.

A :class:`PumpPuller` asks its pump for everything after its source's
position in the merge (:meth:`drainer.merger.MergeFeed.position`: the
highest of the last transaction and the last watermark received) and feeds
each stream message's entities to the merge. When the stream breaks (the
pump restarted, was SIGKILLed, the network failed) it reconnects with
backoff from the position it reached, so nothing is asked for twice except
what a pump re-sends on its own, which the merger drops.

A pump the drainer cannot pull is never skipped: it may hold committed
transactions, so the merge waits for its watermark. When no stream has
delivered anything for ``unreachable_after`` seconds (the drainer's
``pump-unreachable-timeout``) the puller marks the pump *unreachable* in
``/status`` and logs, once, that the merge waits for it and how to let it go
(``binlog-bridge ctl offline`` when it is gone for good); it logs again when
the pump answers.

A spill directory that cannot take a chunked transaction's parts (a full
disk, a quota, an I/O error: :class:`~bridge.chunks.SpillFailed`) fails the
stream like a broken connection, not the drainer: the error (spill-dir,
start_ts/commit_ts, the bytes gathered, the OS error) becomes the pump's
``last_error`` in ``/status``, counts as ``bridge_drainer_errors_total{where="spill"}``
and is logged as pull errors are; the partial spill file is dropped, nothing
of the transaction reaches the merge, and the stream is asked again after
its backoff from the last complete transaction (the disk may have been freed).

An entity is read without parsing the whole binlog: :func:`scan_header`
walks the top-level protobuf fields of the payload and notes where
``prewrite_value`` lies, so a transaction of a million rows is held as one
``bytes`` object until the sink decodes it. ``Entity.meta`` is used when
present (this project's pumps set it); the original pump's entities carry
only the payload, which is enough.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import google_crc32c
import grpc
from google.protobuf.message import DecodeError

from bridge.binlog import BinlogType
from bridge.binlogscan import LENGTH, PREWRITE_CHUNK, VARINT, fields, int64

# re-exported: tests, bench and replay read binlog headers through here
from bridge.binlogscan import SCAN_FROM_BYTES as SCAN_FROM_BYTES
from bridge.binlogscan import BinlogHeader as BinlogHeader
from bridge.binlogscan import scan_header as scan_header
from bridge.chunks import ChunkAssembler, SpillFailed
from bridge.errors import ProtocolError
from bridge.grpcutil import DEFAULT_MAX_MESSAGE_BYTES, SecurityConfig, aio_channel
from bridge.proto import pump_pb2
from bridge.retry import Backoff
from drainer import metrics
from drainer.collect.merger import MergeFeed, PulledItem, PulledTxn

log = logging.getLogger(__name__)

INITIAL_BACKOFF = 0.1
MAX_BACKOFF = 2.0
ERROR_LOG_EVERY = 10.0  # seconds between repeated "cannot pull" warnings for one pump
UNREACHABLE_AFTER = 30.0  # default pump-unreachable-timeout, seconds
# Chunked transactions of one pump whose parts may be on disk at once (in the merge, built or in
# the sink's hands): the puller waits, polling every SPILL_WAIT seconds, while there are more.
MAX_SPILLED_TXNS = 16
SPILL_WAIT = 0.05
PULL_METHOD = "/binlog.Pump/PullBinlogs"
_CHUNKED_TXNS = metrics.CHUNKED_TXNS
_SPILLED_BYTES = metrics.SPILLED_BYTES


def entity_item(
    entity: pump_pb2.Entity, pump: str, chunks: ChunkAssembler | None = None
) -> PulledItem | None:
    """A transaction or a watermark (int) from one Entity; :class:`ProtocolError` naming the pump.

    A chunked transaction's part goes to ``chunks`` (None returned); its final binlog comes
    back as the transaction with its parts. Without ``chunks`` a part is refused."""
    meta = (entity.meta.startTs, entity.meta.commitTs) if entity.HasField("meta") else None
    return _item(entity.payload, entity.checksum, entity.pos.offset, meta, pump, chunks)


def _item(
    payload: bytes,
    checksum: bytes,
    offset: int,
    meta: tuple[int, int] | None,
    pump: str,
    chunks: ChunkAssembler | None,
) -> PulledItem | None:
    if checksum:
        crc: int = google_crc32c.value(payload)
        if crc.to_bytes(4, "big") != checksum:
            raise ProtocolError(f"pump {pump}: entity at offset {offset} fails its CRC32C checksum")
    header = scan_header(payload)
    if header.tp == BinlogType.Rollback and header.start_ts == header.commit_ts > 0:
        if chunks is not None and chunks.pending:
            # nothing at or above the unfinished transaction is passed until its last part came
            return min(header.commit_ts, chunks.pending_commit_ts - 1)
        return header.commit_ts
    if header.commit_ts <= header.start_ts or header.start_ts <= 0:
        raise ProtocolError(
            f"pump {pump}: pulled binlog (start_ts {header.start_ts}, commit_ts {header.commit_ts}) "
            "is neither a committed transaction nor a watermark"
        )
    if meta is not None and (meta[1], meta[0]) != (header.commit_ts, header.start_ts):
        raise ProtocolError(
            f"pump {pump}: entity meta says commit_ts {meta[1]}, its binlog says {header.commit_ts}"
        )
    if chunks is None:
        if header.tp == PREWRITE_CHUNK or header.chunks:
            raise ProtocolError(
                f"pump {pump}: a chunked transaction (commit_ts {header.commit_ts}) where none is read"
            )
        parts = None
    elif header.tp == PREWRITE_CHUNK:
        chunks.add(payload, header)
        _SPILLED_BYTES.inc(len(payload))
        return None
    else:
        parts = chunks.finish(payload, header)
        if parts is not None:
            _CHUNKED_TXNS.inc()
    return PulledTxn(
        header.start_ts, header.commit_ts, payload, header.ddl_job_id > 0, header.value_span, parts
    )


def response_items(
    response: pump_pb2.PullBinlogResp, pump: str, chunks: ChunkAssembler | None = None
) -> list[PulledItem]:
    """The items of one stream message, whichever of ``entity``/``entities`` carries them."""
    entities = list(response.entities)
    if not entities and response.HasField("entity"):
        entities = [response.entity]
    items = (entity_item(e, pump, chunks) for e in entities)
    return [item for item in items if item is not None]


def message_items(raw: bytes, pump: str, chunks: ChunkAssembler | None = None) -> list[PulledItem]:
    """The items of one stream message as received (a serialized ``PullBinlogResp``).

    A small message is parsed. A larger one is walked field by field, so that a large
    transaction's payload is copied once out of the message, not first into protobuf's own
    copy of the whole message and then out of that: at a million rows that is ~100 MB less
    at the moment the drainer receives it. Of a large message's entities, the small ones (many
    transactions batched into one message) are parsed, each on its own."""
    if len(raw) <= SCAN_FROM_BYTES:
        try:
            response = pump_pb2.PullBinlogResp.FromString(raw)
        except DecodeError as exc:
            raise ProtocolError(f"pump {pump}: stream message is not a PullBinlogResp: {exc}") from None
        return response_items(response, pump, chunks)
    single: tuple[int, int] | None = None
    entities: list[tuple[int, int]] = []
    for number, wire, start, end in fields(raw, 0, len(raw), f"pump {pump}: stream message"):
        if wire == LENGTH and number == 1:
            single = (start, end)
        elif wire == LENGTH and number == 2:
            entities.append((start, end))
    spans = entities or ([single] if single is not None else [])
    items = (
        _scanned_entity(raw, start, end, pump, chunks)
        if end - start > SCAN_FROM_BYTES
        else _parsed_entity(raw, start, end, pump, chunks)
        for start, end in spans
    )
    return [item for item in items if item is not None]


def _parsed_entity(
    raw: bytes, start: int, end: int, pump: str, chunks: ChunkAssembler | None
) -> PulledItem | None:
    """One small ``Entity`` of a large message, parsed by protobuf (several times cheaper than
    walking it; only large entities are worth not copying)."""
    try:
        entity = pump_pb2.Entity.FromString(cast(bytes, memoryview(raw)[start:end]))
    except DecodeError as exc:
        raise ProtocolError(f"pump {pump}: stream message entity is not an Entity: {exc}") from None
    return entity_item(entity, pump, chunks)


def _scanned_entity(
    raw: bytes, start: int, end: int, pump: str, chunks: ChunkAssembler | None
) -> PulledItem | None:
    """One ``Entity`` at ``raw[start:end]``: pos (1), payload (2), checksum (3), meta (4)."""
    where = f"pump {pump}: stream message entity"
    payload, checksum, offset = b"", b"", 0
    meta: tuple[int, int] | None = None
    for number, wire, first, last in fields(raw, start, end, where):
        if wire != LENGTH:
            continue
        if number == 2:
            payload = raw[first:last]
        elif number == 3:
            checksum = raw[first:last]
        elif number == 1:
            for n, w, value, _ in fields(raw, first, last, where):
                if n == 2 and w == VARINT:
                    offset = int64(value)
        elif number == 4:
            meta = (0, 0)
            for n, w, value, _ in fields(raw, first, last, where):
                if w == VARINT and n in (1, 2):
                    meta = (int64(value), meta[1]) if n == 1 else (meta[0], int64(value))
    return _item(payload, checksum, offset, meta, pump, chunks)


def _raw(data: bytes) -> bytes:
    return data


@dataclass
class PullerStatus:
    """What ``/status`` shows of one pump's stream."""

    addr: str
    connected: bool = False
    connects: int = 0
    messages: int = 0
    last_error: str = ""
    last_error_at: float = 0.0
    unreachable: bool = False  # nothing pulled for unreachable_after seconds: the merge waits for it
    pending_parts: int = 0  # parts of a chunked transaction received, its final binlog not yet


class PumpPuller:
    """Pulls one pump into the merge until cancelled; reconnects on any stream failure.

    A :class:`ProtocolError` (an entity that is not a binlog, a checksum
    that does not match) is not retried: :meth:`run` raises it, naming the pump.
    A :class:`SpillFailed` is retried like a broken stream (see the module docstring).
    """

    def __init__(
        self,
        name: str,
        addr: str,
        cluster_id: int,
        feed: MergeFeed,
        security: SecurityConfig | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        unreachable_after: float = UNREACHABLE_AFTER,
        spill_dir: Path | None = None,
    ) -> None:
        """``spill_dir``: where the parts of chunked transactions are gathered (unlinked files)."""
        self.name = name
        self._chunks = ChunkAssembler(f"pump {name}", spill_dir)
        self._unreachable_after = unreachable_after
        self._delivered_at = time.monotonic()  # the last time a stream delivered (or the start)
        self.status = PullerStatus(addr)
        self._cluster_id = cluster_id
        self._feed = feed
        self._security = security
        self._max_message_bytes = max_message_bytes
        self._last_warning = 0.0

    @property
    def addr(self) -> str:
        return self.status.addr

    async def run(self) -> None:
        backoff = Backoff(INITIAL_BACKOFF, MAX_BACKOFF)
        channel = aio_channel(self.addr, self._security, self._max_message_bytes)
        try:
            # Stream messages come raw: message_items reads them (see there why).
            pull = channel.unary_stream(
                PULL_METHOD,
                request_serializer=pump_pb2.PullBinlogReq.SerializeToString,
                response_deserializer=_raw,
            )
            while True:
                after = self._feed.position(self.name)
                try:
                    if await self._pull(pull, after):
                        backoff.reset()
                except grpc.aio.AioRpcError as exc:
                    self._failed(f"{exc.code().name}: {exc.details() or 'no details'}", after)
                except SpillFailed as exc:  # _pull dropped the partial parts; retried after the backoff
                    self._failed(str(exc), after, where="spill")
                else:
                    self._failed("the pump ended the stream", after)
                await backoff.sleep()
        finally:
            self.status.connected = False
            await channel.close()

    async def _pull(self, pull: Any, after: int) -> bool:
        """One stream from ``after``; True if it delivered anything."""
        request = pump_pb2.PullBinlogReq(clusterID=self._cluster_id, startFrom=pump_pb2.Pos(offset=after))
        call = pull(request)
        delivered = False
        try:
            async for raw in call:
                self._delivered_at = time.monotonic()
                if not delivered:
                    delivered = True
                    self._reachable_again()
                    self.status.connected = True
                    self.status.connects += 1
                    log.info("pulling pump %s at %s from commit_ts %d", self.name, self.addr, after)
                items = message_items(raw, self.name, self._chunks)
                self.status.pending_parts = self._chunks.pending
                # The message holds a second copy of every payload (besides the bytes the items
                # took): let it go before waiting, which for a large transaction lasts until the
                # sink has worked through it.
                del raw
                self.status.messages += 1
                metrics.PULLED_MESSAGES.labels(self.name).inc()
                self._feed.feed(self.name, items)
                del items
                await self._feed.wait_room(self.name)
                while self._chunks.live >= MAX_SPILLED_TXNS:
                    await asyncio.sleep(SPILL_WAIT)
        finally:
            self.status.connected = False
            call.cancel()
            # a transaction cut off mid-way is sent again from part 1: the next stream starts at
            # the last complete transaction or a watermark below the unfinished one
            self._chunks.reset()
            self.status.pending_parts = 0
        return delivered

    def _reachable_again(self) -> None:
        if self.status.unreachable:
            self.status.unreachable = False
            log.warning("pump %s at %s is reachable again: the merge goes on", self.name, self.addr)

    def _failed(self, why: str, after: int, where: str = "pull") -> None:
        """Record a failed stream: ``/status``, the error metric labelled ``where``, a
        rate-limited warning."""
        self.status.last_error = why
        self.status.last_error_at = time.time()
        metrics.ERRORS.labels(where).inc()
        now = time.monotonic()
        if not self.status.unreachable and now - self._delivered_at >= self._unreachable_after:
            self.status.unreachable = True
            log.warning(
                "the merge waits for pump %s at %s: unreachable for %.0fs (%s). It is not skipped "
                "(it may hold committed transactions); if it is gone for good: binlog-bridge ctl offline %s",
                self.name,
                self.addr,
                now - self._delivered_at,
                why,
                self.name,
            )
        if now - self._last_warning >= ERROR_LOG_EVERY:
            self._last_warning = now
            log.warning(
                "pump %s at %s: cannot pull from commit_ts %d: %s; retrying", self.name, self.addr, after, why
            )
        else:
            log.debug("pump %s: pull failed again: %s", self.name, why)
