"""Chunked transactions built by hand, the way a pump serves them, then through the drainer's builder.

:func:`chunked_txn` writes a transaction's changes as n PrewriteChunk binlogs
(``chunk`` = 1..n, commit_ts set, still typed PrewriteChunk) and the final
binlog (the Prewrite re-typed Commit, ``chunks`` = n, holding the last part),
gathers the parts with :class:`bridge.chunks.ChunkAssembler` and hands the
:class:`~drainer.collect.merger.PulledTxn` to the stream's
:class:`~drainer.sync.builder.EventBuilder`: a sink sees what the syncer gives it,
a :class:`TxnEvent` with ``parts`` set.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bridge.binlog import BinlogType, TableMutationBuilder, prewrite
from bridge.binlogscan import scan_header
from bridge.chunks import ChunkAssembler
from bridge.proto import binlog_pb2
from bridge.sink.events import TxnEvent
from bridge.sink.schema import SchemaTracker
from drainer.collect.merger import PulledTxn
from tests.support.binlog_events import EventStream, Row

ChangeSpec = tuple[str, str, Row | None, Row | None]


def prewrite_value(
    tracker: SchemaTracker, changes: Sequence[ChangeSpec], schema_version: int = 0
) -> binlog_pb2.PrewriteValue:
    """One part's changes (``(kind, "db.table", before, after)``) as a PrewriteValue: one
    mutation per run of changes of one table, so the order across tables is kept."""
    mutations: list[binlog_pb2.TableMutation] = []
    current: TableMutationBuilder | None = None
    for kind, name, before, after in changes:
        db, table = name.split(".", 1)
        tracked = tracker.find(db, table)
        assert tracked is not None, f"{name} was not created"
        if current is None or current.table_id != tracked.table_id:
            if current is not None:
                mutations.append(current.build())
            current = TableMutationBuilder(tracked.table_id)
        codec = tracked.codec
        if kind == "insert":
            current.insert(codec.encode(after or ()))
        elif kind == "update":
            current.update(*codec.encode_update(before or (), after or ()))
        else:
            current.delete(codec.encode(before or ()))
    if current is not None:
        mutations.append(current.build())
    value = binlog_pb2.PrewriteValue(mutations=mutations)
    if schema_version:
        value.schema_version = schema_version
    return value


def chunk_binlogs(
    stream: EventStream, changes: Sequence[ChangeSpec], chunks: int
) -> tuple[int, int, list[bytes], bytes]:
    """``(start_ts, commit_ts, parts, final)``: ``changes`` split in ``chunks + 1`` runs in order,
    the first ``chunks`` as PrewriteChunk binlogs, the last in the final binlog, as pulled."""
    start_ts, commit_ts = stream._next()
    size = -(-len(changes) // (chunks + 1))
    runs = [changes[i * size : (i + 1) * size] for i in range(chunks + 1)]
    parts = [
        binlog_pb2.Binlog(
            tp=BinlogType.PrewriteChunk,
            start_ts=start_ts,
            commit_ts=commit_ts,
            chunk=index,
            prewrite_value=prewrite_value(stream.tracker, run).SerializeToString(),
        ).SerializeToString()
        for index, run in enumerate(runs[:-1], start=1)
    ]
    final = prewrite(start_ts, prewrite_value(stream.tracker, runs[-1]), b"key")
    final.tp = BinlogType.Commit
    final.commit_ts = commit_ts
    final.chunks = chunks
    return start_ts, commit_ts, parts, final.SerializeToString()


def chunked_txn(
    stream: EventStream, changes: Sequence[ChangeSpec], chunks: int, spill_dir: Path | None = None
) -> TxnEvent:
    """A TxnEvent of ``changes`` that travelled as ``chunks`` parts and a final binlog."""
    start_ts, commit_ts, parts, final = chunk_binlogs(stream, changes, chunks)
    assembler = ChunkAssembler("test", spill_dir)
    for part in parts:
        assembler.add(part)
    spilled = assembler.finish(final)
    header = scan_header(final)
    built = stream.builder.build(PulledTxn(start_ts, commit_ts, final, False, header.value_span, spilled))
    event = built.event
    assert isinstance(event, TxnEvent) and event.parts is not None
    return event
