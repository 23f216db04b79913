"""A large stream message is walked, not parsed (drainer.collect.pull.message_items): the items are the
ones parsing gives, bad entities are the same protocol errors, and a small message is still parsed."""

from __future__ import annotations

import pytest

from bridge.binlog import commit, ddl_prewrite, fake_binlog, prewrite
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2, pump_pb2, row_pb2
from drainer.collect.merger import PulledTxn
from drainer.collect.pull import SCAN_FROM_BYTES, message_items, response_items
from pump.wire import checksum

BIG = SCAN_FROM_BYTES + 1


def pulled_commit(start_ts: int, commit_ts: int, row_bytes: int = 1) -> binlog_pb2.Binlog:
    mutation = binlog_pb2.TableMutation(
        table_id=1, inserted_rows=[b"r" * row_bytes], sequence=[binlog_pb2.Insert]
    )
    binlog = prewrite(start_ts, [mutation])
    binlog.MergeFrom(commit(start_ts, commit_ts))
    return binlog


def entity(binlog: binlog_pb2.Binlog, with_meta: bool = True) -> pump_pb2.Entity:
    payload = binlog.SerializeToString()
    made = pump_pb2.Entity(
        pos=pump_pb2.Pos(offset=binlog.commit_ts), payload=payload, checksum=checksum(payload)
    )
    if with_meta:
        made.meta.startTs, made.meta.commitTs = binlog.start_ts, binlog.commit_ts
    return made


def test_a_large_message_gives_the_items_parsing_gives() -> None:
    change = row_pb2.SchemaChange(kind=row_pb2.SchemaChange.CREATE_DATABASE, db="shop")
    ddl = ddl_prewrite(300, "create database shop", 7, change)
    ddl.MergeFrom(commit(300, 301))
    response = pump_pb2.PullBinlogResp(
        entities=[
            entity(pulled_commit(100, 105, BIG)),
            entity(fake_binlog(110)),
            entity(ddl, with_meta=False),
            entity(pulled_commit(111, 115), with_meta=False),
        ]
    )
    raw = response.SerializeToString()
    assert len(raw) > SCAN_FROM_BYTES
    scanned, parsed = message_items(raw, "p"), response_items(response, "p")
    assert scanned == parsed
    big = scanned[0]
    assert isinstance(big, PulledTxn) and (big.start_ts, big.commit_ts) == (100, 105)
    assert big.payload == response.entities[0].payload and big.value_span is not None
    assert scanned[1] == 110
    assert isinstance(scanned[2], PulledTxn) and scanned[2].ddl and scanned[2].commit_ts == 301
    # the original single-entity form, large and small
    for size in (BIG, 1):
        single = pump_pb2.PullBinlogResp(entity=entity(pulled_commit(120, 121, size)))
        assert message_items(single.SerializeToString(), "p") == response_items(single, "p")
    assert message_items(pump_pb2.PullBinlogResp().SerializeToString(), "p") == []


def test_bad_large_entities_are_protocol_errors_naming_the_pump() -> None:
    def raw(made: pump_pb2.Entity) -> bytes:
        return pump_pb2.PullBinlogResp(entities=[made]).SerializeToString()

    broken = entity(pulled_commit(100, 105, BIG))
    broken.checksum = b"\0\0\0\0"
    with pytest.raises(ProtocolError, match=r"pump p7: .*checksum"):
        message_items(raw(broken), "p7")
    lying = entity(pulled_commit(100, 105, BIG))
    lying.meta.commitTs = 106
    with pytest.raises(ProtocolError, match="meta says commit_ts 106"):
        message_items(raw(lying), "p7")
    with pytest.raises(ProtocolError, match="pump p7: stream message"):
        message_items(raw(entity(pulled_commit(100, 105, BIG)))[:-3], "p7")  # truncated
    with pytest.raises(ProtocolError, match="pump p7: stream message is not a PullBinlogResp"):
        message_items(b"\x0a\xff\xff", "p7")


def test_a_large_message_of_small_entities_parses_each_and_refuses_a_bad_one() -> None:
    entities = [
        entity(pulled_commit(100 + 2 * n, 101 + 2 * n, 700), with_meta=n % 2 == 0) for n in range(120)
    ]
    response = pump_pb2.PullBinlogResp(entities=[*entities, entity(fake_binlog(400))])
    raw = response.SerializeToString()
    assert len(raw) > SCAN_FROM_BYTES and all(e.ByteSize() < SCAN_FROM_BYTES for e in response.entities)
    assert message_items(raw, "p") == response_items(response, "p")
    # an entity whose bytes are not an Entity (a field of wire type 7), inside a large message
    bad = raw + b"\x12\x02\x0f\x00"
    with pytest.raises(ProtocolError, match="pump p7: stream message entity is not an Entity"):
        message_items(bad, "p7")
    broken = entity(pulled_commit(500, 501))
    broken.checksum = b"\0\0\0\0"
    response.entities.append(broken)
    with pytest.raises(ProtocolError, match=r"pump p7: .*checksum"):
        message_items(response.SerializeToString(), "p7")
