"""Sink events built the way the drainer builds them: real binlogs through EventBuilder.

:class:`EventStream` encodes rows with :class:`bridge.rowcodec.RowCodec`,
wraps them in Prewrite binlogs turned into pulled Commit form (``tp =
Commit``, ``commit_ts`` set), and hands them to the drainer's own
:class:`drainer.builder.EventBuilder` and schema tracker, so sinks in tests see
exactly what the syncer gives them: lazy ``changes()`` with decoded values.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from bridge.binlog import BinlogType, TableMutationBuilder, ddl_prewrite, prewrite
from bridge.proto import row_pb2
from bridge.sink.events import DDLEvent, Event, TxnEvent
from bridge.sink.schema import SchemaTracker
from drainer.collect.merger import PulledTxn
from drainer.collect.pull import scan_header
from drainer.sinks.file.binlogfile import BinlogFileWriter
from drainer.sync.builder import EventBuilder
from drainer.sync.filter import TableFilter

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange
Row = Sequence[object]
RowChange = tuple[str, str, Row | None, Row | None]  # (kind, "db.table", before, after)


def table_schema(
    db: str,
    table: str,
    columns: Sequence[tuple[str, int] | row_pb2.Column],
    key: Sequence[str] = (),
    unique: Sequence[str] = (),
    table_id: int = 1,
) -> row_pb2.TableSchema:
    """A schema; columns as ``(name, type)`` (nullable) or full ``Column`` messages; ids from 1."""
    schema = row_pb2.TableSchema(db=db, table=table, table_id=table_id)
    for i, spec in enumerate(columns, start=1):
        if isinstance(spec, row_pb2.Column):
            column = schema.columns.add()
            column.CopyFrom(spec)
            column.id = column.id or i
        else:
            schema.columns.add(id=i, name=spec[0], type=spec[1], nullable=spec[0] not in key)
    schema.max_column_id = max(c.id for c in schema.columns)
    if key:
        schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=list(key))
    if unique:
        schema.indexes.add(name="uk", unique=True, columns=list(unique))
    return schema


class EventStream:
    """Builds events with increasing timestamps (commit_ts = start_ts + 1, steps of 10)."""

    def __init__(self, start: int = 1000) -> None:
        self.tracker = SchemaTracker()
        self.builder = EventBuilder(self.tracker, TableFilter())
        self.ts = start
        self._job = 0

    def _next(self) -> tuple[int, int]:
        self.ts += 10
        return self.ts, self.ts + 1

    def _pulled(self, binlog: object, start_ts: int, commit_ts: int) -> PulledTxn:
        binlog.tp = BinlogType.Commit  # type: ignore[attr-defined]
        binlog.commit_ts = commit_ts  # type: ignore[attr-defined]
        payload = binlog.SerializeToString()  # type: ignore[attr-defined]
        header = scan_header(payload)
        return PulledTxn(start_ts, commit_ts, payload, header.ddl_job_id > 0, header.value_span)

    def ddl(self, change: row_pb2.SchemaChange, query: str = "") -> DDLEvent:
        start_ts, commit_ts = self._next()
        self._job += 1
        text = query or f"-- {Change.Kind.Name(change.kind)} {change.db}.{change.table}"
        built = self.builder.build(
            self._pulled(ddl_prewrite(start_ts, text, self._job, change), start_ts, commit_ts)
        )
        assert isinstance(built.event, DDLEvent)
        return built.event

    def create(self, schema: row_pb2.TableSchema) -> DDLEvent:
        return self.ddl(
            Change(kind=Change.CREATE_TABLE, db=schema.db, table=schema.table, table_schema=schema)
        )

    def alter(self, schema: row_pb2.TableSchema) -> DDLEvent:
        return self.ddl(
            Change(kind=Change.ALTER_TABLE, db=schema.db, table=schema.table, table_schema=schema)
        )

    def schema(self, db: str, table: str) -> row_pb2.TableSchema:
        tracked = self.tracker.find(db, table)
        assert tracked is not None, f"{db}.{table} was not created"
        copy = row_pb2.TableSchema()
        copy.CopyFrom(tracked.schema)
        return copy

    def txn(self, changes: Iterable[RowChange]) -> TxnEvent:
        """One transaction of ``(kind, "db.table", before, after)`` changes, in order."""
        start_ts, commit_ts = self._next()
        builders: dict[int, TableMutationBuilder] = {}
        for kind, name, before, after in changes:
            db, table = name.split(".", 1)
            tracked = self.tracker.find(db, table)
            assert tracked is not None, f"{name} was not created"
            mutation = builders.setdefault(tracked.table_id, TableMutationBuilder(tracked.table_id))
            codec = tracked.codec
            if kind == "insert":
                mutation.insert(codec.encode(after or ()))
            elif kind == "update":
                mutation.update(*codec.encode_update(before or (), after or ()))
            else:
                mutation.delete(codec.encode(before or ()))
        binlog = prewrite(start_ts, [b.build() for b in builders.values()])
        built = self.builder.build(self._pulled(binlog, start_ts, commit_ts))
        assert isinstance(built.event, TxnEvent)
        return built.event

    def inserts(self, name: str, rows: Iterable[Row]) -> TxnEvent:
        return self.txn(("insert", name, None, row) for row in rows)


def events_commit_ts(events: Sequence[Event]) -> list[int]:
    return [e.commit_ts for e in events]


def write_binlog_files(
    directory: Path, stream: EventStream, count: int, max_size: int = 1 << 20
) -> list[int]:
    """A table's CREATE and ``count`` one-row inserts written as binlog files (the file sink's
    format) in ``directory``, rotating at ``max_size``; returns their commit_ts in order."""
    writer = BinlogFileWriter(directory, max_size)
    writer.open()
    t = row_pb2.ColumnType
    created = stream.create(table_schema("shop", "t", [("id", t.BIGINT), ("v", t.TEXT)], key=["id"]))
    writer.append(created.commit_ts, created.payload, created.change)
    stamps = [created.commit_ts]
    for i in range(count):
        event = stream.inserts("shop.t", [(i, "x" * 200)])
        writer.append(event.commit_ts, event.payload)
        stamps.append(event.commit_ts)
    writer.close()
    return stamps
