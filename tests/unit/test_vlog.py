"""The value log: records, rotation and footers, recovery of a torn tail, corruption reports, GC."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import google_crc32c
import pytest

from pump.storage.errors import CorruptLog, RecordGone
from pump.storage.segment import FOOTER, FOOTER_MAGIC, HEADER, RECORD_MAGIC, Pointer
from pump.storage.vlog import ValueLog, segment_name


def payload(ts: int, size: int = 100) -> bytes:
    """A test payload that carries its ts in its first 8 bytes."""
    return ts.to_bytes(8, "big") + bytes([ts % 251]) * (size - 8)


def ts_of(data: bytes) -> int:
    return int.from_bytes(data[:8], "big")


def open_log(directory: Path, segment_size: int = 1 << 20) -> ValueLog:
    return ValueLog.open(directory, segment_size=segment_size, sync=True, ts_of=ts_of)


def write(vlog: ValueLog, timestamps: range | list[int], size: int = 100) -> list[Pointer]:
    pointers = vlog.append([(payload(ts, size), ts) for ts in timestamps])
    vlog.sync()
    return pointers


def test_round_trip_and_scan(tmp_path: Path) -> None:
    vlog = open_log(tmp_path)
    pointers = write(vlog, range(1, 51))
    assert [vlog.read(p) for p in pointers] == [payload(ts) for ts in range(1, 51)]
    scanned = list(vlog.scan(Pointer(1, 0), vlog.head))
    assert [ptr for ptr, _, _ in scanned] == pointers
    assert [data for _, _, data in scanned] == [payload(ts) for ts in range(1, 51)]
    assert scanned[-1][1] == vlog.head
    vlog.close()

    reopened = open_log(tmp_path)
    assert reopened.head == Pointer(1, 50 * (HEADER.size + 100))
    assert [reopened.read(p) for p in pointers] == [payload(ts) for ts in range(1, 51)]
    reopened.close()


def test_record_layout_is_little_endian_with_crc32c(tmp_path: Path) -> None:
    vlog = open_log(tmp_path)
    write(vlog, [7])
    vlog.close()
    raw = (tmp_path / segment_name(1)).read_bytes()
    magic, length, checksum = struct.unpack("<IQI", raw[:16])
    assert (magic, length) == (RECORD_MAGIC, 100)
    assert checksum == google_crc32c.value(raw[16:])


def test_rotation_seals_segments_with_their_max_ts(tmp_path: Path) -> None:
    vlog = open_log(tmp_path, segment_size=4096)
    pointers = write(vlog, range(1, 201))
    assert vlog.segment_count() > 3
    assert vlog.head.segment == vlog.segment_count()
    for seg_id in range(1, vlog.segment_count()):
        raw = (tmp_path / segment_name(seg_id)).read_bytes()
        max_ts, magic = FOOTER.unpack(raw[-FOOTER.size :])
        assert magic == FOOTER_MAGIC
        in_segment = [ts for ts, p in zip(range(1, 201), pointers, strict=True) if p.segment == seg_id]
        assert max_ts == max(in_segment)
    vlog.close()

    reopened = open_log(tmp_path, segment_size=4096)
    assert [reopened.read(p) for p in pointers] == [payload(ts) for ts in range(1, 201)]
    assert len(list(reopened.scan(Pointer(1, 0), reopened.head))) == 200
    reopened.close()


def test_a_torn_payload_at_eof_is_truncated(tmp_path: Path) -> None:
    vlog = open_log(tmp_path)
    pointers = write(vlog, range(1, 11))
    vlog.close()
    path = tmp_path / segment_name(1)
    os.truncate(path, path.stat().st_size - 30)

    reopened = open_log(tmp_path)
    assert path.stat().st_size == pointers[-1].offset
    assert reopened.head == pointers[-1]
    assert [reopened.read(p) for p in pointers[:-1]] == [payload(ts) for ts in range(1, 10)]
    write(reopened, [11])
    assert len(list(reopened.scan(Pointer(1, 0), reopened.head))) == 10
    reopened.close()


def test_a_torn_header_at_eof_is_truncated(tmp_path: Path) -> None:
    vlog = open_log(tmp_path)
    write(vlog, range(1, 4))
    end = vlog.head.offset
    vlog.close()
    path = tmp_path / segment_name(1)
    with path.open("ab") as f:
        f.write(struct.pack("<I", RECORD_MAGIC) + b"\x05\x00")
    open_log(tmp_path).close()
    assert path.stat().st_size == end


def test_a_zero_filled_tail_is_truncated(tmp_path: Path) -> None:
    vlog = open_log(tmp_path)
    write(vlog, range(1, 4))
    end = vlog.head.offset
    vlog.close()
    path = tmp_path / segment_name(1)
    with path.open("ab") as f:
        f.write(bytes(4096))
    open_log(tmp_path).close()
    assert path.stat().st_size == end


def _corrupt(path: Path, offset: int) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_a_crc_mismatch_inside_the_log_names_file_and_offset(tmp_path: Path) -> None:
    vlog = open_log(tmp_path)
    pointers = write(vlog, range(1, 11))
    vlog.close()
    path = tmp_path / segment_name(1)
    _corrupt(path, pointers[4].offset + HEADER.size + 50)
    with pytest.raises(CorruptLog) as info:
        open_log(tmp_path)
    assert info.value.path == path
    assert info.value.offset == pointers[4].offset
    assert str(path) in str(info.value) and f"offset {pointers[4].offset}" in str(info.value)
    assert "CRC32C" in str(info.value)


def test_a_crc_mismatch_in_the_last_record_is_not_taken_for_a_torn_write(tmp_path: Path) -> None:
    vlog = open_log(tmp_path)
    pointers = write(vlog, range(1, 4))
    vlog.close()
    _corrupt(tmp_path / segment_name(1), pointers[-1].offset + HEADER.size + 3)
    with pytest.raises(CorruptLog) as info:
        open_log(tmp_path)
    assert info.value.offset == pointers[-1].offset


def test_a_bad_magic_inside_the_log_is_reported(tmp_path: Path) -> None:
    vlog = open_log(tmp_path)
    pointers = write(vlog, range(1, 11))
    vlog.close()
    _corrupt(tmp_path / segment_name(1), pointers[3].offset)
    with pytest.raises(CorruptLog) as info:
        open_log(tmp_path)
    assert info.value.offset == pointers[3].offset
    assert "magic" in str(info.value)


def test_a_damaged_length_followed_by_valid_records_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    vlog = open_log(tmp_path)
    pointers = write(vlog, range(1, 11))
    vlog.close()
    path = tmp_path / segment_name(1)
    with path.open("r+b") as f:
        f.seek(pointers[2].offset + 4)
        f.write(struct.pack("<Q", 1 << 40))
    with pytest.raises(CorruptLog) as info:
        open_log(tmp_path)
    assert info.value.offset == pointers[2].offset
    assert path.stat().st_size == pointers[-1].offset + HEADER.size + 100  # nothing was cut


def test_reading_a_damaged_record_of_a_sealed_segment_names_it(tmp_path: Path) -> None:
    vlog = open_log(tmp_path, segment_size=4096)
    pointers = write(vlog, range(1, 101))
    vlog.close()
    _corrupt(tmp_path / segment_name(1), pointers[1].offset + HEADER.size + 10)
    reopened = open_log(tmp_path, segment_size=4096)  # sealed segments are trusted at open
    with pytest.raises(CorruptLog) as info:
        reopened.read(pointers[1])
    assert info.value.path == tmp_path / segment_name(1)
    assert info.value.offset == pointers[1].offset
    reopened.close()


def test_a_segment_left_without_footer_by_a_crash_is_sealed_on_open(tmp_path: Path) -> None:
    vlog = open_log(tmp_path)
    pointers = write(vlog, range(1, 11))
    vlog.close()
    (tmp_path / segment_name(2)).touch()  # a crash right after creating the next segment
    reopened = open_log(tmp_path)
    assert reopened.head == Pointer(2, 0)
    raw = (tmp_path / segment_name(1)).read_bytes()
    assert FOOTER.unpack(raw[-FOOTER.size :]) == (10, FOOTER_MAGIC)
    assert reopened.read(pointers[-1]) == payload(10)
    reopened.close()


def test_gc_removes_the_oldest_sealed_segments_below_the_ts(tmp_path: Path) -> None:
    vlog = open_log(tmp_path, segment_size=4096)
    pointers = write(vlog, range(1, 201))
    count = vlog.segment_count()
    size = vlog.size_bytes
    first_kept = next(p.segment for ts, p in zip(range(1, 201), pointers, strict=True) if ts >= 100)
    removed = vlog.remove_before(100, below_segment=count)
    assert removed == list(range(1, first_kept))
    assert vlog.size_bytes < size
    assert not (tmp_path / segment_name(1)).exists()
    with pytest.raises(RecordGone):
        vlog.read(pointers[0])
    assert vlog.read(pointers[-1]) == payload(200)
    scanned = list(vlog.scan(Pointer(1, 0), vlog.head))
    assert scanned[0][0] == Pointer(first_kept, 0)
    assert vlog.remove_before(10**9, below_segment=count) == list(range(first_kept, count))
    vlog.close()
