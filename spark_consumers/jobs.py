"""The index and snapshot jobs: Structured Streaming with ``foreachBatch``.

The index job's micro-batch runs as Spark tasks (:mod:`spark_consumers.index.tasks`):
rows are shuffled by document id into one partition per index shard, and each
shard task reduces and applies its part and commits; the driver only plans and
collects one summary row per shard. The snapshot job collects each micro-batch
to the driver as Arrow, reduces it to the latest change per document
(:mod:`spark_consumers.latest`) and rewrites the touched tables' files. Either
way the output is committed before ``foreachBatch`` returns, hence before Spark
records the batch as done in the checkpoint. A restart resumes from the
checkpoint; a batch that was applied but not recorded is applied again, which
changes nothing.

``run`` prints one progress line per micro-batch to stderr and stops after
the current batch on SIGTERM or SIGINT (or, with ``--available-now``, once
everything there at start is applied).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from confluent_kafka import Consumer

from bridge.errors import ConfigError
from spark_consumers.config import JobConfig
from spark_consumers.index import direct, tasks
from spark_consumers.index.search import live_documents
from spark_consumers.index.shards import (
    create_or_open,
    create_pending,
    open_shards,
    recorded_shards,
    shard_paths,
)
from spark_consumers.index.store import ChangeIndex
from spark_consumers.latest import ddl_columns, latest_per_document, newest_columns
from spark_consumers.snapshot import Snapshot
from spark_consumers.source import kafka, offsets
from spark_consumers.source.clients import SourceOptions

log = logging.getLogger(__name__)

COLUMNS = ["db", "table", "op", "key", "before", "after", "types", "commit_ts", "position"]


@dataclass
class BatchStats:
    rows: int
    put: int
    deleted: int
    seconds: float
    max_commit_ts: int
    size: str
    collect_seconds: float = 0.0  # Spark reading and decoding the batch, and its rows to the driver
    shards: list[dict[str, Any]] = field(default_factory=list)  # the shard tasks' summaries
    direct: bool = False  # the direct mode: ``rows`` counts changes read by the shard tasks


class BatchHandler:
    """The ``foreachBatch`` function of a job; keeps each batch's stats for the progress line.

    With ``spark`` an index job writes the sharded index through shard tasks; without it
    (``bench spark``'s one-process loop) :meth:`apply` writes one shard on the caller's thread."""

    def __init__(self, config: JobConfig, spark: Any = None) -> None:
        self.config = config
        self.in_batch = threading.Event()
        self.stats: dict[int, BatchStats] = {}
        self.index: ChangeIndex | None = None
        self.paths: list[Path] = []
        self.routes: list[int] = []
        self.direct = (
            config.kind == "index" and spark is not None and config.index_mode == "direct"
            and config.source != "kafka"
        )  # fmt: skip
        if self.direct:
            count = direct_shards(config)
            if count:
                self.paths = create_or_open(config.output, count, "kafka-partition")
            else:  # the first batch that reads a table topic records the shards (one per partition)
                create_pending(config.output, "kafka-partition")
        elif config.kind == "index" and spark is not None:
            self.paths = create_or_open(config.output, config.shards or spark.sparkContext.defaultParallelism)
            self.routes = tasks.routing_values(spark, len(self.paths))
        elif config.kind == "index":
            self.index = ChangeIndex(config.output, config.text_fields)
        self.snapshot = Snapshot(config.output) if config.kind == "snapshot" else None

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.in_batch.set()
        try:
            started = time.monotonic()
            if self.direct:
                self.stats[batch_id] = self.apply_direct(frame, started)
                return
            if self.paths:
                self.stats[batch_id] = self.apply_sharded(frame, started)
                return
            rows = frame.select(*COLUMNS).toArrow().to_pylist()
            collected = time.monotonic()
            self.stats[batch_id] = self.apply(rows, collected)
            self.stats[batch_id].collect_seconds = collected - started
        finally:
            self.in_batch.clear()

    def apply_direct(self, frame: Any, started: float) -> BatchStats:
        """One batch of the direct mode: the source's shard tasks read, applied and committed their
        partitions; the driver collects their summaries and applies the deletes of changed keys
        that belong to other shards, then the floors of a batch with a RENAME, which the tasks
        leave to it (:mod:`spark_consumers.index.direct`)."""
        summaries = [row.asDict() for row in frame.collect()]
        if not self.paths:
            self.paths = shard_paths(self.config.output)
        moved = direct.apply_foreign(self.paths, self.config.text_fields, summaries)
        direct.apply_deferred_floors(self.paths, self.config.text_fields, summaries)
        megabytes = sum(folder_bytes(p) for p in self.paths if p.exists()) / 1e6
        documents = live_documents(open_shards(self.config.output)) if self.paths else 0
        return BatchStats(
            rows=sum(s["changes"] for s in summaries),
            put=sum(s["put"] for s in summaries),
            deleted=sum(s["deleted"] for s in summaries) + moved,
            seconds=time.monotonic() - started,
            max_commit_ts=max([0, *(s["max_commit_ts"] for s in summaries)]),
            size=f"{documents} documents ({megabytes:.1f} MB)",
            shards=summaries,
            direct=True,
        )

    def apply_sharded(self, frame: Any, started: float) -> BatchStats:
        """One batch through the shard tasks; only their summaries come to the driver."""
        options = SourceOptions.parse(self.config.source_options())
        writer = tasks.shard_writer([str(p) for p in self.paths], self.config.text_fields, options)
        plan = tasks.plan(frame, len(self.paths), self.routes, writer)
        summaries = [row.asDict() for row in plan.collect()]
        megabytes = sum(folder_bytes(p) for p in self.paths if p.exists()) / 1e6
        return BatchStats(
            rows=max([0, *(s["rows"] for s in summaries)]),
            put=sum(s["put"] for s in summaries),
            deleted=sum(s["deleted"] for s in summaries),
            seconds=time.monotonic() - started,
            max_commit_ts=max([0, *(s["max_commit_ts"] for s in summaries)]),
            size=f"{live_documents(open_shards(self.config.output))} documents ({megabytes:.1f} MB)",
            shards=summaries,
        )

    def apply(self, rows: list[dict[str, Any]], started: float) -> BatchStats:
        """Reduce and apply one batch's change rows (also the plain-loop path of ``bench spark``)."""
        changes = latest_per_document(rows)
        put = deleted = 0
        columns = newest_columns(changes, ddl_columns(rows))
        if self.index is not None:
            put, deleted = self.index.apply(changes, columns)
            megabytes = folder_bytes(self.config.output) / 1e6
            size = f"{live_documents(self.index.index)} documents ({megabytes:.1f} MB)"
        else:
            assert self.snapshot is not None
            tables = self.snapshot.apply(changes, columns)
            put = sum(a.image is not None for a in changes.actions.values())
            deleted = len(changes.actions) - put
            size = f"{tables} tables rewritten"
        return BatchStats(len(rows), put, deleted, time.monotonic() - started, changes.max_commit_ts, size)

    def close(self) -> None:
        if self.index is not None:
            self.index.close()


def direct_shards(config: JobConfig) -> int:
    """The shard count of a direct-mode index: as recorded when it exists, else ``--shards``, else
    the partition count of the table topics (one shard per partition; they must agree); 0 when
    there is no table topic yet (the first batch that reads one creates the index)."""
    recorded = recorded_shards(config.output)
    if recorded is not None:
        return recorded
    if config.shards:
        return config.shards
    consumer = Consumer(kafka.consumer_config(config.bootstrap_servers, config.kafka))
    try:
        found = kafka.list_partitions(consumer, config.topics, False)
    finally:
        consumer.close()
    counts = {len(parts) for parts in found.values()}
    if len(counts) > 1:
        raise ConfigError(
            "topics: partition counts differ ("
            + ", ".join(f"{t}: {len(p)}" for t, p in sorted(found.items()))
            + "):"
            " the direct index mode has one shard per partition; give the topics one count, or run with"
            " --index-mode shuffle"
        )
    return counts.pop() if counts else 0


def folder_bytes(path: Path) -> int:
    """Bytes of the files directly in ``path`` (a tantivy index keeps its segments flat)."""
    return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())


def stream(spark: Any, config: JobConfig, rows: str = "json") -> Any:
    """The change rows as a streaming DataFrame, from the chosen source; ``rows="latest"``: the
    compact rows the sharded index job reads (the data source's ``rows`` option)."""
    if config.source == "kafka":
        from spark_consumers.source.kafka_builtin import kafka_stream

        return kafka_stream(spark, config, rows)
    reader = spark.readStream.format("bridge_changes")
    extra = {"rows": rows}
    if rows == "index":
        extra |= {"index.path": str(config.output), "index.text_fields": json.dumps(config.text_fields)}
    for key, value in {**config.source_options(), **extra}.items():
        reader = reader.option(key, value)
    return reader.load()


class StopFlag:
    """Set by SIGTERM/SIGINT; the main loop stops the query between batches."""

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        def handle(signum: int, frame: FrameType | None) -> None:
            self.requested = True
            log.info("signal %d: stopping after the current batch", signum)

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)


def progress_line(progress: dict[str, Any], stats: BatchStats | None) -> str:
    batch = progress.get("batchId")
    rows = int(progress.get("numInputRows", stats.rows if stats else 0))
    if stats is not None and stats.direct:
        rows = stats.rows  # Spark's count is the shard tasks' summary rows
    seconds = progress.get("durationMs", {}).get("triggerExecution", 0) / 1000 or (
        stats.seconds if stats else 0
    )
    seconds = max(seconds, 1e-9)
    source = (progress.get("sources") or [{}])[0]
    latest = _offsets(source.get("latestOffset"))
    # A batch re-run from the checkpoint's offset log (planned by a run that died before it was
    # committed) has no latestOffset in its report: Spark asked the source for none. Its lag is
    # unknown, not 0 (a caller waiting for "0 offsets behind" must not stop on it).
    lag = str(offsets.behind(_offsets(source.get("endOffset")), latest)) if latest else "unknown"
    line = (
        f"batch {batch}: {rows} rows in {seconds:.2f}s ({rows / seconds:,.0f} rows/s), {lag} offsets behind"
    )
    if stats is not None:
        line += f", put {stats.put}, deleted {stats.deleted}, {stats.size}, commit_ts {stats.max_commit_ts}"
        if stats.shards:
            cpu = sum(s["cpu_seconds"] for s in stats.shards)
            line += f" ({len(stats.shards)} shard tasks, apply cpu {cpu:.2f}s)"
        else:
            line += f" (read {stats.collect_seconds:.2f}s, apply {stats.seconds:.2f}s)"
    return line


def _offsets(text: Any) -> offsets.Offsets:
    if not text:
        return {}
    data = json.loads(text) if isinstance(text, str) else text
    if not isinstance(data, dict):  # "null": the source reported no latest offset
        return {}
    return {t: {p: int(o) for p, o in parts.items()} for t, parts in data.items()}


class RunningJob:
    """A started job: its streaming query and batch handler (tests and the bench watch them)."""

    def __init__(self, spark: Any, config: JobConfig, stop: StopFlag) -> None:
        self.config = config
        self.stop = stop
        self.handler = BatchHandler(config, spark)
        rows = "index" if self.handler.direct else "latest" if self.handler.paths else "json"
        writer = stream(spark, config, rows).writeStream.foreachBatch(self.handler)
        writer = writer.option("checkpointLocation", str(config.checkpoint)).queryName(
            f"bridge-{config.kind}"
        )
        if config.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{int(config.trigger_interval * 1000)} milliseconds")
        self._writer = writer
        self.query = writer.start()
        self._shown: set[int] = set()
        self.restarts = 0

    def position(self) -> offsets.Offsets:
        """The end offsets of the last batch applied (what a restart resumes from)."""
        progress = self.query.lastProgress
        return _offsets((progress.get("sources") or [{}])[0].get("endOffset")) if progress else {}

    def per_executor(self) -> dict[str, int]:
        """Documents put or deleted by each executor's shard tasks in this run (scale-out shown)."""
        counts: dict[str, int] = {}
        for stats in self.handler.stats.values():
            for shard in stats.shards:
                counts[shard["executor"]] = counts.get(shard["executor"], 0) + shard["put"] + shard["deleted"]
        return dict(sorted(counts.items()))

    def wait(self, out: Any) -> int:
        """Run until the query ends (available-now), fails (raised), or a stop is requested."""
        try:
            while True:
                try:
                    self._follow(out)
                    break
                except Exception as exc:  # the query's failure
                    if not _transient(exc) or self.restarts >= RESTARTS or self.stop.requested:
                        raise
                    self.restarts += 1
                    log.warning("the query failed (%s); restarting it from its checkpoint (%d of %d)",
                                str(exc).splitlines()[0][:300], self.restarts, RESTARTS)  # fmt: skip
                    time.sleep(RESTART_PAUSE * self.restarts)  # a load spike passes
                    self.query = self._writer.start()
            _print_progress(self.query, self.handler, self._shown, out, final=True)
        finally:
            self.handler.close()
        if any(stats.shards for stats in self.handler.stats.values()):
            print(f"documents applied per executor: {json.dumps(self.per_executor())}", file=out, flush=True)
        reason = "signal" if self.stop.requested else "all available data applied"
        print(f"stopped: {reason}", file=out, flush=True)
        return 0

    def _follow(self, out: Any) -> None:
        while self.query.isActive:
            self.query.awaitTermination(0.5)
            _print_progress(self.query, self.handler, self._shown, out)
            if self.stop.requested and not self.handler.in_batch.is_set():
                self.query.stop()
        self.query.awaitTermination()  # raises the query's failure, if any


RESTARTS = 5
RESTART_PAUSE = 3.0  # seconds, times the restart's number
# Spark waits a fixed 10 s for a new Python worker to connect back (PythonWorkerFactory); on a
# loaded machine a worker's start-up (an interpreter importing pyspark) can take longer. The query
# fails then, before or between batches; restarting it from its checkpoint is safe (the job is).
_TRANSIENT = ("Python worker failed to connect back",)


def _transient(exc: BaseException) -> bool:
    return any(text in str(exc) for text in _TRANSIENT)


def run(spark: Any, config: JobConfig, stop: StopFlag | None = None, out: Any = None) -> int:
    """Run the job until it ends (available-now), fails, or ``stop`` is requested; 0 when clean."""
    return RunningJob(spark, config, stop or StopFlag()).wait(out or sys.stderr)


def _print_progress(
    query: Any, handler: BatchHandler, shown: set[int], out: Any, final: bool = False
) -> None:
    """One line per applied batch, once Spark's progress report of it is there; at the end
    (``final``) also for batches whose report came too late (Spark posts reports asynchronously)."""
    reports = {p.get("batchId"): p for p in query.recentProgress}
    for batch in sorted(handler.stats):
        if batch in shown or (batch not in reports and not final):
            continue
        shown.add(batch)
        print(
            progress_line(reports.get(batch, {"batchId": batch}), handler.stats[batch]), file=out, flush=True
        )
