"""Binlog builders, the probe/fake/DDL conventions, and the checks of parse_binlog."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest

from bridge import binlog as B
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2, row_pb2

T = row_pb2.ColumnType
MT = binlog_pb2.MutationType
Kind = row_pb2.SchemaChange


def table_schema(db: str = "shop", table: str = "t") -> row_pb2.TableSchema:
    return row_pb2.TableSchema(
        table_id=7,
        db=db,
        table=table,
        columns=[row_pb2.Column(id=1, name="id", type=T.BIGINT)],
        indexes=[row_pb2.Index(name="PRIMARY", primary=True, columns=["id"])],
        max_column_id=1,
    )


def create_table() -> row_pb2.SchemaChange:
    return row_pb2.SchemaChange(kind=Kind.CREATE_TABLE, db="shop", table="t", table_schema=table_schema())


def roundtrip(binlog: binlog_pb2.Binlog) -> binlog_pb2.Binlog:
    return B.parse_binlog(binlog.SerializeToString())


def test_mutation_builder_keeps_the_order_of_changes() -> None:
    builder = B.TableMutationBuilder(7)
    builder.insert(b"i1")
    builder.update(b"old1", b"new1")
    builder.delete(b"d1")
    builder.insert(b"i2")
    builder.update(b"old2", b"new2")
    assert len(builder) == 5
    mutation = builder.build()
    assert mutation.table_id == 7
    assert list(mutation.sequence) == [MT.Insert, MT.Update, MT.DeleteRow, MT.Insert, MT.Update]
    assert list(mutation.inserted_rows) == [b"i1", b"i2"]
    assert list(mutation.updated_rows) == [b"old1", b"new1", b"old2", b"new2"]
    assert list(mutation.deleted_rows) == [b"d1"]
    assert B.mutation_problem(mutation) is None
    assert len(builder) == 0 and builder.build().table_id == 7  # build() hands over and starts again


def test_the_builders_bulk_calls_are_their_single_calls_in_turn() -> None:
    one, bulk = B.TableMutationBuilder(7), B.TableMutationBuilder(7)
    for row in (b"i1", b"i2"):
        one.insert(row)
    one.update(b"o1", b"n1")
    one.update(b"o2", b"n2")
    one.delete(b"d1")
    one.insert(b"i3")
    bulk.insert_all([b"i1", b"i2"])
    bulk.update_all([b"o1", b"n1", b"o2", b"n2"])
    bulk.delete_all([b"d1"])
    bulk.insert_all([])
    bulk.insert_all([b"i3"])
    assert len(bulk) == len(one) == 6
    assert bulk.build().SerializeToString() == one.build().SerializeToString()
    with pytest.raises(ValueError, match="pairs"):
        bulk.update_all([b"o1"])


def test_prewrite_commit_rollback_round_trip() -> None:
    builder = B.TableMutationBuilder(7)
    builder.insert(b"row")
    prewrite = roundtrip(B.prewrite(100, [builder.build()], b"pk", schema_version=3))
    assert prewrite.tp == binlog_pb2.Prewrite and prewrite.start_ts == 100 and prewrite.prewrite_key == b"pk"
    value = B.read_prewrite_value(prewrite)
    assert value.schema_version == 3 and list(value.mutations[0].inserted_rows) == [b"row"]
    assert not B.is_ddl(prewrite) and not B.is_probe(prewrite) and not B.is_fake(prewrite)

    given = binlog_pb2.PrewriteValue(schema_version=9)
    assert B.read_prewrite_value(B.prewrite(100, given)).schema_version == 9

    commit = roundtrip(B.commit(100, 105))
    assert (commit.tp, commit.start_ts, commit.commit_ts) == (binlog_pb2.Commit, 100, 105)
    rollback = roundtrip(B.rollback(100))
    assert (rollback.tp, rollback.start_ts, rollback.commit_ts) == (binlog_pb2.Rollback, 100, 0)
    assert not B.is_fake(rollback)


def test_probe_and_fake_binlog_conventions() -> None:
    probe = roundtrip(B.probe())
    assert B.is_probe(probe) and not B.is_fake(probe)
    assert B.is_probe(binlog_pb2.Binlog())  # the empty message is a probe too
    fake = roundtrip(B.fake_binlog(42))
    assert fake.tp == binlog_pb2.Rollback and fake.start_ts == fake.commit_ts == 42
    assert B.is_fake(fake) and not B.is_probe(fake)


def test_ddl_prewrite_carries_query_job_and_resulting_schema() -> None:
    ddl = roundtrip(B.ddl_prewrite(200, "CREATE TABLE t (id BIGINT PRIMARY KEY)", 11, create_table()))
    assert B.is_ddl(ddl) and ddl.ddl_job_id == 11 and ddl.ddl_query.startswith(b"CREATE TABLE")
    change = B.read_schema_change(ddl)
    assert change is not None and change.table_schema.columns[0].name == "id"
    assert B.read_schema_change(B.commit(1, 2)) is None


@pytest.mark.parametrize(
    "call",
    [
        lambda: B.commit(100, 100),
        lambda: B.commit(0, 5),
        lambda: B.rollback(-1),
        lambda: B.prewrite(2**63, []),
        lambda: B.fake_binlog(0),
        lambda: B.commit(True, 5),
        lambda: B.ddl_prewrite(1, "", 1, create_table()),
        lambda: B.ddl_prewrite(1, "DROP TABLE t", 0, create_table()),
        lambda: B.ddl_prewrite(
            1,
            "DROP TABLE t",
            1,
            row_pb2.SchemaChange(kind=Kind.DROP_TABLE, db="shop", table="t", table_schema=table_schema()),
        ),
    ],
)
def test_builders_refuse_misuse(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        call()


def serialized(**fields: object) -> bytes:
    return binlog_pb2.Binlog(**fields).SerializeToString()  # type: ignore[arg-type]


def prewrite_value(mutation: binlog_pb2.TableMutation) -> bytes:
    return binlog_pb2.PrewriteValue(mutations=[mutation]).SerializeToString()


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\x08", "payload is not a binlog.Binlog"),
        (b"\x2a\x05ab", "payload is not a binlog.Binlog"),
        (bytes([0x08, 99, 0x10, 5]), "unknown binlog type 99"),
        # field 1 with another wire type: named by kind, not by an object's repr
        (bytes([0x0A, 0x02, 0x61, 0x62, 0x10, 5]), r"unknown binlog type \(2 bytes, not a number\)$"),
        (bytes([0x0B, 0x0C, 0x10, 5]), r"unknown binlog type \(a group, not a number\)$"),
        (
            serialized(tp=binlog_pb2.Commit, start_ts=5),
            r"a Commit needs commit_ts > start_ts, got commit_ts 0",
        ),
        (serialized(tp=binlog_pb2.Commit, start_ts=5, commit_ts=4), "a Commit needs commit_ts > start_ts"),
        (serialized(tp=binlog_pb2.Rollback, start_ts=5, commit_ts=9), "unless it is fake"),
        (serialized(tp=binlog_pb2.Prewrite, start_ts=5, commit_ts=9), "a Prewrite carries no commit_ts"),
        (serialized(tp=binlog_pb2.Prewrite, start_ts=-5), "start_ts must be positive"),
        (serialized(tp=binlog_pb2.Prewrite, start_ts=5, ddl_job_id=3), "needs ddl_job_id > 0 and ddl_query"),
        (serialized(tp=binlog_pb2.PreDDL, start_ts=5, ddl_query=b"x"), "needs ddl_job_id > 0"),
        (serialized(tp=binlog_pb2.Prewrite, start_ts=5, ddl_job_id=-1), "ddl_job_id must be positive"),
        (serialized(tp=binlog_pb2.Prewrite, start_ts=5, prewrite_value=b"\xff"), "prewrite_value is not"),
        (
            serialized(
                tp=binlog_pb2.Prewrite,
                start_ts=5,
                prewrite_value=prewrite_value(
                    binlog_pb2.TableMutation(table_id=3, updated_rows=[b"a"], sequence=[MT.Update])
                ),
            ),
            "table id 3: updated_rows holds 1 images; updates come in old/new pairs",
        ),
        (
            serialized(
                tp=binlog_pb2.Prewrite,
                start_ts=5,
                prewrite_value=prewrite_value(
                    binlog_pb2.TableMutation(table_id=3, inserted_rows=[b"a", b"b"], sequence=[MT.Insert])
                ),
            ),
            "sequence has 1 Insert entries for 2 Insert rows",
        ),
        (
            serialized(
                tp=binlog_pb2.Prewrite,
                start_ts=5,
                prewrite_value=prewrite_value(
                    binlog_pb2.TableMutation(deleted_rows=[b"a"], sequence=[MT.DeleteRow, MT.DeleteRow])
                ),
            ),
            "sequence has 2 DeleteRow entries for 1 DeleteRow rows",
        ),
        (
            serialized(
                tp=binlog_pb2.Prewrite,
                start_ts=5,
                prewrite_value=prewrite_value(binlog_pb2.TableMutation(updated_rows=[b"a", b"b"])),
            ),
            "sequence has 0 Update entries for 1 Update rows",
        ),
        (
            serialized(
                tp=binlog_pb2.Prewrite, start_ts=5, ddl_job_id=1, ddl_query=b"x", ddl_schema_change=b"\x0a"
            ),
            "ddl_schema_change is not",
        ),
    ],
)
def test_parse_binlog_refuses_malformed_payloads(payload: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        B.parse_binlog(payload)


def test_unknown_mutation_types_are_refused() -> None:
    # TableMutation{sequence: [Insert, 9], inserted_rows: ["a"]}: 9 is kept as an unknown field
    mutation = bytes([0x38, 0x00, 0x38, 0x09, 0x12, 0x01, 0x61])
    value = bytes([0x12, len(mutation)]) + mutation
    with pytest.raises(ProtocolError, match="sequence holds unknown mutation type 9"):
        B.parse_binlog(serialized(tp=binlog_pb2.Prewrite, start_ts=5, prewrite_value=value))


def test_shallow_parse_skips_the_prewrite_value() -> None:
    payload = serialized(tp=binlog_pb2.Prewrite, start_ts=5, prewrite_value=b"\xff")
    assert B.parse_binlog(payload, deep=False).start_ts == 5


def test_a_pump_merged_commit_with_changes_is_valid() -> None:
    builder = B.TableMutationBuilder(1)
    builder.delete(b"row")
    merged = B.prewrite(10, [builder.build()])
    merged.tp, merged.commit_ts = binlog_pb2.Commit, 12
    assert roundtrip(merged).commit_ts == 12


def schema_change_binlog(change: row_pb2.SchemaChange) -> bytes:
    return serialized(
        tp=binlog_pb2.Prewrite,
        start_ts=5,
        ddl_job_id=1,
        ddl_query=b"ddl",
        ddl_schema_change=change.SerializeToString(),
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (row_pb2.SchemaChange(db="shop", table="t"), "schema change of unknown kind 0"),
        (row_pb2.SchemaChange(kind=cast(Kind.Kind, 99), db="shop"), "unknown kind 99"),  # no kind is 99
        (
            row_pb2.SchemaChange(kind=Kind.CREATE_TABLE, db="shop"),
            "CREATE_TABLE must name its database and table",
        ),
        (row_pb2.SchemaChange(kind=Kind.DROP_DATABASE), "DROP_DATABASE must name its database"),
        (
            row_pb2.SchemaChange(kind=Kind.ALTER_TABLE, db="shop", table="t"),
            "must carry the resulting table_schema",
        ),
        (
            row_pb2.SchemaChange(kind=Kind.DROP_TABLE, db="shop", table="t", table_schema=table_schema()),
            "DROP_TABLE carries no table_schema",
        ),
        (
            row_pb2.SchemaChange(kind=Kind.CREATE_TABLE, db="shop", table="u", table_schema=table_schema()),
            "carries the schema of shop.t",
        ),
        (
            row_pb2.SchemaChange(kind=Kind.RENAME_TABLE, db="shop", table="t", table_schema=table_schema()),
            "must name old_db and old_table",
        ),
        (
            row_pb2.SchemaChange(
                kind=Kind.TRUNCATE_TABLE,
                db="shop",
                table="t",
                table_schema=row_pb2.TableSchema(
                    db="shop", table="t", columns=[row_pb2.Column(id=1, name="a")]
                ),
            ),
            "column 'a' has no known type",
        ),
    ],
)
def test_schema_changes_follow_the_rules(change: row_pb2.SchemaChange, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        B.parse_binlog(schema_change_binlog(change))
    assert B.schema_change_problem(change) is not None


@pytest.mark.parametrize(
    "change",
    [
        row_pb2.SchemaChange(kind=Kind.CREATE_DATABASE, db="shop"),
        row_pb2.SchemaChange(kind=Kind.DROP_TABLE, db="shop", table="t"),
        row_pb2.SchemaChange(kind=Kind.ALTER_TABLE, db="shop", table="t", table_schema=table_schema()),
        row_pb2.SchemaChange(
            kind=Kind.RENAME_TABLE,
            db="shop",
            table="t",
            old_db="old",
            old_table="o",
            table_schema=table_schema(),
        ),
    ],
)
def test_valid_schema_changes_parse(change: row_pb2.SchemaChange) -> None:
    parsed = B.read_schema_change(B.parse_binlog(schema_change_binlog(change)))
    assert parsed == change


def test_original_ddl_binlog_without_schema_change_is_valid() -> None:
    payload = serialized(tp=binlog_pb2.Prewrite, start_ts=5, ddl_job_id=4, ddl_query=b"CREATE DATABASE x")
    assert B.is_ddl(B.parse_binlog(payload))


def test_iter_changes_walks_the_sequence() -> None:
    builder = B.TableMutationBuilder(7)
    builder.insert(b"a")
    builder.update(b"a", b"a2")
    builder.delete(b"b")
    builder.insert(b"c")
    changes = list(B.iter_changes(builder.build()))
    assert changes == [
        (MT.Insert, None, b"a"),
        (MT.Update, b"a", b"a2"),
        (MT.DeleteRow, b"b", None),
        (MT.Insert, None, b"c"),
    ]
    assert changes[1].before == b"a" and changes[1].after == b"a2"


def test_iter_changes_refuses_inconsistent_and_obsolete_mutations() -> None:
    with pytest.raises(ProtocolError, match="table id 3: sequence has 1 Insert entries for 0 Insert rows"):
        list(B.iter_changes(binlog_pb2.TableMutation(table_id=3, sequence=[MT.Insert])))
    with pytest.raises(ProtocolError, match="obsolete mutation type DeleteID has no row image"):
        list(B.iter_changes(binlog_pb2.TableMutation(table_id=3, deleted_ids=[1], sequence=[MT.DeleteID])))
