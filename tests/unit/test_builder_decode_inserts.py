"""decode_changes' route for a mutation of inserts only (no Change per row) against the general one."""

from __future__ import annotations

import pytest

from bridge.binlog import MutationType, prewrite
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2, row_pb2
from bridge.rowcodec import RowCodec
from drainer.sync.builder import decode_changes
from tests.support.binlog_events import table_schema

T = row_pb2.ColumnType
SCHEMA = table_schema("d", "t", [("id", T.INT), ("v", T.VARCHAR)], key=["id"], table_id=7)
CODEC = RowCodec(SCHEMA)


def payload(mutation: binlog_pb2.TableMutation) -> bytes:
    binlog = prewrite(10, [mutation])
    binlog.commit_ts = 11
    return binlog.SerializeToString()


def rows(*ids: int) -> list[bytes]:
    return [CODEC.encode((i, f"v{i}")) for i in ids]


def decoded(mutation: binlog_pb2.TableMutation) -> list[tuple[str, object, object, bool]]:
    changes = decode_changes(payload(mutation), None, {7: CODEC}, 11)
    return [(c.kind, c.before, c.after, c.snapshot) for c in changes]


def test_inserts_only_decode_in_order_with_the_snapshot_flag() -> None:
    mutation = binlog_pb2.TableMutation(
        table_id=7, inserted_rows=rows(1, 2, 3), sequence=[MutationType.Insert] * 3, snapshot=True
    )
    assert decoded(mutation) == [("insert", None, (i, f"v{i}"), True) for i in (1, 2, 3)]


def test_a_mixed_mutation_keeps_its_sequence_order() -> None:
    ins, upd, dele = MutationType.Insert, MutationType.Update, MutationType.DeleteRow
    mutation = binlog_pb2.TableMutation(
        table_id=7,
        inserted_rows=rows(1, 2),
        updated_rows=rows(3, 4),
        deleted_rows=rows(5),
        sequence=[ins, upd, dele, ins],
    )
    assert decoded(mutation) == [
        ("insert", None, (1, "v1"), False),
        ("update", (3, "v3"), (4, "v4"), False),
        ("delete", (5, "v5"), None, False),
        ("insert", None, (2, "v2"), False),
    ]


@pytest.mark.parametrize(
    ("inserted", "sequence", "deleted_ids", "problem"),
    [
        (2, [MutationType.Insert], [], "sequence has 1 Insert entries for 2 Insert rows"),
        (1, [MutationType.Insert, MutationType.DeleteID], [9], "obsolete mutation type DeleteID"),
        (1, [MutationType.Insert, MutationType.DeleteID], [], "sequence has 1 DeleteID entries for 0"),
        (2, [MutationType.Insert] * 3, [], "sequence has 3 Insert entries for 2 Insert rows"),
    ],
)
def test_an_inconsistent_mutation_of_inserts_is_refused_as_before(
    inserted: int, sequence: list[MutationType], deleted_ids: list[int], problem: str
) -> None:
    mutation = binlog_pb2.TableMutation(
        table_id=7, inserted_rows=rows(*range(inserted)), sequence=sequence, deleted_ids=deleted_ids
    )
    with pytest.raises(ProtocolError, match=f"commit_ts 11: .*{problem}"):
        decoded(mutation)
