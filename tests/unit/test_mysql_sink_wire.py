"""The MySQL sink's rows for worker processes: keys from a sparse decode, plans in the child.

``RowCodec.decode_sparse`` must give, at the positions asked for, exactly what ``decode`` gives
(every type, NULLs, rows whose column order differs from the schema's), so that routing by the
key columns alone gives the keys the in-process path computes; a child's :class:`Plan` must
plan what the dispatcher plans from decoded rows.
"""

from __future__ import annotations

import pytest

from bridge.errors import ProtocolError
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from bridge.sink.errors import SinkApplyError
from drainer.sinks.mysql.batch import Op, units
from drainer.sinks.mysql.translate import Tables
from drainer.sinks.mysql.wire import ChildTables, WireOp, sparse_keys
from tests.support import all_types

T = row_pb2.ColumnType


def keyed_schema() -> row_pb2.TableSchema:
    """all_types with a composite unique key over text and binary columns besides the primary key."""
    schema = all_types.schema("db")
    schema.indexes.add(name="uk", unique=True, columns=["vc", "bn"])
    return schema


def test_decode_sparse_gives_what_decode_gives_at_the_positions_asked_for() -> None:
    codec = RowCodec(all_types.schema("db"))
    every = range(len(all_types.COLUMNS))
    for row in all_types.ROWS:
        data = codec.encode(row)
        full = codec.decode(data)
        assert codec.decode_sparse(data, every) == list(full)
        sparse = codec.decode_sparse(data, (0, 3, 12))
        assert [sparse[i] for i in (0, 3, 12)] == [full[0], full[3], full[12]]
        assert all(sparse[i] is None for i in every if i not in (0, 3, 12))


def test_decode_sparse_reads_rows_in_another_column_order_and_refuses_bad_ones() -> None:
    schema = all_types.schema("db")
    codec = RowCodec(schema)
    data = codec.encode(all_types.ROWS[0])
    row = row_pb2.Row.FromString(data)
    shuffled = row_pb2.Row(column_ids=list(reversed(row.column_ids)), values=list(reversed(row.values)))
    again = codec.decode_sparse(shuffled.SerializeToString(), (0, 13))
    assert (again[0], again[13]) == (all_types.ROWS[0][0], all_types.ROWS[0][13])
    wrong = row_pb2.Row.FromString(data)
    wrong.values[0].Clear()
    wrong.values[0].string_value = "not a number"
    with pytest.raises(ProtocolError, match=r"db\.all_types\.id.*expected"):
        codec.decode_sparse(wrong.SerializeToString(), (0,))
    with pytest.raises(ProtocolError, match=r"not a bridge\.row\.Row"):
        codec.decode_sparse(b"\xff\xff", (0,))


def test_sparse_keys_are_the_keys_of_the_decoded_rows() -> None:
    schema = keyed_schema()
    codec = RowCodec(schema)
    table = Tables().get(codec.schema)
    assert table.key_columns == (0, 13, 15)
    rows = [codec.encode(row) for row in all_types.ROWS]
    for before, after in [(None, rows[0]), (rows[0], rows[1]), (rows[2], None), (rows[1], rows[2])]:
        decoded = [None if image is None else codec.decode(image) for image in (before, after)]
        assert sparse_keys(table, codec, before, after) == table.keys.keys(*decoded)


def test_a_child_plans_what_the_dispatcher_plans_and_names_a_row_that_does_not_fit() -> None:
    schema = keyed_schema()
    codec = RowCodec(schema)
    table = Tables().get(codec.schema)
    rows = [codec.encode(row) for row in all_types.ROWS]
    changes = [("insert", None, rows[0]), ("update", rows[0], rows[1]), ("delete", rows[2], None)]
    wire: list[WireOp] = [(7, kind, b, a, 100 + i, i == 2) for i, (kind, b, a) in enumerate(changes)]
    child = ChildTables()
    child.add(7, schema.SerializeToString())
    ops = []
    for _, kind, b, a, commit_ts, safe in wire:
        old, new = (None if image is None else codec.decode(image) for image in (b, a))
        ops.append(Op(kind, table.writer, old, new, commit_ts, safe, 0, table.keys.keys(old, new)))
    expected = units(ops, 2)
    planned = child.plan(wire, 2, True)()
    assert [[b.sql for b in u.batches] for u in planned] == [[b.sql for b in u.batches] for u in expected]
    assert [(u.ops, u.high_ts, u.counts) for u in planned] == [(u.ops, u.high_ts, u.counts) for u in expected]
    job = child.plan(wire, 2, True)
    child.forget(8)  # a job already made keeps its tables
    assert child.entries == {}
    assert len(job()) == len(expected)
    child.add(9, schema.SerializeToString())
    bad = row_pb2.Row.FromString(rows[0])
    bad.values[1].Clear()
    bad.values[1].string_value = "x"
    with pytest.raises(
        SinkApplyError, match=r"commit_ts 55: a row does not fit its schema: .*ignore-txn-commit-ts"
    ):
        child.plan([(9, "insert", None, bad.SerializeToString(), 55, False)], 2, True)()
