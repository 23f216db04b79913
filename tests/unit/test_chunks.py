"""bridge.chunks: a chunked transaction's parts gathered on disk in order, refused out of order."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from bridge.binlog import BinlogType
from bridge.binlogscan import SCAN_FROM_BYTES, scan_header
from bridge.chunks import ChunkAssembler, SpilledParts
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2, pump_pb2
from drainer.collect.merger import Merger, PulledTxn
from drainer.collect.pull import message_items
from pump.wire import checksum

START, COMMIT = 1000, 1005


def value(tag: int, size: int = 100) -> bytes:
    mutation = binlog_pb2.TableMutation(table_id=tag, inserted_rows=[bytes([tag % 256]) * size])
    return binlog_pb2.PrewriteValue(schema_version=7, mutations=[mutation]).SerializeToString()


def part(chunk: int, size: int = 100, start_ts: int = START, commit_ts: int = COMMIT) -> bytes:
    return binlog_pb2.Binlog(
        tp=BinlogType.PrewriteChunk,
        start_ts=start_ts,
        commit_ts=commit_ts,
        chunk=chunk,
        prewrite_value=value(chunk, size),
    ).SerializeToString()


def final(chunks: int, start_ts: int = START, commit_ts: int = COMMIT) -> bytes:
    return binlog_pb2.Binlog(
        tp=BinlogType.Commit,
        start_ts=start_ts,
        commit_ts=commit_ts,
        chunks=chunks,
        prewrite_key=b"k",
        prewrite_value=value(99),
    ).SerializeToString()


@pytest.mark.parametrize("size", [100, SCAN_FROM_BYTES + 10])
def test_parts_come_back_in_order_as_received(tmp_path: Path, size: int) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    sent = [part(i, size) for i in (1, 2, 3)]
    for payload in sent:
        assembler.add(payload)
    assert assembler.pending == 3
    parts = assembler.finish(final(3))
    assert parts is not None
    assert assembler.pending == 0
    assert parts.count == 3
    assert parts.size == sum(len(p) for p in sent)
    assert (parts.start_ts, parts.commit_ts) == (START, COMMIT)
    assert list(parts.binlogs()) == sent
    assert list(parts.values()) == [value(i, size) for i in (1, 2, 3)]
    # read again, and from two threads at once: pread has no shared file position
    results: list[list[bytes]] = []
    threads = [threading.Thread(target=lambda: results.append(list(parts.values()))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [[value(i, size) for i in (1, 2, 3)]] * 2
    # the file is unlinked from the start: the spill dir stays empty
    assert os.listdir(tmp_path) == []
    parts.close()
    parts.close()
    with pytest.raises(ProtocolError, match="released"):
        list(parts.values())


def test_a_part_without_prewrite_value_is_an_empty_value(tmp_path: Path) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    empty = binlog_pb2.Binlog(
        tp=BinlogType.PrewriteChunk, start_ts=START, commit_ts=COMMIT, chunk=1
    ).SerializeToString()
    assembler.add(empty)
    parts = assembler.finish(final(1))
    assert parts is not None
    assert list(parts.values()) == [b""]
    assert list(parts.binlogs()) == [empty]


def test_an_unchunked_transaction_has_no_parts(tmp_path: Path) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    assert assembler.finish(final(0)) is None
    # a header already scanned is used as it is
    assert assembler.finish(final(0), scan_header(final(0))) is None


def test_the_assembler_takes_one_transaction_after_another(tmp_path: Path) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    assembler.add(part(1))
    first = assembler.finish(final(1))
    assembler.add(part(1, start_ts=2000, commit_ts=2001))
    assembler.add(part(2, start_ts=2000, commit_ts=2001))
    second = assembler.finish(final(2, 2000, 2001))
    assert first is not None and second is not None
    assert (first.count, second.count) == (1, 2)
    assert list(first.values()) == [value(1)]
    assert list(second.values()) == [value(1), value(2)]


@pytest.mark.parametrize(
    ("sent", "error"),
    [
        ([part(2)], "part 2 is out of order: part 1 is next"),
        ([part(1), part(3)], "part 3 is out of order: part 2 is next"),
        ([part(1), part(1)], "part 1 is a duplicate: part 2 is next"),
        ([part(0)], "part 0 is out of order"),
        ([part(1), part(2, start_ts=START + 1)], "arrived while the transaction at start_ts 1000"),
        ([part(1, commit_ts=0)], "commit_ts above it"),
        ([final(0)], "is not a PrewriteChunk"),
    ],
)
def test_parts_out_of_order_are_refused(tmp_path: Path, sent: list[bytes], error: str) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    with pytest.raises(ProtocolError, match=error) as caught:
        for payload in sent:
            assembler.add(payload)
    assert "pump p1: chunked transaction (start_ts" in str(caught.value)


@pytest.mark.parametrize(
    ("parts", "closing", "error"),
    [
        (2, final(3), "the final binlog says 3 parts, 2 arrived"),
        (2, final(1), "the final binlog says 1 parts, 2 arrived"),
        (0, final(2), "the final binlog says 2 parts, none arrived"),
        (1, final(1, START, COMMIT + 7), "another transaction's binlog came"),
        (1, final(1, START + 1, COMMIT), "another transaction's binlog came"),
    ],
)
def test_a_final_that_does_not_match_its_parts_is_refused(
    tmp_path: Path, parts: int, closing: bytes, error: str
) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    for chunk in range(1, parts + 1):
        assembler.add(part(chunk))
    with pytest.raises(ProtocolError, match=error) as caught:
        assembler.finish(closing)
    assert "pump p1" in str(caught.value)
    assert assembler.pending == 0


def test_a_ddl_never_closes_parts(tmp_path: Path) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    assembler.add(part(1))
    ddl = binlog_pb2.Binlog(
        tp=BinlogType.Commit, start_ts=START, commit_ts=COMMIT, chunks=1, ddl_job_id=3, ddl_query=b"x"
    ).SerializeToString()
    with pytest.raises(ProtocolError, match="never chunked"):
        assembler.finish(ddl)


def test_reset_drops_the_unfinished_transaction(tmp_path: Path) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    assembler.add(part(1))
    assembler.add(part(2))
    assert assembler.pending_commit_ts == COMMIT
    assembler.reset()
    assert assembler.pending == 0
    assert assembler.pending_commit_ts == 0
    # the source re-sends from part 1
    for chunk in (1, 2):
        assembler.add(part(chunk))
    parts = assembler.finish(final(2))
    assert parts is not None and list(parts.values()) == [value(1), value(2)]


def test_dropped_parts_release_their_file(tmp_path: Path) -> None:
    parts = SpilledParts(tmp_path, START, COMMIT)
    parts.append(part(1), scan_header(part(1), locate=True).value_span or (0, 0))
    spill = parts._file  # the file the object holds
    assert os.fstat(spill.fileno()).st_size == len(part(1))
    del parts  # the last reference: the file is closed with it
    assert spill.closed


# -- the drainer's pull: parts go to the stream's assembler, the merge gets whole transactions --


def entity(payload: bytes) -> pump_pb2.Entity:
    binlog = binlog_pb2.Binlog.FromString(payload)
    made = pump_pb2.Entity(
        pos=pump_pb2.Pos(offset=binlog.commit_ts), payload=payload, checksum=checksum(payload)
    )
    made.meta.startTs, made.meta.commitTs = binlog.start_ts, binlog.commit_ts
    return made


def message(*payloads: bytes) -> bytes:
    return pump_pb2.PullBinlogResp(entities=[entity(p) for p in payloads]).SerializeToString()


def plain(start_ts: int, commit_ts: int) -> bytes:
    binlog = binlog_pb2.Binlog(
        tp=BinlogType.Commit, start_ts=start_ts, commit_ts=commit_ts, prewrite_value=value(5)
    )
    return binlog.SerializeToString()


@pytest.mark.parametrize("size", [100, SCAN_FROM_BYTES + 10])
def test_a_chunked_transaction_reaches_the_merge_once_whole(tmp_path: Path, size: int) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    sent = [part(i, size) for i in (1, 2, 3)]
    # a pull batch may end in the middle of the transaction; a watermark may come between
    first = message_items(message(plain(900, 901), sent[0], sent[1]), "p1", assembler)
    assert [getattr(i, "commit_ts", i) for i in first] == [901]
    assert assembler.pending == 2
    middle = message_items(
        message(
            binlog_pb2.Binlog(
                tp=BinlogType.Rollback, start_ts=COMMIT + 50, commit_ts=COMMIT + 50
            ).SerializeToString()
        ),
        "p1",
        assembler,
    )
    assert middle == [COMMIT - 1]  # held below the unfinished transaction
    last = message_items(message(sent[2], final(3), plain(2000, 2001)), "p1", assembler)
    assert assembler.pending == 0
    assert [getattr(i, "commit_ts", i) for i in last] == [COMMIT, 2001]
    txn = last[0]
    assert isinstance(txn, PulledTxn)
    assert txn.parts is not None and list(txn.parts.binlogs()) == sent
    assert txn.payload == final(3) and txn.size == len(final(3))
    assert isinstance(last[1], PulledTxn) and last[1].parts is None


def test_without_an_assembler_a_part_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProtocolError, match="chunked transaction"):
        message_items(message(part(1)), "p1")
    with pytest.raises(ProtocolError, match="chunked transaction"):
        message_items(message(final(2)), "p1")


def test_a_stream_that_skips_a_part_is_refused_naming_the_pump(tmp_path: Path) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    with pytest.raises(ProtocolError, match=r"pump p1: chunked transaction .* part 2 is out of order"):
        message_items(message(part(2), final(2)), "p1", assembler)


def test_the_merge_releases_the_parts_of_a_duplicate(tmp_path: Path) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    merger = Merger(start_ts=COMMIT)  # the transaction was delivered before
    merger.add_source("p1")
    [txn] = message_items(message(part(1), final(1)), "p1", assembler)
    assert isinstance(txn, PulledTxn) and txn.parts is not None
    merger.push("p1", txn)
    assert txn.parts.closed
    assert merger.duplicates == 1


def test_live_counts_finished_transactions_until_their_parts_are_released(tmp_path: Path) -> None:
    assembler = ChunkAssembler("pump p1", tmp_path)
    held = []
    for n in range(3):
        assembler.add(part(1, start_ts=START + 10 * n, commit_ts=COMMIT + 10 * n))
        parts = assembler.finish(final(1, START + 10 * n, COMMIT + 10 * n))
        assert parts is not None
        held.append(parts)
    assert assembler.live == 3
    held[0].close()
    assert assembler.live == 2
    del held[1:], parts  # dropped without close(): released with the last reference
    assert assembler.live == 0
