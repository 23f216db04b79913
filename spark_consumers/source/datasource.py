"""``spark.readStream.format("bridge_changes")``: the change topics as a Spark Python data source.

Options (all strings, as Spark passes them):

=========================  =====================================================================
``bootstrap.servers``      required
``topics``                 required: comma-separated topic names or globs (``bridge.shop.*``);
                           ``<prefix>._ddl`` and ``<prefix>._schemas`` never match a glob
``ddl``                    ``true`` (default): also read the ``<prefix>._ddl`` topic of every
                           selected table topic (DROP/TRUNCATE reach the consumers as rows)
``schema.registry.url``    the Confluent wire format's registry; without it: single-object
                           encoding, schemas from ``<prefix>._schemas`` (``schemas.topic``)
``schemas.wait``           seconds a reader waits for a schema not published yet (10)
``maxOffsetsPerTrigger``   at most this many offsets per micro-batch (a message is one offset;
                           watermarks count too); default: everything available. A batch the
                           bound cuts short of a row topic's end reads no DDL topic (a DDL never
                           comes ahead of older changes: :func:`offsets.hold_back_ddl`)
``ddl.wait``               ``resolved`` (default): a stream reads a DDL event only in a batch
                           that reads every change older than it: the event waits until the
                           DDL topic shows a resolved-ts watermark at or past its commit_ts
                           (:meth:`_Planner.ddl_cuts`); ``none``: as soon as it is there
``startingOffsets``        ``earliest`` (default) or JSON ``{"topic": {"0": 42}}``
``endingOffsets``          batch reads: ``latest`` (default) or JSON
``kafka.<setting>``        passed to the librdkafka consumers (``kafka.security.protocol``, ...)
``rows``                   ``json`` (default): the rows below; ``latest``: the index job's compact
                           rows, the latest change per document of each range; ``index``: the
                           index job's direct mode (:mod:`spark_consumers.index.direct`): one
                           input partition per shard that reads, applies and commits its Kafka
                           partitions, one summary row each (``index.path``,
                           ``index.text_fields``)
=========================  =====================================================================

One Spark input partition per Kafka partition and offset range; its reader
makes its own consumer and decoder (the reader object is pickled, clients are
not). Rows leave the Python worker as Arrow record batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from spark_consumers.decode import DDL_SUFFIX, Compact
from spark_consumers.source import kafka, offsets
from spark_consumers.source.clients import _CLIENTS, ROW_FORMS, SourceOptions, _clients
from spark_consumers.source.offsets import Offsets

__all__ = ["ROW_FORMS", "_CLIENTS", "SourceOptions", "_clients"]  # re-exported: their old home

NAME = "bridge_changes"
SCHEMA_DDL = (
    "topic string, partition int, offset long, db string, table string, op string, key string, "
    "before string, after string, types string, commit_ts long, position int"
)
ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("db", pa.string()),
        ("table", pa.string()),
        ("op", pa.string()),
        ("key", pa.string()),
        ("before", pa.string()),
        ("after", pa.string()),
        ("types", pa.string()),
        ("commit_ts", pa.int64()),
        ("position", pa.int32()),
    ]
)
COMPACT_SCHEMA_DDL = (
    "topic string, partition int, offset long, db string, table string, op string, doc string, "
    "doc_hash long, commit_ts long, position int, image string, schema binary, before string, "
    "types string"
)
COMPACT_ARROW_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("db", pa.string()),
        ("table", pa.string()),
        ("op", pa.string()),
        ("doc", pa.string()),
        ("doc_hash", pa.int64()),
        ("commit_ts", pa.int64()),
        ("position", pa.int32()),
        ("image", pa.string()),
        ("schema", pa.binary()),
        ("before", pa.string()),
        ("types", pa.string()),
    ]
)
ARROW_ROWS = 4096  # rows per record batch handed to Spark


class RangePartition(InputPartition):
    """One Kafka partition's offsets ``[start, end)``."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


def read_partition(options: SourceOptions, part: RangePartition) -> Iterator[pa.RecordBatch]:
    """Decode one range into Arrow record batches (runs in a Python worker)."""
    if options.rows == "latest":
        yield from read_latest(options, part)
        return
    clients = _clients(options, part.topic)
    decode = clients.decoder.decode
    rows: list[tuple[Any, ...]] = []
    try:
        for chunk in kafka.read_range(clients.consumer, part.topic, part.partition, part.start, part.end):
            for m in chunk:
                row = decode(
                    part.topic, part.partition, m.offset() or 0, m.key(), m.value(), kafka.header_kind(m)
                )
                if row is not None:
                    rows.append(row)
            if len(rows) >= ARROW_ROWS:
                yield to_arrow(rows)
                rows = []
        if rows:
            yield to_arrow(rows)
    except BaseException:
        _CLIENTS.pop((options, options.schemas_topic_of(part.topic)), None)
        clients.close()  # a failed read leaves the consumer in an unknown state
        raise


def read_latest(options: SourceOptions, part: RangePartition) -> Iterator[pa.RecordBatch]:
    """``rows=latest``: one range as compact rows (:data:`~spark_consumers.decode.COMPACT_FIELDS`),
    reduced to the latest change per document; DDL rows all kept."""
    clients = _clients(options, part.topic)
    compact = clients.decoder.compact
    rows: list[Compact] = []
    try:
        for chunk in kafka.read_range(clients.consumer, part.topic, part.partition, part.start, part.end):
            for m in chunk:
                rows.extend(
                    compact(
                        part.topic, part.partition, m.offset() or 0, m.key(), m.value(), kafka.header_kind(m)
                    )
                )
    except BaseException:
        _CLIENTS.pop((options, options.schemas_topic_of(part.topic)), None)
        clients.close()
        raise
    rows = latest_rows(rows)
    for at in range(0, len(rows), ARROW_ROWS):
        yield to_arrow(rows[at : at + ARROW_ROWS], COMPACT_ARROW_SCHEMA)


def latest_rows(rows: list[Compact]) -> list[Compact]:
    """Compact rows reduced to the latest (commit_ts, position) per document (``db``, ``table``,
    ``doc``; the first of equals), DDL rows kept, in their order. The applying side reduces again
    over every range and applies its version rules: this only drops rows that would lose there."""
    latest: dict[tuple[str, str, str], int] = {}
    ddl: list[int] = []
    for at, row in enumerate(rows):
        doc = row[6]
        if doc is None:
            ddl.append(at)
            continue
        where = (row[3], row[4], doc)
        held = latest.get(where)
        if held is None or (rows[held][8], rows[held][9]) < (row[8], row[9]):
            latest[where] = at
    return [rows[at] for at in sorted([*latest.values(), *ddl])]


def to_arrow(rows: Sequence[tuple[Any, ...]], schema: pa.Schema = ARROW_SCHEMA) -> pa.RecordBatch:
    columns = list(zip(*rows, strict=True))
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)], schema=schema
    )


class _Planner:
    """Driver-side: which partitions exist and where they end (one consumer, made when needed)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._probe: kafka.EndProbe | None = None
        self._reader: Consumer | None = None  # reads the DDL topics' ranges (ddl.wait)

    def ends(self) -> Offsets:
        if self._probe is None:
            self._probe = kafka.EndProbe(self.options.bootstrap, self.options.kafka)
        found = kafka.list_partitions(self._probe.consumer, self.options.topics, self.options.with_ddl)
        return self._probe.ends(found)

    def ddl_cuts(self, start: Offsets, end: Offsets) -> tuple[Offsets, bool]:
        """Each DDL topic partition's end cut before its first DDL event that no watermark up to
        ``end`` passed yet (:func:`kafka.ddl_cut`; the events wait, at their offsets, for a later
        batch), and whether a DDL event is let through."""
        cuts: Offsets = {}
        released = False
        for topic, partition, first, stop in offsets.ranges(start, end):
            if not topic.endswith(DDL_SUFFIX):
                continue
            if self._reader is None:
                self._reader = Consumer(kafka.consumer_config(self.options.bootstrap, self.options.kafka))
            cut, passed = kafka.ddl_cut(self._reader, topic, partition, first, stop)
            cuts.setdefault(topic, {})[str(partition)] = cut
            released = released or passed
        return cuts, released

    def starting(self) -> Offsets:
        if self.options.starting.lower() == "earliest":
            return {}
        return offsets.parse_offsets(self.options.starting, "startingOffsets")

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def plan_partitions(options: SourceOptions, start: Offsets, end: Offsets) -> list[InputPartition]:
    """The input partitions of a batch: one per Kafka range, or (``rows=index``) one per index
    shard (:mod:`spark_consumers.index.direct`)."""
    if options.rows == "index":
        from spark_consumers.index import direct

        return direct.plan(start, end, direct.shard_count(options.index_path, end))
    return [RangePartition(*r) for r in offsets.ranges(start, end)]


def read_any(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if options.rows == "index":
        from spark_consumers.index import direct

        assert isinstance(partition, direct.ShardPartition)
        return direct.read_shard(options, partition)
    assert isinstance(partition, RangePartition)
    return read_partition(options, partition)


class ChangeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._planner = _Planner(options)
        self._target: Offsets | None = None
        self._latest: Offsets = {}

    def initialOffset(self) -> dict[str, Any]:
        return self._planner.starting()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets > 0:
            return ReadMaxRows(self.options.max_offsets)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._planner.ends()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        end = self._end(start, limit)
        if not self.options.ddl_wait:
            return end
        cuts, released = self._planner.ddl_cuts(start, end)
        if released:
            # the watermarks that let these DDL events go were read after the ends were probed:
            # probe again, so that the batch reads every older change they promise is in Kafka
            end = self._end(start, limit)
        return {
            t: ({p: min(o, cuts.get(t, {}).get(p, o)) for p, o in parts.items()} if t.endswith(DDL_SUFFIX)
                else parts)
            for t, parts in end.items()
        }  # fmt: skip

    def _end(self, start: dict[str, Any], limit: ReadLimit) -> Offsets:
        self._latest = offsets.merge(start, self._planner.ends())
        end = (
            self._latest
            if self._target is None
            else offsets.merge(start, offsets.clamp(self._latest, self._target))
        )
        if isinstance(limit, ReadMaxRows):
            end = offsets.hold_back_ddl(start, offsets.cap(start, end, limit.max_rows), end, DDL_SUFFIX)
        if self.options.rows == "index":
            from spark_consumers.index import direct

            end = direct.hold_back_ddl_until_indexed(self.options.index_path, start, end)
        return end

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest or None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return plan_partitions(self.options, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_any(self.options, partition)

    def stop(self) -> None:
        self._planner.close()


class ChangeBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        planner = _Planner(self.options)
        try:
            start = planner.starting()
            if self.options.ending.lower() == "latest":
                end = planner.ends()
            else:
                end = offsets.parse_offsets(self.options.ending, "endingOffsets")
        finally:
            planner.close()
        return plan_partitions(self.options, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_any(self.options, partition)


class ChangeTopicsSource(DataSource):
    """The bridge's change topics; see the module docstring for the options."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        rows = self.options.get("rows", "json").lower()
        if rows == "index":
            from spark_consumers.index.direct import SUMMARY_SCHEMA

            return SUMMARY_SCHEMA
        return COMPACT_SCHEMA_DDL if rows == "latest" else SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        return ChangeBatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ChangeStreamReader(SourceOptions.parse(self.options))
