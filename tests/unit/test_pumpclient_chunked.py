"""bridge.pumpclient.chunked: which binlogs are split, and the binlogs a split Prewrite becomes."""

from __future__ import annotations

import pytest

from bridge.binlog import INSERT, iter_changes, parse_binlog
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2
from bridge.pumpclient.chunked import _PartMaker, needs_chunks, parse_value


def _value(rows: int) -> binlog_pb2.PrewriteValue:
    mutation = binlog_pb2.TableMutation(table_id=4)
    for i in range(rows):
        mutation.inserted_rows.append(b"row %06d " % i + b"." * 80)
        mutation.sequence.append(INSERT)
    return binlog_pb2.PrewriteValue(schema_version=2, mutations=[mutation])


def _prewrite(value: binlog_pb2.PrewriteValue) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(
        tp=binlog_pb2.Prewrite, start_ts=77, prewrite_key=b"pk", prewrite_value=value.SerializeToString()
    )


def test_only_a_dml_prewrite_over_chunk_bytes_is_split() -> None:
    big = _prewrite(_value(100))
    size = len(big.prewrite_value)
    assert needs_chunks(big, size - 1)
    assert not needs_chunks(big, size)
    assert not needs_chunks(big, 0)  # 0 = never
    ddl = binlog_pb2.Binlog()
    ddl.CopyFrom(big)
    ddl.ddl_job_id, ddl.ddl_query = 5, b"CREATE TABLE t (a INT)"
    assert not needs_chunks(ddl, 1024)
    commit = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=77, commit_ts=78)
    assert not needs_chunks(commit, 1024)
    already = binlog_pb2.Binlog()
    already.CopyFrom(big)
    already.chunks = 3  # the caller wrote its own parts
    assert not needs_chunks(already, 1024)


def test_parts_then_the_final_prewrite() -> None:
    value = _value(500)
    binlog = _prewrite(value)
    maker = _PartMaker(binlog, value, 4096)
    payloads = []
    while True:
        payload, final = maker.next_payload()
        payloads.append(parse_binlog(payload))
        if final:
            break
    *parts, last = payloads
    assert len(parts) == maker.made > 5
    for index, part in enumerate(parts, start=1):
        assert (part.tp, part.start_ts, part.chunk, part.HasField("commit_ts")) == (
            binlog_pb2.PrewriteChunk,
            77,
            index,
            False,
        )
        assert not part.prewrite_key
        assert len(part.prewrite_value) <= 4096
    assert (last.tp, last.start_ts, last.chunks, last.prewrite_key) == (
        binlog_pb2.Prewrite,
        77,
        len(parts),
        b"pk",
    )
    values = [binlog_pb2.PrewriteValue.FromString(b.prewrite_value) for b in payloads]
    assert {v.schema_version for v in values} == {2}
    assert [c for v in values for m in v.mutations for c in iter_changes(m)] == list(
        iter_changes(value.mutations[0])
    )


def test_a_value_that_splits_into_one_part_is_a_plain_prewrite() -> None:
    value = _value(3)
    maker = _PartMaker(_prewrite(value), value, 1 << 20)
    payload, final = maker.next_payload()
    assert final and maker.made == 0
    assert parse_binlog(payload) == _prewrite(value)  # no chunks field


def test_a_malformed_value_is_refused() -> None:
    binlog = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=9, prewrite_value=b"\xff\xff\xff")
    with pytest.raises(ProtocolError, match="start_ts 9 cannot be split"):
        parse_value(binlog)
