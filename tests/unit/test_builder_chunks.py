"""The event builder on chunked transactions: the same rows, in the same order, as when the
transaction came as one binlog; read one part at a time; the chunk binlogs handed on as ``parts``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bridge.binlog import BinlogType, commit, ddl_prewrite, prewrite
from bridge.binlogscan import scan_header
from bridge.chunks import ChunkAssembler, SpilledParts
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2, row_pb2
from bridge.sink.events import TxnEvent
from bridge.sink.schema import SchemaTracker
from drainer.collect.merger import PulledTxn
from drainer.sync.builder import EventBuilder, HaltError
from drainer.sync.filter import TableFilter
from tests.support.binlog_events import table_schema
from tests.support.chunked_events import prewrite_value

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange
# (kind, "db.table", before, after)
Spec = tuple[str, str, tuple[object, ...] | None, tuple[object, ...] | None]


class Stream:
    """Builds pulled transactions, whole or chunked, through one EventBuilder."""

    def __init__(self, spill_dir: Path, table_filter: TableFilter | None = None) -> None:
        self.tracker = SchemaTracker()
        self.builder = EventBuilder(self.tracker, table_filter or TableFilter())
        self.spill_dir = spill_dir
        self.ts = 1000
        for table_id, name in ((1, "users"), (2, "orders"), (3, "audit")):
            schema = table_schema(
                "shop", name, [("id", T.BIGINT), ("v", T.VARCHAR)], ["id"], table_id=table_id
            )
            change = Change(kind=Change.CREATE_TABLE, db="shop", table=name, table_schema=schema)
            self.build(self.pulled(ddl_prewrite(1, f"create {name}", table_id, change)))

    def pulled(self, binlog: binlog_pb2.Binlog, parts: SpilledParts | None = None) -> PulledTxn:
        self.ts += 10
        binlog.start_ts = self.ts
        binlog.MergeFrom(commit(self.ts, self.ts + 1))
        if parts is not None:
            binlog.chunks = parts.count
        payload = binlog.SerializeToString()
        header = scan_header(payload)
        return PulledTxn(self.ts, self.ts + 1, payload, header.ddl_job_id > 0, header.value_span, parts)

    def build(self, txn: PulledTxn) -> TxnEvent | None:
        event = self.builder.build(txn).event
        return event if isinstance(event, TxnEvent) else None

    def value(self, changes: Sequence[Spec]) -> binlog_pb2.PrewriteValue:
        """``changes`` as mutations, one per run of one table's changes (the order is kept)."""
        return prewrite_value(self.tracker, changes, schema_version=3)

    def whole(self, changes: Sequence[Spec]) -> PulledTxn:
        return self.pulled(prewrite(1, self.value(changes)))

    def chunked(self, runs: Sequence[Sequence[Spec]]) -> tuple[PulledTxn, list[bytes]]:
        """The last run is the final binlog's own; the others are parts 1..n, gathered as the
        puller gathers them. Also returns the part binlogs as sent."""
        assembler = ChunkAssembler("pump test", self.spill_dir)
        start_ts, commit_ts = self.ts + 10, self.ts + 11
        sent = []
        for index, run in enumerate(runs[:-1], start=1):
            part = binlog_pb2.Binlog(
                tp=BinlogType.PrewriteChunk,
                start_ts=start_ts,
                commit_ts=commit_ts,
                chunk=index,
                prewrite_value=self.value(run).SerializeToString(),
            ).SerializeToString()
            sent.append(part)
            assembler.add(part)
        final = prewrite(start_ts, self.value(runs[-1]), b"key")
        final.tp, final.commit_ts, final.chunks = BinlogType.Commit, commit_ts, len(runs) - 1
        parts = assembler.finish(final.SerializeToString())
        assert parts is not None
        return self.pulled(final, parts), sent


def rows(event: TxnEvent) -> list[tuple[str, str, object, object]]:
    return [(c.kind, c.table.table, c.before, c.after) for c in event.changes()]


def raw_rows(event: TxnEvent) -> list[tuple[str, str, bytes | None, bytes | None]]:
    assert event.raw is not None
    return [(kind, schema.table, before, after) for kind, schema, before, after, _ in event.raw()]


CHANGES: list[Spec] = [
    ("insert", "shop.users", None, (1, "a")),
    ("insert", "shop.users", None, (2, "b")),
    ("insert", "shop.orders", None, (10, "o")),
    ("update", "shop.users", (1, "a"), (1, "a2")),
    ("insert", "shop.users", None, (3, "c")),
    ("delete", "shop.users", (2, "b"), None),
    ("update", "shop.orders", (10, "o"), (10, "o2")),
    ("insert", "shop.audit", None, (100, "x")),
    ("delete", "shop.orders", (10, "o2"), None),
    ("insert", "shop.users", None, (4, "d")),
]


def split(changes: Sequence[Spec], cuts: Sequence[int]) -> list[list[Spec]]:
    bounds = [0, *cuts, len(changes)]
    return [list(changes[a:b]) for a, b in itertools.pairwise(bounds)]


@pytest.mark.parametrize(
    "cuts",
    [
        [1],  # the users mutation split across part 1 and the final
        [1, 4, 6],  # several tables' runs split; the final holds the tail
        [3, 5, 10],  # the final holds no change at all
        [0, 0, 2],  # empty parts
        list(range(1, 10)),  # one change per part
    ],
)
def test_a_chunked_transaction_decodes_as_the_whole_one(tmp_path: Path, cuts: list[int]) -> None:
    stream = Stream(tmp_path)
    whole = stream.build(stream.whole(CHANGES))
    txn, sent = stream.chunked(split(CHANGES, cuts))
    chunked = stream.build(txn)
    assert whole is not None and chunked is not None
    assert rows(chunked) == rows(whole)
    assert [c[:2] for c in rows(chunked)] == [(k, n.split(".")[1]) for k, n, _, _ in CHANGES]
    assert raw_rows(chunked) == raw_rows(whole)
    assert chunked.row_count == whole.row_count == len(CHANGES)
    assert whole.parts is None
    assert chunked.parts is not None
    assert list(chunked.parts()) == sent
    assert chunked.payload == txn.payload
    # decoding twice gives the same (each call reads the parts again)
    assert rows(chunked) == rows(whole)


def test_filtered_tables_are_left_out_of_every_part(tmp_path: Path) -> None:
    only_users = TableFilter(ignore_table=["shop.orders", "shop.audit"])
    stream = Stream(tmp_path, only_users)
    whole = stream.build(stream.whole(CHANGES))
    txn, _ = stream.chunked(split(CHANGES, [2, 7]))
    chunked = stream.build(txn)
    assert whole is not None and chunked is not None
    assert rows(chunked) == rows(whole)
    assert {c.table.table for c in chunked.changes()} == {"users"}
    assert chunked.row_count == whole.row_count == 6
    # a transaction all of whose parts hold only filtered tables builds nothing
    others = [c for c in CHANGES if c[1] != "shop.users"]
    txn, _ = stream.chunked(split(others, [1, 2]))
    assert stream.build(txn) is None


class CountingParts(SpilledParts):
    """Spilled parts that note how many values have been read so far."""

    def __init__(self, spill_dir: Path, start_ts: int, commit_ts: int) -> None:
        super().__init__(spill_dir, start_ts, commit_ts)
        self.read = 0

    def values(self) -> Iterator[bytes]:
        for value in super().values():
            self.read += 1
            yield value


def test_parts_are_read_one_at_a_time_as_the_sink_decodes(tmp_path: Path) -> None:
    stream = Stream(tmp_path)
    runs = split(CHANGES, [2, 4, 6])
    txn, sent = stream.chunked(runs)
    assert txn.parts is not None
    counting = CountingParts(tmp_path, txn.start_ts, txn.commit_ts)
    for part in sent:
        span = scan_header(part, locate=True).value_span
        assert span is not None
        counting.append(part, span)
    pulled = PulledTxn(txn.start_ts, txn.commit_ts, txn.payload, False, txn.value_span, counting)
    event = stream.build(pulled)
    assert event is not None
    assert counting.read == 3  # the builder read every part once to learn the tables
    changes = event.changes()
    next(changes)
    next(changes)
    assert counting.read == 4  # the first part only, so far
    next(changes)
    assert counting.read == 5
    assert len(list(changes)) == len(CHANGES) - 3
    assert counting.read == 6


def test_a_table_no_ddl_created_in_a_part_halts_naming_the_commit_ts(tmp_path: Path) -> None:
    stream = Stream(tmp_path)
    txn, _ = stream.chunked(split(CHANGES, [3]))
    assert txn.parts is not None
    stranger = binlog_pb2.PrewriteValue(mutations=[binlog_pb2.TableMutation(table_id=77)])
    part = binlog_pb2.Binlog(
        tp=BinlogType.PrewriteChunk,
        start_ts=txn.start_ts,
        commit_ts=txn.commit_ts,
        chunk=1,
        prewrite_value=stranger.SerializeToString(),
    ).SerializeToString()
    parts = SpilledParts(tmp_path, txn.start_ts, txn.commit_ts)
    parts.append(part, scan_header(part, locate=True).value_span or (0, 0))
    bad = PulledTxn(txn.start_ts, txn.commit_ts, txn.payload, False, txn.value_span, parts)
    with pytest.raises(HaltError, match=f"commit_ts {txn.commit_ts}: rows of table id 77"):
        stream.build(bad)


def test_a_part_that_is_not_a_prewrite_value_halts(tmp_path: Path) -> None:
    stream = Stream(tmp_path)
    txn, _ = stream.chunked(split(CHANGES, [3]))
    part = binlog_pb2.Binlog(
        tp=BinlogType.PrewriteChunk, start_ts=txn.start_ts, commit_ts=txn.commit_ts, chunk=1
    ).SerializeToString()
    garbage = part + b"\x2a\x03\xff\xff\xff"  # prewrite_value (field 5) of 3 bytes that parse as nothing
    parts = SpilledParts(tmp_path, txn.start_ts, txn.commit_ts)
    parts.append(garbage, scan_header(garbage, locate=True).value_span or (0, 0))
    bad = PulledTxn(txn.start_ts, txn.commit_ts, txn.payload, False, txn.value_span, parts)
    with pytest.raises(HaltError, match=f"commit_ts {txn.commit_ts}: prewrite_value is not a PrewriteValue"):
        stream.build(bad)


def test_released_parts_fail_the_decode_naming_the_commit_ts(tmp_path: Path) -> None:
    stream = Stream(tmp_path)
    txn, _ = stream.chunked(split(CHANGES, [3]))
    event = stream.build(txn)
    assert event is not None and txn.parts is not None
    txn.parts.close()
    with pytest.raises(ProtocolError, match=f"commit_ts {txn.commit_ts}"):
        list(event.changes())


def test_a_ddl_with_parts_is_refused(tmp_path: Path) -> None:
    stream = Stream(tmp_path)
    txn, _ = stream.chunked(split(CHANGES, [3]))
    schema = table_schema("shop", "more", [("id", T.BIGINT)], ["id"], table_id=9)
    change = Change(kind=Change.CREATE_TABLE, db="shop", table="more", table_schema=schema)
    ddl = stream.pulled(ddl_prewrite(1, "create more", 9, change), txn.parts)
    with pytest.raises(HaltError, match="a DDL is never chunked"):
        stream.build(ddl)
    assert stream.tracker.find("shop", "more") is None
