"""The binlog-file format: records, rotation with schema headers, torn tails, corruption."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.errors import ProtocolError
from bridge.proto import row_pb2
from drainer.sinks.file.binlogfile import (
    RECORD_HEAD,
    BinlogFileReader,
    BinlogFileWriter,
    TornTail,
    iter_records,
    list_files,
)
from tests.support.binlog_events import EventStream, write_binlog_files

T = row_pb2.ColumnType


def test_records_round_trip_and_rotate_with_a_schema_header(tmp_path: Path) -> None:
    stamps = write_binlog_files(tmp_path, EventStream(), 60, max_size=4096)
    files = list_files(tmp_path)
    assert len(files) > 3
    assert [p.name for _, p in files][:2] == ["binlog-0000000001.bbf", "binlog-0000000002.bbf"]
    reader = BinlogFileReader(tmp_path)
    assert [e.commit_ts for e in reader.events()] == stamps
    # Every later file's header names the last commit_ts before it and knows the table.
    second = list(iter_records(files[1][1]))
    assert second[0].kind == 1 and second[0].commit_ts < second[1].commit_ts
    assert second[0].commit_ts in stamps and b"shop" in second[0].data


def test_reader_starts_at_the_file_holding_start_ts(tmp_path: Path) -> None:
    stamps = write_binlog_files(tmp_path, EventStream(), 60, max_size=4096)
    reader = BinlogFileReader(tmp_path)
    position, snapshot = reader.start(stamps[40])
    assert position > 0 and snapshot
    first = next(iter(reader.events(position))).commit_ts
    assert first <= stamps[40] and stamps.index(first) > 20
    assert reader.start(0)[0] == 0


def test_a_torn_tail_is_truncated_at_open_and_writing_goes_on(tmp_path: Path) -> None:
    stream = EventStream()
    stamps = write_binlog_files(tmp_path, stream, 5)
    ((_, path),) = list_files(tmp_path)
    intact = path.stat().st_size
    with path.open("ab") as f:
        f.write(RECORD_HEAD.pack(0x42424631, 500, 0) + b"partial")
    reader = BinlogFileReader(tmp_path)
    assert [e.commit_ts for e in reader.events()] == stamps  # the reader stops before the tail
    writer = BinlogFileWriter(tmp_path, 1 << 20)
    assert writer.open() == stamps[-1]
    assert path.stat().st_size == intact
    assert writer.tracker.find("shop", "t") is not None  # schema rebuilt from header + DDL records
    event = stream.inserts("shop.t", [(99, "y")])
    writer.append(event.commit_ts, event.payload)
    writer.close()
    assert [e.commit_ts for e in BinlogFileReader(tmp_path).events()] == [*stamps, event.commit_ts]


def test_a_file_without_a_complete_header_is_dropped(tmp_path: Path) -> None:
    stamps = write_binlog_files(tmp_path, EventStream(), 3)
    (tmp_path / "binlog-0000000002.bbf").write_bytes(b"BBF")
    writer = BinlogFileWriter(tmp_path, 1 << 20)
    assert writer.open() == stamps[-1]
    assert [p.name for _, p in list_files(tmp_path)] == ["binlog-0000000001.bbf"]


def test_corruption_before_the_last_file_is_an_error(tmp_path: Path) -> None:
    write_binlog_files(tmp_path, EventStream(), 60, max_size=4096)
    first = list_files(tmp_path)[0][1]
    data = bytearray(first.read_bytes())
    data[-5] ^= 0xFF  # inside the last record's payload: its CRC fails
    first.write_bytes(bytes(data))
    with pytest.raises(ProtocolError, match="corrupt at offset"):
        list(BinlogFileReader(tmp_path).events())
    with pytest.raises(TornTail, match="CRC32C"):
        list(iter_records(first))
