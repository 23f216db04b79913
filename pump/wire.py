"""The Pump service's wire forms: pulled entities, stream messages, request parsing.

An Entity carries one committed transaction, one part of a chunked one, or one watermark (see
:mod:`pump.service` for the contract); ``checksum`` is the CRC32C
(Castagnoli) of ``payload``, 4 bytes big-endian. Stream messages carry
several entities in ``entities``; :func:`response_entities` also reads the
original single-``entity`` form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import google_crc32c
from google.protobuf.message import DecodeError, Message

from bridge.binlog import fake_binlog
from bridge.proto import pump_pb2
from pump.storage import ChunkPart, CommittedTxn

ENTITY_OVERHEAD = 64  # bytes an Entity adds to its payload on the wire, generously


class BadRequest:
    """A request body that is not the method's request message (a lenient
    deserializer returns this instead of raising: gRPC would log a traceback
    per request and answer UNKNOWN)."""

    def __init__(self, message: str) -> None:
        self.message = message


def lenient_parser(message_type: type[Message]) -> Callable[[bytes], Message | BadRequest]:
    """A request deserializer that returns :class:`BadRequest` instead of raising."""
    name = message_type.DESCRIPTOR.full_name

    def parse(data: bytes) -> Message | BadRequest:
        try:
            return message_type.FromString(data)
        except DecodeError as exc:
            return BadRequest(f"the request is not a {name}: {exc}")

    return parse


def checksum(payload: bytes) -> bytes:
    """An Entity's checksum: CRC32C of the payload, 4 bytes big-endian."""
    value: int = google_crc32c.value(payload)
    return value.to_bytes(4, "big")


def txn_entity(txn: CommittedTxn | ChunkPart) -> pump_pb2.Entity:
    """A committed transaction's final binlog, or one of its parts (a PrewriteChunk with
    commit_ts set): meta and ``pos.offset`` are the transaction's either way."""
    payload = txn.commit_payload()
    return pump_pb2.Entity(
        pos=pump_pb2.Pos(offset=txn.commit_ts),
        payload=payload,
        checksum=checksum(payload),
        meta=pump_pb2.Meta(startTs=txn.start_ts, commitTs=txn.commit_ts),
    )


def watermark_entity(ts: int) -> pump_pb2.Entity:
    payload = fake_binlog(ts).SerializeToString()
    return pump_pb2.Entity(
        pos=pump_pb2.Pos(offset=ts),
        payload=payload,
        checksum=checksum(payload),
        meta=pump_pb2.Meta(startTs=ts, commitTs=ts),
    )


def response_entities(response: pump_pb2.PullBinlogResp) -> list[pump_pb2.Entity]:
    """The entities of one stream message, in order, whichever field carries them."""
    if response.entities:
        return list(response.entities)
    return [response.entity] if response.HasField("entity") else []


def pack_responses(entities: Sequence[pump_pb2.Entity], limit: int) -> Iterator[pump_pb2.PullBinlogResp]:
    """Stream messages of several entities each, every one under ``limit`` bytes
    (an entity larger than that on its own still gets a message)."""
    batch: list[pump_pb2.Entity] = []
    size = 0
    for entity in entities:
        entity_size = len(entity.payload) + ENTITY_OVERHEAD
        if batch and size + entity_size > limit:
            yield pump_pb2.PullBinlogResp(entities=batch)
            batch, size = [], 0
        batch.append(entity)
        size += entity_size
    if batch:
        yield pump_pb2.PullBinlogResp(entities=batch)
