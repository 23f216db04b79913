"""Chunked transactions in the stores that keep binlogs: binlog files, the file sink's
skip logic, dead letters, routing.

A chunked transaction is stored as its PrewriteChunk binlogs (part records) and
then its final binlog (an event record), all in one file. Readers give it back
with its parts gathered on disk; parts whose final binlog was never written (a
crash between them) are truncated by the writer and never read.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.chunks import ChunkAssembler
from bridge.errors import BridgeError, ProtocolError
from bridge.proto import row_pb2
from bridge.sink.events import TxnEvent
from drainer.collect.merger import PulledTxn
from drainer.sinks.file.binlogfile import (
    KIND_EVENT,
    KIND_PART,
    BinlogFileReader,
    BinlogFileWriter,
    encode_parts,
    encode_record,
    file_name,
    header_payload,
    iter_records,
    list_files,
)
from drainer.sinks.file.sink import append_events
from drainer.sync.deadletter import DeadLetter
from drainer.sync.route import RouteConfig, Router, route_event
from tests.support.binlog_events import EventStream, table_schema
from tests.support.chunked_events import chunk_binlogs

T = row_pb2.ColumnType


def new_stream() -> EventStream:
    stream = EventStream()
    stream.create(table_schema("shop", "t", [("id", T.BIGINT), ("v", T.TEXT)], key=["id"]))
    return stream


def inserts(first: int, count: int, pad: int = 50) -> list[tuple[str, str, None, tuple[int, str]]]:
    return [("insert", "shop.t", None, (i, "v" * pad)) for i in range(first, first + count)]


def txn_event(start_ts: int, commit_ts: int, parts: list[bytes], final: bytes) -> TxnEvent:
    """A TxnEvent carrying the binlogs only (these stores never decode rows)."""
    return TxnEvent(start_ts, commit_ts, final, lambda: iter(()), 0, parts=lambda: iter(parts))


def plain(stream: EventStream, first: int) -> TxnEvent:
    return stream.inserts("shop.t", [(first, "plain")])


def read_back(directory: Path) -> list[tuple[int, list[bytes], bytes]]:
    found = []
    for stored in BinlogFileReader(directory).events():
        parts = [] if stored.parts is None else list(stored.parts.binlogs())
        if stored.parts is not None:
            stored.parts.close()
        found.append((stored.commit_ts, parts, stored.binlog))
    return found


def write(directory: Path, events: list[TxnEvent], max_size: int = 1 << 20) -> BinlogFileWriter:
    writer = BinlogFileWriter(directory, max_size)
    writer.open()
    append_events(writer, events, 0, "test")
    writer.close()
    return writer


def test_parts_then_final_round_trip_in_one_file_however_small_the_files(tmp_path: Path) -> None:
    stream = new_stream()
    events: list[TxnEvent] = [plain(stream, 1000)]
    chunked: dict[int, tuple[list[bytes], bytes]] = {}
    for n in range(4):
        start_ts, commit_ts, parts, final = chunk_binlogs(stream, inserts(n * 100, 40), chunks=3)
        chunked[commit_ts] = (parts, final)
        events += [txn_event(start_ts, commit_ts, parts, final), plain(stream, 2000 + n)]
    write(tmp_path, events, max_size=4096)  # smaller than one transaction's parts
    assert len(list_files(tmp_path)) >= 3
    found = read_back(tmp_path)
    assert [ts for ts, _, _ in found] == [e.commit_ts for e in events]
    for commit_ts, parts, binlog in found:
        expected_parts, expected_final = chunked.get(commit_ts, ([], None))
        assert parts == expected_parts
        assert expected_final is None or binlog == expected_final
    for _, path in list_files(tmp_path):  # a file never ends inside a transaction
        kinds = [record.kind for record in iter_records(path)]
        assert kinds[-1] != KIND_PART, path


def test_parts_left_without_their_final_are_dropped_by_readers_and_cut_by_the_writer(
    tmp_path: Path,
) -> None:
    stream = new_stream()
    first = plain(stream, 1)
    start_ts, commit_ts, parts, final = chunk_binlogs(stream, inserts(0, 30), chunks=3)
    writer = write(tmp_path, [first])
    ((_, path),) = list_files(tmp_path)
    intact = path.stat().st_size
    with path.open("ab") as f:  # killed after two of three parts, then again inside the third
        for part in parts[:2]:
            f.write(b"".join(encode_parts(KIND_PART, commit_ts, part)))
        f.write(b"".join(encode_parts(KIND_PART, commit_ts, parts[2]))[:40])
    assert [ts for ts, _, _ in read_back(tmp_path)] == [first.commit_ts]
    writer = BinlogFileWriter(tmp_path, 1 << 20)
    assert writer.open() == first.commit_ts  # the half transaction counts as not written
    assert path.stat().st_size == intact
    # the drainer re-delivers it after its restart: stored whole, once
    position, _ = append_events(
        writer, [first, txn_event(start_ts, commit_ts, parts, final)], writer.last_ts, "t"
    )
    writer.close()
    assert position == commit_ts
    assert read_back(tmp_path)[1] == (commit_ts, parts, final)


def test_a_failure_while_writing_parts_leaves_nothing_of_the_transaction(tmp_path: Path) -> None:
    stream = new_stream()
    first = plain(stream, 1)
    _start_ts, commit_ts, parts, final = chunk_binlogs(stream, inserts(0, 30), chunks=3)
    writer = BinlogFileWriter(tmp_path, 1 << 20)
    writer.open()
    writer.append(first.commit_ts, first.payload)

    def failing() -> Iterator[bytes]:
        yield parts[0]
        raise OSError("spill file unreadable")

    with pytest.raises(OSError):
        writer.append(commit_ts, final, parts=failing())
    assert writer.last_ts == first.commit_ts
    writer.append(commit_ts, final, parts=parts)  # the retry
    writer.close()
    assert [(ts, p) for ts, p, _ in read_back(tmp_path)] == [(first.commit_ts, []), (commit_ts, parts)]


def test_parts_at_the_end_of_a_file_that_is_not_the_last_are_corruption(tmp_path: Path) -> None:
    stream = new_stream()
    _, commit_ts, parts, _ = chunk_binlogs(stream, inserts(0, 30), chunks=2)
    write(tmp_path, [plain(stream, 1)])
    ((_, path),) = list_files(tmp_path)
    with path.open("ab") as f:
        f.write(b"".join(encode_parts(KIND_PART, commit_ts, parts[0])))
    (tmp_path / file_name(2)).write_bytes(encode_record(header_payload(commit_ts, b"")))
    with pytest.raises(ProtocolError, match="never spans two files"):
        read_back(tmp_path)


def test_a_gap_in_the_stored_parts_is_a_protocol_error(tmp_path: Path) -> None:
    stream = new_stream()
    start_ts, commit_ts, parts, final = chunk_binlogs(stream, inserts(0, 30), chunks=3)
    write(tmp_path, [txn_event(start_ts, commit_ts, [parts[0], parts[2]], final)])
    with pytest.raises(ProtocolError, match="part 3 is out of order"):
        read_back(tmp_path)


def test_events_without_parts_skip_them(tmp_path: Path) -> None:
    stream = new_stream()
    start_ts, commit_ts, parts, final = chunk_binlogs(stream, inserts(0, 30), chunks=3)
    write(tmp_path, [txn_event(start_ts, commit_ts, parts, final)])
    (stored,) = BinlogFileReader(tmp_path).events(parts=False)
    assert stored.parts is None and stored.commit_ts == commit_ts and stored.binlog == final
    kinds = [r.kind for _, p in list_files(tmp_path) for r in iter_records(p)][1:]
    assert kinds == [KIND_PART] * 3 + [KIND_EVENT]


def test_a_retried_write_stores_a_chunked_transaction_once(tmp_path: Path) -> None:
    stream = new_stream()
    start_ts, commit_ts, parts, final = chunk_binlogs(stream, inserts(0, 30), chunks=2)
    event = txn_event(start_ts, commit_ts, parts, final)
    writer = BinlogFileWriter(tmp_path, 1 << 20)
    writer.open()
    position, appended = append_events(writer, [event], 0, "t")
    assert (position, appended) == (commit_ts, commit_ts)
    assert append_events(writer, [event], position, "t") == (commit_ts, 0)
    writer.close()
    assert read_back(tmp_path) == [(commit_ts, parts, final)]


def test_a_dead_letter_stores_every_part_of_a_chunked_transaction(tmp_path: Path) -> None:
    stream = new_stream()
    start_ts, commit_ts, parts, final = chunk_binlogs(stream, inserts(0, 30), chunks=3)
    letters = DeadLetter(tmp_path / "dead", stream.tracker.snapshot)
    assembler = ChunkAssembler("test")
    for part in parts:
        assembler.add(part)
    txn = PulledTxn(start_ts, commit_ts, final, parts=assembler.finish(final))
    letters.put(txn, BridgeError("cannot build it"))
    letters.put(txn, BridgeError("again after a restart"))  # stored once
    # refused by the downstream: the event's parts
    start2, commit2, parts2, final2 = chunk_binlogs(stream, inserts(100, 30), chunks=2)
    letters.refused(commit2, final2, BridgeError("refused"), txn_event(start2, commit2, parts2, final2).parts)
    letters.close()
    assert letters.stored == 2
    assert read_back(tmp_path / "dead") == [(commit_ts, parts, final), (commit2, parts2, final2)]


def test_routing_keeps_the_parts_and_drops_raw() -> None:
    stream = new_stream()
    start_ts, commit_ts, parts, final = chunk_binlogs(stream, inserts(0, 3), chunks=1)
    event = txn_event(start_ts, commit_ts, parts, final)
    router = Router.from_config([RouteConfig(schema_pattern="shop", target_schema="shop_b")])
    routed = route_event(event, router)
    assert isinstance(routed, TxnEvent) and routed.parts is event.parts and routed.raw is None
    assert routed.payload == final
