"""A row change's key and value bytes, and what the messages of a transaction and a table share.

Two routes write the same bytes: the table's
:class:`~bridge.avro.rowwriter.RowWriter` writes the Avro bodies straight
from the decoded tuples, with the source fields and ``ts_ms`` of a
transaction encoded once (:class:`Txn`, :class:`Table`); anything it does not
take goes through the records (:meth:`~bridge.avro.TableAvro.key_record`,
:meth:`~bridge.avro.TableAvro.envelope` and the codec), which writes the same
message or raises the error naming the table and commit_ts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.avro import TableAvro, source_record
from bridge.avro.rowwriter import FALLBACK_ERRORS, RowWriter
from bridge.proto import row_pb2
from bridge.sink.events import RowChange, TxnEvent
from bridge.tso import physical_ms
from drainer.sinks.kafka.encoding import Encoder
from drainer.sinks.kafka.topics import TableTopics

ROW_KIND = ("bridge.kind", b"row")
COMMIT_TS = "bridge.commit-ts"
POS = "bridge.pos"
# the bridge.pos header's value of the first positions of a transaction, made once
POS_BYTES = tuple(str(pos).encode() for pos in range(4096))


@dataclass(frozen=True, slots=True)
class Txn:
    """What the messages of one transaction share."""

    event: TxnEvent
    ts_ms: int
    commit_ts_header: bytes
    # the header bytes of a row message but its pos value's (as message_size counts them)
    header_bytes: int
    # the envelope's bytes after ``pos`` for the last change and for the others (RowWriter.tail);
    # None: ts_ms is outside Avro's long and the records' route writes (refuses) the rows
    tails: tuple[bytes, bytes] | None

    @classmethod
    def of(cls, event: TxnEvent) -> Txn:
        ts_ms = physical_ms(event.commit_ts)
        commit_ts = str(event.commit_ts).encode()
        size = len(ROW_KIND[0]) + len(ROW_KIND[1]) + len(COMMIT_TS) + len(commit_ts) + len(POS)
        try:
            tails: tuple[bytes, bytes] | None = (RowWriter.tail(True, ts_ms), RowWriter.tail(False, ts_ms))
        except FALLBACK_ERRORS:
            tails = None
        return cls(event, ts_ms, commit_ts, size, tails)


@dataclass(frozen=True, slots=True)
class Table:
    """What the messages of one table in one transaction share."""

    avro: TableAvro
    topic: str
    key_subject: str
    value_subject: str
    # (key, commit_ts) -> the message's partition (TableTopics.partitioner)
    partition: Callable[[bytes | None, int], int]
    # the RowWriter route (None: the records' only): the framings and the source's first fields
    fast: RowWriter | None = None
    key_header: bytes = b""
    value_header: bytes = b""
    source: bytes = b""

    @classmethod
    def of(
        cls, schema: row_pb2.TableSchema, txn: Txn, topics: TableTopics, encoder: Encoder, cluster_id: int
    ) -> Table:
        """The key's and the value's schemas are registered or published here, before the first
        message that needs them (as the records' route does on its first encode)."""
        event = txn.event
        topic = topics.topic(schema.db, schema.table, event.commit_ts)
        avro = encoder.table_avro(schema)
        key_subject, value_subject = f"{topic}-key", f"{topic}-value"
        partition = topics.partitioner(topic, schema.db, schema.table)
        fast = avro.row_writer() if txn.tails is not None else None
        if fast is None:
            return cls(avro, topic, key_subject, value_subject, partition)
        key_header: bytes | None = b""
        if avro.key_schema is not None:
            key_header = encoder.header(key_subject, avro.key_schema, event.commit_ts, schema)
        value_header = encoder.header(value_subject, avro.value_schema, event.commit_ts, schema)
        try:
            source = fast.source(cluster_id, schema.db, schema.table, event.start_ts, event.commit_ts)
        except FALLBACK_ERRORS:
            key_header = None
        if key_header is None or value_header is None:
            return cls(avro, topic, key_subject, value_subject, partition)
        return cls(avro, topic, key_subject, value_subject, partition, fast, key_header, value_header, source)


def encode_row(
    encoder: Encoder,
    txn: Txn,
    table: Table,
    change: RowChange,
    image: tuple[object, ...],
    pos: int,
    last: bool,
    cluster_id: int,
) -> tuple[bytes | None, bytes]:
    """The key (None for a keyless table) and the value of one row change; ``image`` is its after
    image, or before for a delete."""
    fast, tails = table.fast, txn.tails
    if fast is not None and tails is not None:
        try:
            key = None if table.avro.key_schema is None else fast.key(table.key_header, image)
            value = fast.envelope(
                table.value_header,
                change.kind,
                change.snapshot,
                change.before,
                change.after,
                table.source,
                pos,
                tails[0] if last else tails[1],
            )
            return key, value
        except FALLBACK_ERRORS:
            pass  # the records' route below writes it, or says why it cannot
    event, schema, avro = txn.event, change.table, table.avro
    key = None
    if avro.key_schema is not None:
        key_record = avro.key_record(image)
        key = encoder.encode(table.key_subject, avro.key_schema, key_record, event.commit_ts, schema)
    source = source_of(txn, change, pos, last, cluster_id)
    envelope = avro.envelope(
        change.kind, change.before, change.after, source, txn.ts_ms, snapshot=change.snapshot
    )
    value = encoder.encode(table.value_subject, avro.value_schema, envelope, event.commit_ts, schema)
    return key, value


def source_of(txn: Txn, change: RowChange, pos: int, last: bool, cluster_id: int) -> dict[str, Any]:
    """The ``source`` record of one row change."""
    event = txn.event
    return source_record(
        cluster_id=cluster_id,
        db=change.table.db,
        table=change.table.table,
        start_ts=event.start_ts,
        commit_ts=event.commit_ts,
        pos=pos,
        last=last,
    )
