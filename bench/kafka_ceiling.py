"""The two ceilings of ``binlog-bridge bench kafka``: what a bare producer does
with messages encoded beforehand, and what a user writing the same rows to
Kafka by hand does: encode each with fastavro, then produce it.

Both produce with the kafka sink's own producer settings to a fresh topic of
as many partitions, warmed up first with one message per partition (as the
sink's producer is by the CREATE TABLE), with a shared delivery callback
counting failures, then ``flush``. The hand encoder writes byte for byte
what the sink writes (checked before timing): the same key and envelope
schemas, the same framing, partition and headers.
"""

from __future__ import annotations

import argparse
import datetime
import io
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import fastavro
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bridge.avro import source_record, table_avro
from bridge.proto import row_pb2
from bridge.sink.events import TxnEvent
from bridge.tso import physical_ms

Headers = list[tuple[str, str | bytes | None]]
Encoded = tuple[bytes, bytes, int, Headers]  # key, value, partition, headers

_EPOCH = datetime.datetime(1970, 1, 1)
_MICROSECOND = datetime.timedelta(microseconds=1)


class HandEncoder:
    """Rows to messages the way a user would write it: dicts and ``fastavro.schemaless_writer``.

    The schemas are the sink's (a consumer must be able to read both), taken
    as JSON; the framing (single-object fingerprint or registry id) is the
    sink's header of the first message, which is the same for every message.
    """

    def __init__(
        self, schema: row_pb2.TableSchema, key_header: bytes, value_header: bytes, partitions: int
    ) -> None:
        avro = table_avro(schema)
        assert avro.key_schema is not None, "the bench table has a primary key"
        row_schema = avro.value_schema["fields"][0]["type"][1]  # before: ["null", Value]
        self._names = [f["name"] for f in row_schema["fields"]]
        self._key_names = [f["name"] for f in avro.key_schema["fields"]]
        self._key_positions = [self._names.index(n) for n in self._key_names]
        self._datetimes = [
            i for i, f in enumerate(row_schema["fields"]) if "local-timestamp-micros" in str(f["type"])
        ]
        self._key_schema = fastavro.parse_schema(avro.key_schema)
        self._value_schema = fastavro.parse_schema(avro.value_schema)
        self._key_header, self._value_header = key_header, value_header
        self._partitions = partitions

    def messages(self, txns: Iterable[TxnEvent], db: str, table: str) -> Iterator[Encoded]:
        for txn in txns:
            changes = list(txn.changes())
            ts_ms = physical_ms(txn.commit_ts)
            for pos, change in enumerate(changes):
                assert change.after is not None
                values: list[Any] = list(change.after)
                for i in self._datetimes:
                    if values[i] is not None:
                        values[i] = (values[i] - _EPOCH) // _MICROSECOND
                key_body = io.BytesIO()
                key = {n: values[p] for n, p in zip(self._key_names, self._key_positions, strict=True)}
                fastavro.schemaless_writer(key_body, self._key_schema, key)
                source = source_record(
                    cluster_id=1, db=db, table=table, start_ts=txn.start_ts, commit_ts=txn.commit_ts,
                    pos=pos, last=pos == len(changes) - 1,
                )  # fmt: skip
                envelope = {
                    "before": None,
                    "after": dict(zip(self._names, values, strict=True)),
                    "op": "c",
                    "source": source,
                    "ts_ms": ts_ms,
                }
                value = io.BytesIO()
                fastavro.schemaless_writer(value, self._value_schema, envelope)
                headers: Headers = [
                    ("bridge.kind", b"row"),
                    ("bridge.commit-ts", str(txn.commit_ts).encode()),
                    ("bridge.pos", str(pos).encode()),
                ]
                key_bytes = key_body.getvalue()
                partition = zlib.crc32(key_bytes) % self._partitions
                yield self._key_header + key_bytes, self._value_header + value.getvalue(), partition, headers


def check_same_bytes(made: Iterable[Encoded], expected: Sequence[Encoded]) -> None:
    """The hand encoder's messages equal the sink codec's (key, value, partition, headers)."""
    for n, (mine, theirs) in enumerate(zip(made, expected, strict=False)):
        if mine != theirs:
            raise RuntimeError(f"bench kafka: the hand encoder's message {n} differs from the sink codec's")


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=30)


def produce_all(
    args: argparse.Namespace, messages: Iterable[Encoded], settings: dict[str, Any]
) -> tuple[int, float]:
    """Produce ``messages`` (consumed as they are produced) to a fresh topic; (count, seconds)
    from the first message to the flush that acknowledged the last."""
    topic = f"bench-kafka-ceiling-{uuid.uuid4().hex[:8]}"
    create_topic(args.bootstrap_servers, topic, args.partitions)
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(error)

    producer = Producer(settings)
    for partition in range(args.partitions):
        producer.produce(topic, None, None, partition, on_delivery=delivered)
    if producer.flush(60) or failures:
        raise RuntimeError(f"bare producer: warm-up not delivered: {failures[:3]}")
    began = time.perf_counter()
    count = since_poll = 0
    for key, value, partition, headers in messages:
        while True:
            try:
                producer.produce(topic, value, key, partition, on_delivery=delivered, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        since_poll += 1
        if since_poll >= 256:
            since_poll = 0
            producer.poll(0)
    left = producer.flush(args.timeout)
    elapsed = time.perf_counter() - began
    if left or failures:
        raise RuntimeError(f"producer: {left} undelivered, {len(failures)} failed: {failures[:3]}")
    return count, elapsed
