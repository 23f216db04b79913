"""The merger: k-way by commit_ts, gated by the minimum watermark, duplicates dropped;
and the pulled-entity reading that feeds it."""

from __future__ import annotations

import asyncio
import random

import pytest

from bridge.binlog import commit, ddl_prewrite, fake_binlog, prewrite
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2, pump_pb2, row_pb2
from drainer.collect.merger import MergeError, MergeFeed, Merger, PulledTxn
from drainer.collect.pull import SCAN_FROM_BYTES, entity_item, response_items, scan_header
from pump.wire import checksum


def txn(commit_ts: int, start_ts: int | None = None, size: int = 10) -> PulledTxn:
    return PulledTxn(start_ts if start_ts is not None else commit_ts - 1, commit_ts, b"x" * size)


def released(merger: Merger) -> list[int]:
    return [t.commit_ts for t in merger.pop_ready().txns]


def test_two_pumps_interleave_in_commit_order() -> None:
    # The seeds' example: Pump1 stores {1,3,5,7,9}, Pump2 {2,4,6,10}.
    merger = Merger()
    merger.add_source("pump1")
    merger.add_source("pump2")
    for ts in (3, 5, 7, 9, 11):
        merger.push("pump1", txn(ts))
    for ts in (2, 4, 6, 10):
        merger.push("pump2", txn(ts))
    assert released(merger) == [2, 3, 4, 5, 6, 7, 9, 10]
    assert merger.resolved == 10
    merger.push("pump2", 20)
    assert released(merger) == [11]
    assert merger.resolved == 11


def test_nothing_passes_the_slowest_watermark() -> None:
    merger = Merger(start_ts=100)
    merger.add_source("a")
    merger.add_source("b")
    merger.push("a", txn(110))
    merger.push("a", 150)
    assert released(merger) == []
    assert merger.resolved == 100
    merger.push("b", 105)
    assert released(merger) == []
    assert merger.resolved == 105
    merger.push("b", 110)
    assert released(merger) == [110]
    merger.push("b", 200)
    assert released(merger) == []
    assert merger.resolved == 150


def test_a_pump_that_sends_nothing_holds_the_merge_at_its_start() -> None:
    merger = Merger(start_ts=50)
    merger.add_source("a")
    merger.add_source("silent")
    merger.push("a", txn(60))
    merger.push("a", 70)
    assert released(merger) == []
    assert merger.position("silent") == 50


def test_no_source_releases_nothing_and_resolved_stays() -> None:
    merger = Merger(start_ts=7)
    batch = merger.pop_ready()
    assert batch.txns == [] and batch.resolved == 7


def test_resent_and_doubled_transactions_are_dropped() -> None:
    merger = Merger()
    merger.add_source("a")
    merger.add_source("b")
    merger.push("a", txn(10, 9))
    merger.push("a", txn(10, 9))  # a stream re-sent after a reconnect
    merger.push("b", txn(10, 9))  # the same transaction held by a second pump
    merger.push("b", txn(12))
    merger.push("a", 20)
    out = merger.pop_ready().txns
    assert [(t.commit_ts, t.start_ts) for t in out] == [(10, 9), (12, 11)]
    assert merger.duplicates == 2
    merger.push("a", txn(12))  # below what was already emitted
    assert released(merger) == []
    assert merger.duplicates == 3


def test_two_transactions_with_one_commit_ts_stop_the_merge() -> None:
    merger = Merger()
    merger.add_source("a")
    merger.add_source("b")
    merger.push("a", txn(10, 3))
    merger.push("b", txn(10, 4))
    with pytest.raises(MergeError, match="commit_ts 10"):
        merger.pop_ready()


def test_offline_pump_is_let_go_only_when_drained() -> None:
    merger = Merger()
    merger.add_source("a")
    merger.add_source("leaving")
    merger.push("leaving", txn(5))
    merger.drain("leaving", 8)
    merger.push("a", 100)
    batch = merger.pop_ready()
    assert [t.commit_ts for t in batch.txns] == [5]
    assert batch.retired == [] and merger.resolved == 5
    merger.push("leaving", 8)
    batch = merger.pop_ready()
    assert batch.retired == ["leaving"]
    assert batch.resolved == 100  # the minimum no longer counts the pump that left
    assert "leaving" not in merger.sources


def test_a_pump_added_later_starts_at_the_resolved_ts() -> None:
    merger = Merger()
    merger.add_source("a")
    merger.push("a", txn(10))
    merger.push("a", 30)
    assert released(merger) == [10]
    assert merger.add_source("new")
    assert not merger.add_source("new")
    assert merger.position("new") == 30
    merger.push("a", txn(40))
    merger.push("new", txn(35))
    merger.push("new", 50)
    merger.push("a", 60)
    assert released(merger) == [35, 40]


def test_buffer_bounds_and_early_stop() -> None:
    merger = Merger(max_items=3, max_bytes=1000)
    merger.add_source("a")
    merger.add_source("b")
    assert merger.has_room("a")
    for ts in (1, 2, 3):
        merger.push("a", txn(ts))
    assert not merger.has_room("a")
    merger.push("b", txn(4, size=2000))
    assert not merger.has_room("b")
    merger.push("b", 10)
    merger.push("a", 10)
    batch = merger.pop_ready(max_items=2)
    assert [t.commit_ts for t in batch.txns] == [1, 2]
    assert batch.resolved == 2
    assert merger.has_room("a")
    assert released(merger) == [3, 4]
    assert merger.resolved == 10


@pytest.mark.parametrize("seed", range(25))
def test_random_interleavings_give_one_strictly_increasing_stream(seed: int) -> None:
    rng = random.Random(seed)
    sources = [f"pump{i}" for i in range(rng.randint(1, 5))]
    all_ts = rng.sample(range(1, 5000), 400)
    owner = {ts: rng.randrange(len(sources)) for ts in all_ts}
    owned = {name: sorted(ts for ts in all_ts if owner[ts] == i) for i, name in enumerate(sources)}
    final = max(all_ts) + 1
    merger = Merger()
    for name in sources:
        merger.add_source(name)
    streams = {name: _stream(rng, owned[name], final) for name in sources}
    out: list[int] = []
    while any(streams.values()):
        name = rng.choice([n for n in sources if streams[n]])
        for item in streams[name].pop(0):
            merger.push(name, item)
        batch = merger.pop_ready(max_items=rng.randint(1, 50))
        out.extend(t.commit_ts for t in batch.txns)
        limit = min(merger.sources[n].watermark for n in sources)
        assert all(ts <= limit for ts in out)
    out.extend(released(merger))
    assert out == sorted(all_ts)


def _stream(rng: random.Random, owned: list[int], final: int) -> list[list[PulledTxn | int]]:
    """One pump's stream as messages: its transactions with watermarks and re-sent duplicates."""
    items: list[PulledTxn | int] = []
    for ts, following in zip(owned, [*owned[1:], final], strict=True):
        items.append(txn(ts))
        if rng.random() < 0.2:
            items.append(rng.randint(ts, following - 1))  # a watermark promises nothing below it is to come
        if rng.random() < 0.05:
            items.append(txn(ts))
    items.append(final)
    messages: list[list[PulledTxn | int]] = []
    while items:
        cut = rng.randint(1, 8)
        messages.append(items[:cut])
        items = items[cut:]
    return messages


def test_feed_waits_for_data_and_for_room() -> None:
    async def scenario() -> None:
        feed = MergeFeed(Merger(max_items=2))
        feed.add_source("a")
        feed.add_source("b")
        waiting = asyncio.create_task(feed.next_batch(0))
        feed.feed("a", [txn(5), txn(6), txn(7)])
        roomy = asyncio.create_task(feed.wait_room("a"))
        await asyncio.sleep(0.01)
        assert not waiting.done() and not roomy.done()  # b holds the merge; a's buffer is full
        feed.feed("b", [9])
        feed.feed("a", [9])
        batch = await waiting
        assert [t.commit_ts for t in batch.txns] == [5, 6, 7]
        await asyncio.wait_for(roomy, 5)
        empty = await feed.next_batch(batch.resolved, timeout=0.01)
        assert empty.txns == [] and empty.resolved == 9

    asyncio.run(scenario())


def _entity(binlog: binlog_pb2.Binlog, with_meta: bool = True) -> pump_pb2.Entity:
    payload = binlog.SerializeToString()
    entity = pump_pb2.Entity(
        pos=pump_pb2.Pos(offset=binlog.commit_ts), payload=payload, checksum=checksum(payload)
    )
    if with_meta:
        entity.meta.startTs, entity.meta.commitTs = binlog.start_ts, binlog.commit_ts
    return entity


def _mutation(row_bytes: int = 1) -> binlog_pb2.TableMutation:
    return binlog_pb2.TableMutation(
        table_id=1, inserted_rows=[b"r" * row_bytes], sequence=[binlog_pb2.Insert]
    )


def _pulled_commit(start_ts: int, commit_ts: int, row_bytes: int = 1) -> binlog_pb2.Binlog:
    binlog = prewrite(start_ts, [_mutation(row_bytes)])
    binlog.MergeFrom(commit(start_ts, commit_ts))
    return binlog


@pytest.mark.parametrize("row_bytes", [10, SCAN_FROM_BYTES + 1])
def test_scan_header_reads_the_pulled_form(row_bytes: int) -> None:
    binlog = _pulled_commit(100, 105, row_bytes)
    payload = binlog.SerializeToString()
    header = scan_header(payload)
    assert (header.tp, header.start_ts, header.commit_ts, header.ddl_job_id) == (1, 100, 105, 0)
    if row_bytes > SCAN_FROM_BYTES:  # located, not copied
        assert header.value_span is not None
        start, end = header.value_span
        assert payload[start:end] == binlog.prewrite_value
    else:  # small enough to parse again
        assert header.value_span is None
    # A pump appends tp and commit_ts to the stored Prewrite: the last value wins.
    stored = prewrite(200, [_mutation(row_bytes)]).SerializeToString()
    appended = scan_header(
        stored + binlog_pb2.Binlog(tp=binlog_pb2.Commit, commit_ts=205).SerializeToString()
    )
    assert (appended.tp, appended.start_ts, appended.commit_ts) == (1, 200, 205)


def test_entities_become_transactions_and_watermarks() -> None:
    change = row_pb2.SchemaChange(kind=row_pb2.SchemaChange.CREATE_DATABASE, db="shop")
    ddl = ddl_prewrite(300, "create database shop", 7, change)
    ddl.MergeFrom(commit(300, 301))
    response = pump_pb2.PullBinlogResp(
        entities=[_entity(_pulled_commit(100, 105)), _entity(fake_binlog(110)), _entity(ddl, with_meta=False)]
    )
    items = response_items(response, "p")
    assert isinstance(items[0], PulledTxn) and (items[0].start_ts, items[0].commit_ts) == (100, 105)
    assert not items[0].ddl
    assert items[1] == 110
    assert isinstance(items[2], PulledTxn) and items[2].ddl and items[2].commit_ts == 301
    single = pump_pb2.PullBinlogResp(entity=_entity(fake_binlog(120)))
    assert response_items(single, "p") == [120]


def test_bad_entities_are_protocol_errors_naming_the_pump() -> None:
    entity = _entity(_pulled_commit(100, 105))
    entity.checksum = b"\0\0\0\0"
    with pytest.raises(ProtocolError, match=r"pump p7: .*checksum"):
        entity_item(entity, "p7")
    prewrite_only = _entity(prewrite(100, []))
    with pytest.raises(ProtocolError, match="neither a committed transaction nor a watermark"):
        entity_item(prewrite_only, "p7")
    lying = _entity(_pulled_commit(100, 105))
    lying.meta.commitTs = 106
    with pytest.raises(ProtocolError, match="meta says commit_ts 106"):
        entity_item(lying, "p7")
    garbage = pump_pb2.Entity(payload=b"\x0a\xff\xff")
    with pytest.raises(ProtocolError, match="binlog payload"):
        entity_item(garbage, "p7")
