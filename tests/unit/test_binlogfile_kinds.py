"""Whole records a version cannot use are not torn tails: a newer version's record kind, a
misplaced header. They raise ProtocolError naming the file and offset, in the last file too,
and neither the writer's open nor the reader cuts them off; the real torn tails (an
incomplete head or payload, a failing CRC) are still truncated."""

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
    UnknownRecordKind,
    encode_record,
    event_payload,
    header_payload,
    iter_records,
    list_files,
)
from tests.support.binlog_events import EventStream, write_binlog_files

T = row_pb2.ColumnType


def write_events(directory: Path, count: int, max_size: int = 1 << 20) -> list[int]:
    return write_binlog_files(directory, EventStream(), count, max_size)


def last_file(directory: Path) -> Path:
    return list_files(directory)[-1][1]


def append_raw(path: Path, record: bytes) -> int:
    """Append ``record`` to ``path``; returns the offset it starts at."""
    offset = path.stat().st_size
    with path.open("ab") as stream:
        stream.write(record)
    return offset


def newer_kind_record(kind: int = 7) -> bytes:
    """What a later format might add: a whole record, its CRC right, of a kind unknown here."""
    return encode_record(bytes((kind,)) + b"\x00" * 8 + b"a newer version's record")


def test_a_newer_kind_in_the_last_file_is_an_error_naming_kind_offset_and_file(tmp_path: Path) -> None:
    write_events(tmp_path, 5)
    path = last_file(tmp_path)
    offset = append_raw(path, newer_kind_record(7))
    size = path.stat().st_size
    with pytest.raises(UnknownRecordKind) as raised:
        list(iter_records(path))
    message = str(raised.value)
    assert f"record kind 7 at offset {offset}" in message
    assert str(path) in message and "newer" in message
    assert (raised.value.kind, raised.value.offset, raised.value.path) == (7, offset, path)
    assert isinstance(raised.value, ProtocolError)
    with pytest.raises(UnknownRecordKind):
        list(BinlogFileReader(tmp_path).events())
    with pytest.raises(UnknownRecordKind):
        BinlogFileWriter(tmp_path, 1 << 20).open()
    assert path.stat().st_size == size  # nothing was cut off


def test_a_newer_kind_followed_by_more_records_is_never_truncated(tmp_path: Path) -> None:
    stamps = write_events(tmp_path, 3)
    path = last_file(tmp_path)
    offset = append_raw(path, newer_kind_record(200))
    append_raw(path, encode_record(event_payload(stamps[-1] + 10, b"later")))
    data = path.read_bytes()
    with pytest.raises(UnknownRecordKind, match=f"record kind 200 at offset {offset}"):
        BinlogFileWriter(tmp_path, 1 << 20).open()
    assert path.read_bytes() == data


def test_a_short_record_of_a_newer_kind_is_no_torn_tail_either(tmp_path: Path) -> None:
    write_events(tmp_path, 2)
    path = last_file(tmp_path)
    offset = append_raw(path, encode_record(b"\x09"))  # one byte: a kind and nothing else
    with pytest.raises(UnknownRecordKind, match=f"record kind 9 at offset {offset}"):
        list(iter_records(path))


def test_a_newer_kind_before_the_last_file_is_the_same_error(tmp_path: Path) -> None:
    write_events(tmp_path, 60, max_size=4096)
    files = list_files(tmp_path)
    assert len(files) > 2
    first = files[0][1]
    offset = append_raw(first, newer_kind_record(4))
    with pytest.raises(UnknownRecordKind, match=f"record kind 4 at offset {offset}") as raised:
        list(BinlogFileReader(tmp_path).events())
    assert raised.value.path == first


def test_a_header_after_the_first_record_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    stamps = write_events(tmp_path, 3)
    path = last_file(tmp_path)
    offset = append_raw(path, encode_record(header_payload(stamps[-1], b"")))
    size = path.stat().st_size
    with pytest.raises(ProtocolError, match=f"corrupt at offset {offset}: a header after the first record"):
        list(iter_records(path))
    with pytest.raises(ProtocolError, match=str(path)):
        BinlogFileWriter(tmp_path, 1 << 20).open()
    assert path.stat().st_size == size


def test_a_first_record_that_is_no_header_is_corruption_and_the_file_stays(tmp_path: Path) -> None:
    stamps = write_events(tmp_path, 3)
    second = tmp_path / "binlog-0000000002.bbf"
    second.write_bytes(encode_record(event_payload(stamps[-1] + 1, b"an event first")))
    with pytest.raises(ProtocolError, match="offset 0: the first record is of kind 2, not a header"):
        BinlogFileWriter(tmp_path, 1 << 20).open()
    assert second.exists()  # not dropped as "a file without a complete header"
    with pytest.raises(ProtocolError, match="not a header"):
        list(BinlogFileReader(tmp_path).events())


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(RECORD_HEAD.pack(0x42424631, 500, 0)[:7], id="incomplete-head"),
        pytest.param(RECORD_HEAD.pack(0x42424631, 500, 0) + b"partial", id="incomplete-payload"),
        pytest.param(newer_kind_record(7)[:-1] + b"X", id="bad-crc-of-a-newer-kind"),
        pytest.param(encode_record(event_payload(1, b"y"))[:-1] + b"X", id="bad-crc"),
    ],
)
def test_real_torn_tails_are_still_truncated(tmp_path: Path, tail: bytes) -> None:
    stamps = write_events(tmp_path, 4)
    path = last_file(tmp_path)
    intact = path.stat().st_size
    append_raw(path, tail)
    with pytest.raises(TornTail):
        list(iter_records(path))
    assert [e.commit_ts for e in BinlogFileReader(tmp_path).events()] == stamps
    assert BinlogFileWriter(tmp_path, 1 << 20).open() == stamps[-1]
    assert path.stat().st_size == intact
