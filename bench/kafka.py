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

Two ceilings, measured in the same run (:mod:`bench.kafka_ceiling`), each
producing with the sink's own producer settings (idempotent, ``acks=all``,
the same linger, compression and queue size) to a fresh topic of as many
partitions, then ``flush``:

- ``ceiling`` (``encode_and_produce``): what a user writes by hand: each row
  encoded with ``fastavro.schemaless_writer`` (key record and envelope as
  dicts, the sink's schemas and framing; byte for byte the sink's messages,
  checked before timing), then produced. ``ratio`` = value / ceiling.
- ``bare_producer``: the same messages encoded beforehand (not timed) and
  produced by a bare ``confluent_kafka.Producer``; ``bare_ratio`` = value /
  bare_producer.

Each side runs ``--repeat`` times, alternating; the best run of each is
reported.
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

from prometheus_client import CollectorRegistry

from bench.cpu import Counters, CpuMeter, broker_pid
from bench.drainer import row_values, table_schema
from bench.kafka_ceiling import Encoded, HandEncoder, Headers, check_same_bytes, produce_all
from bench.result import best_of, machine
from bridge.avro import RegistryCodec, SingleObjectCodec, source_record, table_avro
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from bridge.sink.contract import SinkContext
from bridge.sink.events import DDLEvent, Event, RowChange, TxnEvent
from bridge.tso import compose, physical_ms

DEFAULT_BOOTSTRAP = os.environ.get("BRIDGE_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
HEADER_BYTES = {"single-object": 10, "registry": 5}  # framing before the Avro body (partitioning skips it)


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

    config: dict[str, Any] = {
        "bootstrap-servers": args.bootstrap_servers,
        "prefix": prefix,
        "partitions": args.partitions,
        # librdkafka's statistics (its count of produce requests) often enough for a short run
        "producer": {"statistics.interval.ms": STATS_INTERVAL_MS},
    }
    if args.encoding == "registry":
        config["schema-registry-url"] = registry_url(args)
    return KafkaSink(config, data_dir)


STATS_INTERVAL_MS = 500
PRODUCE_REQUESTS = "bridge_sink_kafka_produce_requests_total"


def measure_sink(
    args: argparse.Namespace, ddl: DDLEvent, txns: Sequence[TxnEvent], data_dir: Path
) -> tuple[float, dict[str, Any]]:
    """Rows/s of the kafka sink from the first write of a transaction to the flush that acknowledges
    all, and what it cost: CPU µs per row of this process (the sink and librdkafka's threads) and of
    the broker (when it runs here), and the produce requests per second and per 1,000 rows."""
    sink = new_sink(args, f"bench-kafka-{uuid.uuid4().hex[:8]}", data_dir)
    registry = CollectorRegistry()
    sink.open(SinkContext(cluster_id=1, data_dir=data_dir, metrics_registry=registry))
    broker = broker_pid(args.bootstrap_servers)
    meter = CpuMeter({"sink": [os.getpid()], "broker": [broker] if broker else []})
    counters = Counters({"produce_requests": lambda: registry.get_sample_value(PRODUCE_REQUESTS)})
    try:
        sink.write([ddl])
        sink.flush()  # the topic exists and the schemas are published before timing starts
        settle_statistics(sink)
        last = txns[-1].commit_ts
        step = args.events_per_write
        meter.start()
        counters.start()
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
        meter.stop()
        settle_statistics(sink)  # the requests of the run counted (not timed)
        counted = counters.stop(args.rows, elapsed)
    finally:
        sink.close()
    rate: float = args.rows / elapsed
    progress(f"kafka sink: {args.rows:,} rows in {elapsed:.2f}s = {rate:,.0f} rows/s")
    costs = {"cpu_us_per_row": meter.per_row_us(args.rows), **counted}
    progress(f"kafka sink: {costs}")
    return rate, costs


def settle_statistics(sink: Any) -> None:
    """Wait for librdkafka's next statistics (the sink counts produce requests from them)."""
    time.sleep(2.5 * STATS_INTERVAL_MS / 1000)
    sink.flush()  # serves the statistics callback


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


def measure_bare(args: argparse.Namespace, messages: Sequence[Encoded], settings: dict[str, Any]) -> float:
    """Rows/s of a bare producer with the sink's settings producing the pre-encoded messages."""
    count, elapsed = produce_all(args, messages, settings)
    rate = count / elapsed
    progress(f"bare producer: {count:,} messages in {elapsed:.2f}s = {rate:,.0f} msgs/s")
    return rate


def hand_encoder(args: argparse.Namespace, messages: Sequence[Encoded]) -> HandEncoder:
    header = HEADER_BYTES[args.encoding]
    key, value = messages[0][0][:header], messages[0][1][:header]
    return HandEncoder(table_schema(), key, value, args.partitions)


def measure_encode_and_produce(
    args: argparse.Namespace, txns: Sequence[TxnEvent], encoder: HandEncoder, settings: dict[str, Any]
) -> float:
    """Rows/s of fastavro encoding by hand and producing each row, from the first row to the flush."""
    count, elapsed = produce_all(args, encoder.messages(txns, "bench", "orders"), settings)
    rate = count / elapsed
    progress(f"fastavro + producer: {count:,} rows in {elapsed:.2f}s = {rate:,.0f} rows/s")
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
        encoder = hand_encoder(args, messages)
        check_same_bytes(encoder.messages(txns[:20], "bench", "orders"), messages)
        values, ceilings, bare, costs = [], [], [], []
        for _ in range(args.repeat):
            ceilings.append(measure_encode_and_produce(args, txns, encoder, settings))
            bare.append(measure_bare(args, messages, settings))
            value, cost = measure_sink(args, ddl, txns, Path(name))
            values.append(value)
            costs.append(cost)
    result = best_of("kafka", "rows/s", values, ceilings, "encode_and_produce")
    result.update(costs[values.index(max(values))])  # those of the best run
    result["runs"]["bare_producer"] = [round(b, 1) for b in bare]
    result["bare_producer"] = round(max(bare), 1)
    result["bare_ratio"] = float(f"{result['value'] / max(bare):.4g}")
    return {
        **result,
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
        **machine(),
        "ceiling_is": "the same rows encoded by hand with fastavro.schemaless_writer (the sink's schemas and "
        "framing, byte for byte its messages) and produced by a bare confluent_kafka.Producer with the "
        "sink's producer settings, then flush; bare_producer: the same messages encoded beforehand",
    }
