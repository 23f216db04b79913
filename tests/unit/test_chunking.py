"""bridge.chunking: a PrewriteValue split into parts keeps every change, in order, within the bound."""

from __future__ import annotations

import itertools
import random

import pytest

from bridge.binlog import DELETE_ROW, INSERT, UPDATE, Change, iter_changes, mutation_problem
from bridge.chunking import _row_costs, iter_prewrite_parts, split_prewrite
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2

PrewriteValue = binlog_pb2.PrewriteValue


def _changes(value: PrewriteValue) -> list[tuple[int, bool, int, bytes | None, bytes | None]]:
    """(table_id, snapshot, kind, before, after) of every change, in order."""
    out: list[tuple[int, bool, int, bytes | None, bytes | None]] = []
    for mutation in value.mutations:
        assert mutation_problem(mutation) is None
        for change in iter_changes(mutation):
            out.append((mutation.table_id, mutation.snapshot, *change))
    return out


def _random_value(rng: random.Random) -> PrewriteValue:
    value = PrewriteValue(schema_version=rng.choice([1, 7, 1 << 40]))
    for _ in range(rng.randint(1, 5)):
        mutation = value.mutations.add(table_id=rng.randint(1, 1 << 50))
        if rng.random() < 0.2:
            mutation.snapshot = True
        uniform = rng.choice([None, None, INSERT, UPDATE, DELETE_ROW])  # some of one kind only
        for _ in range(rng.randint(0, 300)):
            kind = uniform if uniform is not None else rng.choice([INSERT, INSERT, UPDATE, DELETE_ROW])
            row = rng.randbytes(rng.choice([0, 1, 10, 100, 127, 128, 200, 2000]))
            if kind == INSERT:
                mutation.inserted_rows.append(row)
            elif kind == UPDATE:
                mutation.updated_rows.extend((row, rng.randbytes(rng.randint(0, 300))))
            else:
                mutation.deleted_rows.append(row)
            mutation.sequence.append(kind)
    return value


def _largest_change(value: PrewriteValue) -> int:
    """Serialized size of the biggest single-change part of ``value``."""
    largest = 0
    for mutation in value.mutations:
        for change in iter_changes(mutation):
            piece = _mutation_of(mutation.table_id, change)
            if mutation.HasField("snapshot"):
                piece.snapshot = mutation.snapshot
            part = PrewriteValue(schema_version=value.schema_version, mutations=[piece])
            largest = max(largest, part.ByteSize())
    return largest


@pytest.mark.parametrize("seed", range(100))
def test_random_values_split_keep_changes_and_bound(seed: int) -> None:
    rng = random.Random(seed)
    value = _random_value(rng)
    max_bytes = rng.choice([64, 300, 1024, 5000, 20000, value.ByteSize() - 1, value.ByteSize()])
    max_bytes = max(max_bytes, 1)
    parts = split_prewrite(value, max_bytes)
    assert parts, "at least one part"
    joined = [change for part in parts for change in _changes(part)]
    assert joined == _changes(value)
    bound = max(max_bytes, _largest_change(value))
    for part in parts:
        assert part.schema_version == value.schema_version
        assert part.ByteSize() <= bound
        # a part over max_bytes is one change alone
        if part.ByteSize() > max_bytes:
            assert len(_changes(part)) == 1
    # greedy: no part could have taken the next part's first change as well
    for part, following in itertools.pairwise(parts):
        first = following.mutations[0]
        if not len(first.sequence):
            continue  # an empty mutation that did not fit
        grown = PrewriteValue()
        grown.CopyFrom(part)
        last = grown.mutations[-1]
        if last.table_id != first.table_id:
            last = grown.mutations.add()
            last.MergeFrom(_first_change(first))
        else:
            last.MergeFrom(_first_change(first))
            last.ClearField("table_id")
            last.table_id = first.table_id
        assert grown.ByteSize() > max_bytes


def _first_change(mutation: binlog_pb2.TableMutation) -> binlog_pb2.TableMutation:
    return _mutation_of(mutation.table_id, next(iter_changes(mutation)))


def _mutation_of(table_id: int, change: Change) -> binlog_pb2.TableMutation:
    """A TableMutation of table ``table_id`` holding ``change`` alone."""
    piece = binlog_pb2.TableMutation(table_id=table_id)
    if change.kind == INSERT:
        assert change.after is not None
        piece.inserted_rows.append(change.after)
    elif change.kind == UPDATE:
        assert change.before is not None and change.after is not None
        piece.updated_rows.extend((change.before, change.after))
    else:
        assert change.before is not None
        piece.deleted_rows.append(change.before)
    piece.sequence.append(change.kind)
    return piece


def test_fitting_value_is_one_part_the_same_object() -> None:
    value = _random_value(random.Random(1))
    assert split_prewrite(value, value.ByteSize()) == [value]
    assert next(iter_prewrite_parts(value, 1 << 30)) is value


def test_one_table_split_keeps_table_and_snapshot_and_own_sequence() -> None:
    mutation = binlog_pb2.TableMutation(table_id=42, snapshot=True)
    for i in range(1000):
        mutation.inserted_rows.append(b"r%04d" % i + b"x" * 90)
        mutation.sequence.append(INSERT)
        if i % 3 == 0:
            mutation.updated_rows.extend((b"o%04d" % i, b"n%04d" % i))
            mutation.sequence.append(UPDATE)
    value = PrewriteValue(schema_version=9, mutations=[mutation])
    parts = split_prewrite(value, 4096)
    assert len(parts) > 20
    for part in parts:
        assert part.ByteSize() <= 4096
        assert [(m.table_id, m.snapshot, m.HasField("snapshot")) for m in part.mutations] == [
            (42, True, True)
        ]
        piece = part.mutations[0]
        assert len(piece.updated_rows) == 2 * list(piece.sequence).count(UPDATE)
    assert [c for p in parts for c in _changes(p)] == _changes(value)


def test_a_row_bigger_than_the_bound_is_a_part_alone() -> None:
    mutation = binlog_pb2.TableMutation(table_id=1)
    for row in (b"a" * 10, b"b" * 5000, b"c" * 10):
        mutation.inserted_rows.append(row)
        mutation.sequence.append(INSERT)
    parts = split_prewrite(PrewriteValue(schema_version=1, mutations=[mutation]), 1024)
    assert [list(p.mutations[0].inserted_rows) for p in parts] == [[b"a" * 10], [b"b" * 5000], [b"c" * 10]]


def test_presence_of_unset_fields_is_kept() -> None:
    mutation = binlog_pb2.TableMutation()  # no table_id, no snapshot set
    for _ in range(100):
        mutation.deleted_rows.append(b"z" * 50)
        mutation.sequence.append(DELETE_ROW)
    value = PrewriteValue(mutations=[mutation])  # no schema_version
    parts = split_prewrite(value, 500)
    assert len(parts) > 5
    for part in parts:
        assert not part.HasField("schema_version")
        assert not part.mutations[0].HasField("table_id")
        assert not part.mutations[0].HasField("snapshot")
        assert part.ByteSize() <= 500


def test_empty_mutations_are_kept_in_order() -> None:
    value = PrewriteValue(schema_version=3)
    value.mutations.add(table_id=5)
    full = value.mutations.add(table_id=6)
    for _ in range(50):
        full.inserted_rows.append(b"q" * 40)
        full.sequence.append(INSERT)
    value.mutations.add(table_id=7)
    parts = split_prewrite(value, 300)
    tables = [m.table_id for p in parts for m in p.mutations]
    assert tables[0] == 5 and tables[-1] == 7 and set(tables[1:-1]) == {6}
    assert [c for p in parts for c in _changes(p)] == _changes(value)


def test_obsolete_mutation_types_are_refused() -> None:
    mutation = binlog_pb2.TableMutation(table_id=1, deleted_ids=[1, 2])
    mutation.sequence.extend([binlog_pb2.DeleteID, binlog_pb2.DeleteID])
    filler = binlog_pb2.TableMutation(table_id=2, inserted_rows=[b"x" * 500], sequence=[INSERT])
    value = PrewriteValue(mutations=[filler, mutation])
    with pytest.raises(ProtocolError, match="obsolete"):
        split_prewrite(value, 100)


def test_max_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_bytes"):
        split_prewrite(PrewriteValue(), 0)


@pytest.mark.parametrize(
    "lengths",
    [[5, 100, 127], [0, 1, 127, 128, 129, 16383, 16384, 16385], [16385, (1 << 21) - 1], [1 << 21, 3]],
)
def test_row_sizes_match_protobuf_at_varint_boundaries(lengths: list[int]) -> None:
    rows = [b"r" * n for n in lengths]
    expected = [
        binlog_pb2.TableMutation(inserted_rows=[row]).ByteSize() for row in rows
    ]  # one row: exactly its field
    assert _row_costs(rows) == expected
