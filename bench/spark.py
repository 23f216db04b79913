"""Rows per second from a change topic to a committed tantivy index: the Spark index job against a
plain Python loop doing the same decoding and indexing.

Data: ``--rows`` row changes of the 8-column ``bench.orders`` table of
``bench drainer`` (``--updates`` of them updates of earlier rows), encoded
as the Kafka sink encodes them (single-object encoding, the schema on the
``<prefix>._schemas`` topic) and produced to a fresh topic of
``--partitions`` partitions before anything is timed.

``value``: ``spark_consumers.jobs.run`` with ``--available-now`` on
``--master`` (``local[2]``) over that topic into an empty index and
checkpoint, in the default ``--index-mode direct`` (each shard task reads its
own Kafka partitions; :mod:`spark_consumers.index.direct`): rows/s from the
query's start to its end (every batch's index committed). ``shuffle`` (for
information): the same job in ``--index-mode shuffle`` (rows through Spark,
repartitioned by document), with its CPU split under ``shuffle_cpu``. The
SparkSession is started before timing (its start-up is reported as
``session_seconds``), and one message per partition is read through the
data source first, so the Python workers have started.

``ceiling``: in the same run, what a user would hand-write without this
project (:mod:`bench.spark_ceiling`): one process with confluent-kafka,
fastavro's schemaless reader and tantivy (delete by id, add, one commit per
``--batch`` rows). ``ratio`` = value / ceiling; ``ceiling_cpu_us``: that process's CPU microseconds per
change (tantivy's threads included). ``ceiling_stages_us``: that loop's steps,
each timed alone over the first 20,000 changes after the timed runs
(:func:`bench.spark_ceiling.stage_costs`: decode, convert, document, delete,
add, commit, and their sum), so the ceiling's own cost on this machine is
broken down.

``loop`` (for information): one Python loop with no Spark using this project's
code: the same :class:`~spark_consumers.decode.ChangeDecoder` decodes each
message, and every ``--batch`` rows are reduced and applied to another empty
index exactly as a micro-batch is.

``driver_cpu_us``, ``job_cpu_us``: CPU microseconds per change of the
driver's Python process, and of the whole job (that process, its JVM, the
Python workers; from ``/proc``): the driver plans, the executors do the work.
``read_cpu_us`` (direct mode), ``reduce_cpu_us``, ``index_cpu_us``: of the
shard tasks (their own summaries): fetching, decoding and reducing each
partition's changes; reducing over the partitions (decoding the surviving
rows' Avro included); applying to tantivy and committing. ``tasks_cpu_us``:
their sum; ``spark_cpu_us``: the rest of ``job_cpu_us`` (Spark itself: the
JVM, scheduling, Python workers' framing, the driver). ``source_cpu_us``: a separate, untimed
pass reading the topic's compact rows through the data source into Spark
and dropping them (the whole process tree: Python reading, decoding and
reducing each range, and the JVM taking the rows in).
Each side runs ``--repeat`` times, alternating; the best run of each counts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from typing import Any, Literal

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench import spark_ceiling
from bench.drainer import row_values, table_schema
from bridge.avro import SingleObjectCodec, fingerprint_hex, source_record, table_avro
from bridge.tso import compose
from spark_consumers import jobs
from spark_consumers.config import JobConfig
from spark_consumers.decode import ChangeDecoder
from spark_consumers.source import kafka

STAGE_SAMPLE = 20_000  # changes the ceiling's steps are timed over, each alone (ceiling_stages_us)
DEFAULT_BOOTSTRAP = os.environ.get("BRIDGE_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", default=DEFAULT_BOOTSTRAP)
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--updates", type=float, default=0.2, help="share of the rows that are updates")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100_000, help="rows per micro-batch (both sides)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-shuffle", dest="shuffle", action="store_false",
                        help="leave out the informational --index-mode shuffle run")  # fmt: skip


def progress(message: str) -> None:
    print(f"bench spark: {message}", file=sys.stderr, flush=True)


def produce(bootstrap: str, prefix: str, rows: int, updates: float, partitions: int) -> str:
    """Fill ``<prefix>.bench.orders`` (and its schemas topic) with ``rows`` changes; the topic."""
    topic, schemas = f"{prefix}.bench.orders", f"{prefix}._schemas"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1), NewTopic(schemas, 1, 1)]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4"})

    def publish(fingerprint: int, schema_json: str) -> None:
        producer.produce(schemas, key=fingerprint_hex(fingerprint).encode(), value=schema_json.encode())

    codec, avro = SingleObjectCodec(publish), table_avro(table_schema())
    assert avro.key_schema is not None
    inserts = max(1, int(rows * (1 - updates)))
    for i in range(rows):
        row = row_values(i if i < inserts else i % inserts)
        op: Literal["insert", "update"] = "insert" if i < inserts else "update"
        source = source_record(
            cluster_id=1, db="bench", table="orders", start_ts=compose(1_700_000_000_000 + i, 0),
            commit_ts=compose(1_700_000_000_000 + i, 1), pos=0, last=True,
        )  # fmt: skip
        key = codec.encode(f"{topic}-key", avro.key_schema, avro.key_record(row))
        value = codec.encode(
            f"{topic}-value",
            avro.value_schema,
            avro.envelope(op, row if op == "update" else None, row, source, 0),
        )
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=zlib.crc32(key[10:]) % partitions,
                                 headers=[("bridge.kind", b"row")])  # fmt: skip
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    return topic


def warm_up(spark: Any, bootstrap: str, topic: str, partitions: int) -> None:
    """Read one message per partition through the data source, untimed: Spark's Python workers
    start and import the project once per session, not once per job (the loop's process has its
    imports done as well)."""
    first = json.dumps({topic: {str(p): 1 for p in range(partitions)}})
    reader = spark.read.format("bridge_changes").option("bootstrap.servers", bootstrap)
    reader.option("topics", topic).option("endingOffsets", first).load().count()


def tree_cpu_since(before: dict[int, float]) -> float:
    """CPU seconds this process tree (driver, JVM, Python workers) spent since ``before``."""
    after = spark_ceiling.tree_cpu_seconds(os.getpid())
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def measure_source(spark: Any, bootstrap: str, topic: str, rows: int) -> float:
    """CPU microseconds per change of the source alone: the index job's compact rows of the whole
    topic read into Spark and dropped (``noop``), untimed, the whole process tree counted."""
    before = spark_ceiling.tree_cpu_seconds(os.getpid())
    reader = (
        spark.read.format("bridge_changes").option("bootstrap.servers", bootstrap).option("topics", topic)
    )
    reader.option("rows", "latest").load().write.format("noop").mode("overwrite").save()
    return tree_cpu_since(before) / rows * 1e6


def measure_spark(
    spark: Any, bootstrap: str, topic: str, rows: int, batch: int, work: Path, mode: str = "direct"
) -> tuple[float, dict[str, float]]:
    """rows/s, and CPU microseconds per change: of the driver's Python process, of the job (the
    whole process tree), and of the shard tasks' read (direct mode), reduce (decoding included) and
    index stages."""
    config = JobConfig(
        kind="index", bootstrap_servers=bootstrap, topics=[topic], output=work / f"spark-index-{mode}",
        checkpoint=work / f"spark-checkpoint-{mode}", available_now=True, max_offsets_per_trigger=batch,
        index_mode=mode,
    )  # fmt: skip
    tree_before = spark_ceiling.tree_cpu_seconds(os.getpid())
    driver_before = time.process_time()
    began = time.perf_counter()
    job = jobs.RunningJob(spark, config, jobs.StopFlag())
    job.wait(sys.stderr)
    elapsed = time.perf_counter() - began
    driver = (time.process_time() - driver_before) / rows * 1e6
    total = tree_cpu_since(tree_before) / rows * 1e6
    summaries = [s for stats in job.handler.stats.values() for s in stats.shards]
    read = sum(s.get("read_cpu_seconds", 0.0) for s in summaries) / rows * 1e6
    reduce = sum(s["reduce_cpu_seconds"] for s in summaries) / rows * 1e6
    index = sum(s["cpu_seconds"] for s in summaries) / rows * 1e6 - reduce
    tasks = read + reduce + index
    progress(f"spark job ({mode}): {rows:,} rows in {elapsed:.2f}s = {rows / elapsed:,.0f} rows/s; CPU per "
             f"change: driver {driver:.1f} us, job {total:.1f} us (shard tasks {tasks:.1f}: read {read:.1f}, "
             f"reduce {reduce:.1f}, index {index:.1f}; Spark and the rest {total - tasks:.1f})")  # fmt: skip
    cpu = {"driver_cpu_us": driver, "job_cpu_us": total, "read_cpu_us": read, "reduce_cpu_us": reduce,
           "index_cpu_us": index, "tasks_cpu_us": tasks, "spark_cpu_us": total - tasks}  # fmt: skip
    return rows / elapsed, cpu


def measure_loop(bootstrap: str, topic: str, rows: int, batch: int, work: Path) -> float:
    """The ceiling: read, decode, reduce and index in one Python loop."""
    config = JobConfig(kind="index", bootstrap_servers=bootstrap, topics=[topic],
                       output=work / "loop-index", checkpoint=work / "unused")  # fmt: skip
    began = time.perf_counter()
    handler = jobs.BatchHandler(config)
    schema_topic = kafka.SchemaTopic(bootstrap, topic.split(".", 1)[0] + "._schemas", 10.0, None)
    decoder = ChangeDecoder(None, schema_topic.lookup)
    probe = kafka.EndProbe(bootstrap)
    ends = probe.ends(kafka.list_partitions(probe.consumer, [topic], False))
    consumer = Consumer(kafka.consumer_config(bootstrap))
    pending: list[dict[str, Any]] = []
    fields = ("topic", "partition", "offset", "db", "table", "op", "key", "before", "after", "types",
              "commit_ts", "position")  # fmt: skip
    for partition, end in ends[topic].items():
        for chunk in kafka.read_range(consumer, topic, int(partition), 0, end):
            for m in chunk:
                row = decoder.decode(topic, int(partition), m.offset() or 0, m.key(), m.value(), "row")
                if row is not None:
                    pending.append(dict(zip(fields, row, strict=True)))
            if len(pending) >= batch:
                handler.apply(pending, time.monotonic())
                pending = []
    if pending:
        handler.apply(pending, time.monotonic())
    handler.close()
    elapsed = time.perf_counter() - began
    for closing in (consumer, probe, schema_topic):
        closing.close()
    progress(f"plain loop: {rows:,} rows in {elapsed:.2f}s = {rows / elapsed:,.0f} rows/s")
    return rows / elapsed


def run(args: argparse.Namespace) -> dict[str, Any]:
    from spark_consumers.session import spark_session

    prefix = f"bench{uuid.uuid4().hex[:8]}"
    progress(f"producing {args.rows:,} changes to {prefix}.bench.orders")
    topic = produce(args.bootstrap_servers, prefix, args.rows, args.updates, args.partitions)
    began = time.perf_counter()
    spark = spark_session(args.master, "bench-spark")
    session_seconds = time.perf_counter() - began
    warm_up(spark, args.bootstrap_servers, topic, args.partitions)
    best_spark = best_loop = best_ceiling = best_shuffle = 0.0
    cpu: dict[str, float] = {}
    shuffle_cpu: dict[str, float] = {}
    source_cpu = ceiling_cpu = 0.0
    ceiling_stages: dict[str, float] = {}
    try:
        for attempt in range(args.repeat):
            work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
            try:
                rate, used = measure_spark(spark, args.bootstrap_servers, topic, args.rows, args.batch, work)
                if rate > best_spark:
                    best_spark, cpu = rate, used
                if args.shuffle:
                    rate, used = measure_spark(spark, args.bootstrap_servers, topic, args.rows, args.batch,
                                               work, "shuffle")  # fmt: skip
                    if rate > best_shuffle:
                        best_shuffle, shuffle_cpu = rate, used
                source_cpu = measure_source(spark, args.bootstrap_servers, topic, args.rows)
                progress(f"source alone: {source_cpu:.1f} us CPU per change")
                cpu_before = time.process_time()
                ceiling = spark_ceiling.measure(
                    args.bootstrap_servers, topic, args.partitions, args.rows, args.batch, work / "ceiling"
                )
                used_us = (time.process_time() - cpu_before) / args.rows * 1e6
                progress(f"hand-written ceiling: {ceiling:,.0f} rows/s, {used_us:.1f} us CPU per change")
                if ceiling > best_ceiling:
                    best_ceiling, ceiling_cpu = ceiling, used_us
                if not ceiling_stages:
                    ceiling_stages = spark_ceiling.stage_costs(
                        args.bootstrap_servers, topic, args.partitions, min(args.rows, STAGE_SAMPLE),
                        work / "stages",
                    )  # fmt: skip
                    progress(f"hand-written ceiling, CPU us per change by step: {ceiling_stages}")
                best_loop = max(
                    best_loop, measure_loop(args.bootstrap_servers, topic, args.rows, args.batch, work)
                )
            finally:
                shutil.rmtree(work, ignore_errors=True)
            progress(f"run {attempt + 1}/{args.repeat} done")
    finally:
        spark.stop()
    return {
        "name": "spark", "value": round(best_spark), "unit": "rows/s", "ceiling": round(best_ceiling),
        "ratio": round(best_spark / best_ceiling, 3), "loop": round(best_loop),
        **{name: round(us, 1) for name, us in cpu.items()},
        "shuffle": round(best_shuffle),
        "shuffle_cpu": {name: round(us, 1) for name, us in shuffle_cpu.items()},
        "source_cpu_us": round(source_cpu, 1), "ceiling_cpu_us": round(ceiling_cpu, 1),
        "ceiling_stages_us": ceiling_stages,
        "rows": args.rows,
        "partitions": args.partitions, "batch": args.batch, "master": args.master,
        "session_seconds": round(session_seconds, 1),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }  # fmt: skip
