"""Rows per second through the kafka sink into the broker, against a bare producer of the same messages.

Data: the 8-column ``bench.orders`` table of ``bench drainer`` (mixed types,
primary key ``id``), ``--rows`` inserted rows in transactions of
``--rows-per-txn``, built before anything is timed as the drainer's own
events (a CREATE TABLE :class:`~bridge.sink.events.DDLEvent`, then
:class:`~bridge.sink.events.TxnEvent`\\ s whose rows are already decoded, as the
syncer hands them over).

``value``: a :class:`drainer.sinks.kafka.KafkaSink` (``--encoding``:
single-object with the schemas topic, or registry: the Confluent wire format
with an in-process ``mock://`` schema registry,
``--partitions`` partitions, partition by key, its default producer
settings) gets the CREATE TABLE written and flushed (topic creation and the
schema's publication are not timed), then every transaction in
``write`` calls of ``--events-per-write`` events, then ``flush`` until its
acknowledged position is the last commit_ts: rows/s from the first write to
that flush (Avro encoding of keys and envelopes, partitioning, headers,
delivery bookkeeping, watermarks, all acknowledged by the broker).

``ceiling``: in the same run, the same messages (keys, values, partitions
and headers encoded beforehand with the same codec, not timed) produced by a
bare ``confluent_kafka.Producer`` with the sink's own producer settings
(idempotent, ``acks=all``, the same linger, compression and queue size) to a
fresh topic of as many partitions (warmed up first with one message per
partition, as the sink's producer is by the CREATE TABLE), a shared delivery
callback counting failures, then ``flush``. ``ratio`` = value / ceiling. Each side runs
``--repeat`` times, alternating; the best run of each is reported.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.drainer import row_values, table_schema
from bench.result import best_of
from bridge.avro import RegistryCodec, SingleObjectCodec, source_record, table_avro
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from bridge.sink.contract import SinkContext
from bridge.sink.events import DDLEvent, Event, RowChange, TxnEvent
from bridge.tso import compose, physical_ms

DEFAULT_BOOTSTRAP = os.environ.get("BRIDGE_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
HEADER_BYTES = {"single-object": 10, "registry": 5}  # framing before the Avro body (partitioning skips it)
Headers = list[tuple[str, str | bytes | None]]
Encoded = tuple[bytes, bytes, int, Headers]  # key, value, partition, headers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", default=DEFAULT_BOOTSTRAP, help=f"default {DEFAULT_BOOTSTRAP}")
    parser.add_argument("--rows", type=int, default=100_000, help="rows written (default 100000)")
    parser.add_argument("--rows-per-txn", type=int, default=10, help="rows per transaction (default 10)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the topics (default 3)")
    parser.add_argument(
        "--events-per-write", type=int, default=256, help="events per sink.write call (default 256)"
    )
    parser.add_argument(
        "--encoding", choices=sorted(HEADER_BYTES), default="single-object", help="default single-object"
    )
    parser.add_argument("--repeat", type=int, default=2, help="runs of each side, best kept (default 2)")
    parser.add_argument("--timeout", type=float, default=600.0, help="time limit of one run (default 600 s)")


def progress(message: str) -> None:
    print(f"bench kafka: {message}", file=sys.stderr, flush=True)


def build_events(args: argparse.Namespace) -> tuple[DDLEvent, list[TxnEvent]]:
    """The CREATE TABLE and every transaction, rows decoded exactly as the syncer hands them over."""
    schema = table_schema()
    codec = RowCodec(schema)
    base = compose(int(time.time() * 1000), 0)
    change = row_pb2.SchemaChange(
        kind=row_pb2.SchemaChange.CREATE_TABLE, db=schema.db, table=schema.table, table_schema=schema
    )
    ddl = DDLEvent(base + 1, base + 2, b"", "CREATE TABLE bench.orders (...)", change, None, schema)
    txns: list[TxnEvent] = []
    for n, first in enumerate(range(0, args.rows, args.rows_per_txn)):
        rows = [
            RowChange("insert", schema, None, codec.decode(codec.encode(row_values(i))))
            for i in range(first, min(first + args.rows_per_txn, args.rows))
        ]
        commit_ts = base + 10 + 2 * n
        txns.append(TxnEvent(commit_ts - 1, commit_ts, b"", decode=_replay(rows), row_count=len(rows)))
    return ddl, txns


def _replay(rows: list[RowChange]) -> Callable[[], Iterator[RowChange]]:
    return lambda: iter(rows)


def registry_url(args: argparse.Namespace) -> str:
    """One mock registry per run, shared by the sink and the ceiling's encoder (same process)."""
    if not getattr(args, "registry_url", ""):
        args.registry_url = f"mock://bench-kafka-{uuid.uuid4().hex[:8]}"
    return str(args.registry_url)


def new_sink(args: argparse.Namespace, prefix: str, data_dir: Path) -> Any:
    from drainer.sinks.kafka.sink import KafkaSink

    config = {"bootstrap-servers": args.bootstrap_servers, "prefix": prefix, "partitions": args.partitions}
    if args.encoding == "registry":
        config["schema-registry-url"] = registry_url(args)
    return KafkaSink(config, data_dir)


def measure_sink(args: argparse.Namespace, ddl: DDLEvent, txns: Sequence[TxnEvent], data_dir: Path) -> float:
    """Rows/s of the kafka sink from the first write of a transaction to the flush that acknowledges all."""
    sink = new_sink(args, f"bench-kafka-{uuid.uuid4().hex[:8]}", data_dir)
    sink.open(SinkContext(cluster_id=1, data_dir=data_dir))
    try:
        sink.write([ddl])
        sink.flush()  # the topic exists and the schemas are published before timing starts
        last = txns[-1].commit_ts
        step = args.events_per_write
        began = time.perf_counter()
        for i in range(0, len(txns), step):
            events: list[Event] = list(txns[i : i + step])
            sink.write(events)
        position: int = sink.flush()
        while position < last:
            if time.perf_counter() - began > args.timeout:
                raise RuntimeError(
                    f"kafka sink acknowledged commit_ts {position}, not {last}, in {args.timeout}s"
                )
            position = sink.flush()
        elapsed = time.perf_counter() - began
    finally:
        sink.close()
    rate: float = args.rows / elapsed
    progress(f"kafka sink: {args.rows:,} rows in {elapsed:.2f}s = {rate:,.0f} rows/s")
    return rate


def encode_messages(args: argparse.Namespace, txns: Sequence[TxnEvent]) -> list[Encoded]:
    """Every row's message as the sink encodes it (same codec, record builders, partitioning, headers)."""
    partitions, header = args.partitions, HEADER_BYTES[args.encoding]
    codec: SingleObjectCodec | RegistryCodec
    if args.encoding == "registry":
        from bridge.kafkaclient import schema_registry_client

        codec = RegistryCodec(schema_registry_client(registry_url(args)))
    else:
        codec = SingleObjectCodec(lambda fingerprint, schema_json: None)
    avro = table_avro(table_schema())
    topic = "bench.orders"
    out: list[Encoded] = []
    for txn in txns:
        changes = list(txn.changes())
        ts_ms = physical_ms(txn.commit_ts)
        for pos, change in enumerate(changes):
            assert change.after is not None and avro.key_schema is not None
            key = codec.encode(f"{topic}-key", avro.key_schema, avro.key_record(change.after))
            source = source_record(
                cluster_id=1, db="bench", table="orders", start_ts=txn.start_ts, commit_ts=txn.commit_ts,
                pos=pos, last=pos == len(changes) - 1,
            )  # fmt: skip
            envelope = avro.envelope("insert", None, change.after, source, ts_ms)
            value = codec.encode(f"{topic}-value", avro.value_schema, envelope)
            headers: Headers = [
                ("bridge.kind", b"row"),
                ("bridge.commit-ts", str(txn.commit_ts).encode()),
                ("bridge.pos", str(pos).encode()),
            ]
            out.append((key, value, zlib.crc32(key[header:]) % partitions, headers))
    return out


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(timeout=30)


def measure_ceiling(args: argparse.Namespace, messages: Sequence[Encoded], settings: dict[str, Any]) -> float:
    """Rows/s of a bare producer with the sink's settings producing the pre-encoded messages."""
    topic = f"bench-kafka-ceiling-{uuid.uuid4().hex[:8]}"
    create_topic(args.bootstrap_servers, topic, args.partitions)
    failures: list[KafkaError] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(error)

    producer = Producer(settings)
    # warm up as the sink is (its producer got the idempotent producer id and metadata before timing)
    for partition in range(args.partitions):
        producer.produce(topic, None, None, partition, on_delivery=delivered)
    if producer.flush(60) or failures:
        raise RuntimeError(f"bare producer: warm-up not delivered: {failures[:3]}")
    began = time.perf_counter()
    since_poll = 0
    for key, value, partition, headers in messages:
        while True:
            try:
                producer.produce(topic, value, key, partition, on_delivery=delivered, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        since_poll += 1
        if since_poll >= 256:
            since_poll = 0
            producer.poll(0)
    left = producer.flush(args.timeout)
    elapsed = time.perf_counter() - began
    if left or failures:
        raise RuntimeError(f"bare producer: {left} undelivered, {len(failures)} failed: {failures[:3]}")
    rate = len(messages) / elapsed
    progress(f"bare producer: {len(messages):,} messages in {elapsed:.2f}s = {rate:,.0f} msgs/s")
    return rate


def run(args: argparse.Namespace) -> dict[str, Any]:
    if (
        args.rows < 1
        or not 1 <= args.rows_per_txn <= args.rows
        or args.partitions < 1
        or args.events_per_write < 1
        or args.repeat < 1
        or args.timeout <= 0
    ):
        raise SystemExit(
            "bench kafka: --rows >= 1, --rows-per-txn 1..rows, --partitions >= 1, --events-per-write >= 1, "
            "--repeat >= 1, --timeout > 0"
        )
    ddl, txns = build_events(args)
    messages = encode_messages(args, txns)
    size = sum(len(m[1]) for m in messages) / len(messages)
    progress(f"{len(txns):,} transactions, {len(messages):,} messages pre-built (values of {size:.0f} bytes)")
    with tempfile.TemporaryDirectory(prefix="bench-kafka-") as name:
        settings = {
            k: v for k, v in new_sink(args, "bench-settings", Path(name)).producer_settings().items()
            if k != "statistics.interval.ms"
        }  # fmt: skip
        values, ceilings = [], []
        for _ in range(args.repeat):
            ceilings.append(measure_ceiling(args, messages, settings))
            values.append(measure_sink(args, ddl, txns, Path(name)))
    return {
        **best_of("kafka", "rows/s", values, ceilings, "bare_producer"),
        "params": {
            "rows": args.rows,
            "rows_per_txn": args.rows_per_txn,
            "partitions": args.partitions,
            "events_per_write": args.events_per_write,
            "columns": len(table_schema().columns),
            "encoding": args.encoding,
            "producer": {
                k: settings[k] for k in ("linger.ms", "acks", "enable.idempotence", "compression.type")
            },
        },
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "ceiling_is": "the same pre-encoded messages (keys, values, partitions, headers) produced by a bare "
        "confluent_kafka.Producer with the sink's producer settings, then flush",
    }
