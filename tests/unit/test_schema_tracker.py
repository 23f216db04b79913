"""The schema tracker (DDL kinds, snapshots) and the event builder that decodes rows
with the schema valid at each transaction's commit_ts."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bridge.binlog import TableMutationBuilder, commit, ddl_prewrite, prewrite
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2, row_pb2
from bridge.rowcodec import RowCodec
from bridge.sink.events import DDLEvent, TxnEvent
from bridge.sink.schema import SchemaTracker, SchemaTrackError
from drainer.collect.merger import PulledTxn
from drainer.collect.pull import scan_header
from drainer.sync.builder import EventBuilder, HaltError
from drainer.sync.filter import TableFilter

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange


def users(
    table_id: int = 10, extra: Sequence[row_pb2.Column] = (), name: str = "users"
) -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(table_id=table_id, db="shop", table=name)
    schema.columns.add(id=1, name="id", type=T.BIGINT)
    schema.columns.add(id=2, name="name", type=T.VARCHAR, length=24, nullable=True)
    schema.columns.extend(extra)
    schema.max_column_id = max(c.id for c in schema.columns)
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return schema


def create(schema: row_pb2.TableSchema) -> row_pb2.SchemaChange:
    return Change(kind=Change.CREATE_TABLE, db=schema.db, table=schema.table, table_schema=schema)


def alter(schema: row_pb2.TableSchema) -> row_pb2.SchemaChange:
    return Change(kind=Change.ALTER_TABLE, db=schema.db, table=schema.table, table_schema=schema)


def drop_column(schema: row_pb2.TableSchema, name: str) -> row_pb2.TableSchema:
    out = row_pb2.TableSchema()
    out.CopyFrom(schema)
    del out.columns[:]
    out.columns.extend(c for c in schema.columns if c.name != name)
    return out


def test_ddl_kinds_change_the_tracked_tables() -> None:
    tracker = SchemaTracker()
    tracker.apply(Change(kind=Change.CREATE_DATABASE, db="shop"))
    tracker.apply(Change(kind=Change.CREATE_DATABASE, db="shop"))  # IF NOT EXISTS
    tracker.apply(create(users()))
    email = row_pb2.Column(id=3, name="email", type=T.TEXT, nullable=True)
    tracker.apply(alter(users(extra=[email])))
    found = tracker.find("SHOP", "Users")
    assert found is not None and [c.name for c in found.schema.columns] == ["id", "name", "email"]
    renamed = users(extra=[email], name="customers")
    tracker.apply(
        Change(
            kind=Change.RENAME_TABLE,
            db="shop",
            table="customers",
            table_schema=renamed,
            old_db="shop",
            old_table="users",
        )
    )
    assert tracker.find("shop", "users") is None
    assert tracker.table(10) is not None and tracker.table(10).name == "shop.customers"  # type: ignore[union-attr]
    truncated = users(table_id=11, extra=[email], name="customers")
    tracker.apply(Change(kind=Change.TRUNCATE_TABLE, db="shop", table="customers", table_schema=truncated))
    assert tracker.table(10) is None and tracker.table(11) is not None
    tracker.apply(create(users(table_id=12, name="orders")))
    tracker.apply(Change(kind=Change.DROP_TABLE, db="shop", table="customers"))
    assert [t.name for t in tracker.tables] == ["shop.orders"]
    other = users(13)
    other.db = "other"
    tracker.apply(create(other))
    tracker.apply(Change(kind=Change.DROP_DATABASE, db="shop"))
    assert tracker.databases == ["other"] and [t.table_id for t in tracker.tables] == [13]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (alter(users(name="ghost")), "ALTER TABLE shop.ghost: the schema tracker knows no such table"),
        (Change(kind=Change.DROP_TABLE, db="shop", table="nope"), "DROP TABLE shop.nope"),
        (Change(kind=Change.DROP_DATABASE, db="nope"), "DROP DATABASE nope"),
        (create(users(table_id=99, name="users")), "a table of that name exists already"),
        (create(users(table_id=10, name="other")), "table id 10 belongs to shop.users"),
        (alter(users(extra=[row_pb2.Column(id=2, name="again", type=T.INT)])), "column id 2 is used twice"),
        (Change(kind=Change.KIND_UNSPECIFIED, db="shop"), "unknown kind"),
    ],
)
def test_a_ddl_that_cannot_be_applied_leaves_the_tracker_as_it_was(
    change: row_pb2.SchemaChange, message: str
) -> None:
    tracker = SchemaTracker()
    tracker.apply(create(users()))
    before = tracker.snapshot()
    with pytest.raises(SchemaTrackError, match=message):
        tracker.apply(change)
    assert tracker.snapshot() == before


def test_a_dropped_column_id_is_never_given_out_again() -> None:
    tracker = SchemaTracker()
    email = row_pb2.Column(id=3, name="email", type=T.TEXT, nullable=True)
    tracker.apply(create(users(extra=[email])))
    dropped = drop_column(users(extra=[email]), "email")
    tracker.apply(alter(dropped))
    reused = users(extra=[row_pb2.Column(id=3, name="phone", type=T.TEXT, nullable=True)])
    with pytest.raises(SchemaTrackError, match="reuses column id 3"):
        tracker.apply(alter(reused))


def test_snapshot_round_trip() -> None:
    tracker = SchemaTracker()
    tracker.apply(Change(kind=Change.CREATE_DATABASE, db="empty_db"))
    tracker.apply(create(users()))
    tracker.apply(create(users(table_id=20, name="orders")))
    restored = SchemaTracker.restore(tracker.snapshot())
    assert restored.snapshot() == tracker.snapshot()
    assert restored.databases == ["empty_db", "shop"]
    assert [t.schema for t in restored.tables] == [t.schema for t in tracker.tables]
    assert SchemaTracker.restore(b"").tables == []
    with pytest.raises(SchemaTrackError, match="not a bridge-schema/1 snapshot"):
        SchemaTracker.restore(b"garbage")
    with pytest.raises(SchemaTrackError, match="truncated"):
        SchemaTracker.restore(tracker.snapshot()[:-3])


# -- the builder: decoding with the schema valid at commit_ts ---------------------


class Stream:
    """Pulled transactions with increasing timestamps through one EventBuilder."""

    def __init__(
        self, table_filter: TableFilter | None = None, ignored: frozenset[int] = frozenset()
    ) -> None:
        self.tracker = SchemaTracker()
        self.builder = EventBuilder(self.tracker, table_filter or TableFilter(), ignored)
        self.ts = 1000
        self.snapshots: list[bytes] = []

    def pulled(self, binlog: binlog_pb2.Binlog) -> PulledTxn:
        self.ts += 10
        binlog.start_ts = self.ts
        binlog.MergeFrom(commit(self.ts, self.ts + 1))
        payload = binlog.SerializeToString()
        header = scan_header(payload)
        return PulledTxn(self.ts, self.ts + 1, payload, header.ddl_job_id > 0, header.value_span)

    def ddl(self, change: row_pb2.SchemaChange) -> DDLEvent | None:
        built = self.builder.build(self.pulled(ddl_prewrite(1, "ddl", 1, change)))
        assert built.snapshot is not None
        self.snapshots.append(built.snapshot)
        assert built.event is None or isinstance(built.event, DDLEvent)
        return built.event

    def dml(self, *mutations: binlog_pb2.TableMutation) -> TxnEvent | None:
        built = self.builder.build(self.pulled(prewrite(1, list(mutations))))
        assert built.snapshot is None
        assert built.event is None or isinstance(built.event, TxnEvent)
        return built.event


def inserts(schema: row_pb2.TableSchema, *rows: Sequence[object]) -> binlog_pb2.TableMutation:
    codec = RowCodec(schema)
    mutation = TableMutationBuilder(schema.table_id)
    for row in rows:
        mutation.insert(codec.encode(row))
    return mutation.build()


def test_rows_decode_with_the_schema_of_their_commit_ts_across_add_and_drop_column() -> None:
    stream = Stream()
    v1 = users()
    assert stream.ddl(create(v1)) is not None
    before_add = stream.dml(inserts(v1, (1, "a")))
    v2 = users(extra=[row_pb2.Column(id=3, name="email", type=T.TEXT, nullable=True)])
    stream.ddl(alter(v2))
    after_add = stream.dml(inserts(v2, (2, "b", "b@x")))
    v3 = drop_column(v2, "name")
    stream.ddl(alter(v3))
    after_drop = stream.dml(inserts(v3, (3, "c@x")))
    assert before_add is not None and after_add is not None and after_drop is not None
    # Decoded only now, after every DDL: each still uses its own schema.
    assert [(c.kind, c.after) for c in before_add.changes()] == [("insert", (1, "a"))]
    assert [c.after for c in after_add.changes()] == [(2, "b", "b@x")]
    [change] = list(after_drop.changes())
    assert change.after == (3, "c@x") and [c.name for c in change.table.columns] == ["id", "email"]
    assert before_add.row_count == 1


def test_the_seeds_transaction_decodes_in_sequence_order() -> None:
    stream = Stream()
    schema = users()
    stream.ddl(create(schema))
    codec = RowCodec(schema)
    mutation = TableMutationBuilder(schema.table_id)
    mutation.insert(codec.encode((1, "a")))
    mutation.insert(codec.encode((2, "b")))
    mutation.update(*codec.encode_update((1, "a"), (1, "c")))
    mutation.update(*codec.encode_update((2, "b"), (2, "d")))
    mutation.delete(codec.encode((2, "d")))
    mutation.insert(codec.encode((2, "c")))
    event = stream.dml(mutation.build())
    assert event is not None and event.row_count == 6
    assert [(c.kind, c.before, c.after) for c in event.changes()] == [
        ("insert", None, (1, "a")),
        ("insert", None, (2, "b")),
        ("update", (1, "a"), (1, "c")),
        ("update", (2, "b"), (2, "d")),
        ("delete", (2, "d"), None),
        ("insert", None, (2, "c")),
    ]
    assert [c.after for c in event.changes()][-1] == (2, "c")  # changes() can run again


def test_filtered_tables_are_tracked_but_not_emitted() -> None:
    stream = Stream(TableFilter(do_table=["shop.orders"]))
    assert stream.ddl(create(users())) is None
    assert stream.tracker.find("shop", "users") is not None
    orders = users(table_id=20, name="orders")
    assert stream.ddl(create(orders)) is not None
    assert stream.dml(inserts(users(), (1, "a"))) is None
    mixed = stream.dml(inserts(users(), (2, "b")), inserts(orders, (7, "o")))
    assert mixed is not None and [c.table.table for c in mixed.changes()] == ["orders"]


def test_ignored_commit_ts_is_skipped_even_for_a_ddl() -> None:
    stream = Stream(ignored=frozenset({1011}))
    built = stream.builder.build(stream.pulled(ddl_prewrite(1, "create", 1, create(users()))))
    assert built.event is None and built.snapshot is None
    assert stream.tracker.find("shop", "users") is None


def test_untrackable_input_halts_naming_the_commit_ts_and_the_way_out() -> None:
    stream = Stream()
    with pytest.raises(HaltError, match=r"commit_ts 1011: rows of table id 10.*ignore-txn-commit-ts"):
        stream.dml(inserts(users(), (1, "a")))
    with pytest.raises(
        HaltError, match=r"commit_ts 1021: the schema tracker cannot apply.*ignore-txn-commit-ts"
    ):
        stream.ddl(alter(users()))
    original = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, ddl_query=b"alter table t add c int", ddl_job_id=3)
    with pytest.raises(HaltError, match=r"commit_ts 1031: DDL binlog without ddl_schema_change"):
        stream.builder.build(stream.pulled(original))


def test_a_row_that_does_not_fit_its_schema_fails_when_decoded_naming_the_commit_ts() -> None:
    stream = Stream()
    stream.ddl(create(users()))
    wider = users(extra=[row_pb2.Column(id=3, name="email", type=T.TEXT, nullable=True)])
    event = stream.dml(inserts(wider, (1, "a", "a@x")))
    assert event is not None
    with pytest.raises(
        ProtocolError, match=r"commit_ts 1021: a row does not fit.*unknown column id 3.*ignore-txn"
    ):
        list(event.changes())


def test_a_large_transaction_decodes_from_its_located_rows() -> None:
    stream = Stream()
    schema = users()
    stream.ddl(create(schema))
    rows = [(i, f"name {i:06d} " + "x" * 12) for i in range(5000)]  # over SCAN_FROM_BYTES
    pulled = stream.pulled(prewrite(1, [inserts(schema, *rows)]))
    assert pulled.value_span is not None
    built = stream.builder.build(pulled)
    assert isinstance(built.event, TxnEvent) and built.event.row_count == 5000
    assert [c.after for c in built.event.changes()] == rows
