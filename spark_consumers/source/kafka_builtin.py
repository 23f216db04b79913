"""``--source kafka``: Spark's own Kafka source with this project's decoding.

Where the Kafka connector (``org.apache.spark:spark-sql-kafka-0-10``) is on the classpath, as in
the compose image, Spark reads the topics (its consumers, its offsets in the checkpoint, its
``maxOffsetsPerTrigger``) and ``mapInArrow`` turns its ``key``/``value``/``headers`` rows into
the same change rows as the Python data source, with the same :class:`ChangeDecoder` (one per
Python worker, kept across tasks). The topics are a ``subscribePattern`` made of the globs plus
each prefix's ``_ddl`` topic; the schemas topic's messages (``bridge.kind=schema``) give no rows.

Without the connector (this repository's test machines have none and cannot download it), the
job stops at start with an error that says so; the default ``--source python`` needs nothing.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from bridge.errors import UserError
from spark_consumers.config import JobConfig
from spark_consumers.decode import DDL_SUFFIX, Compact
from spark_consumers.source.datasource import (
    ARROW_ROWS,
    COMPACT_ARROW_SCHEMA,
    COMPACT_SCHEMA_DDL,
    SCHEMA_DDL,
    SourceOptions,
    _clients,
    latest_rows,
    to_arrow,
)


def subscribe_pattern(globs: list[str]) -> str:
    """A Java regex matching the globs' topics and the ``<prefix>._ddl`` topic of each glob."""
    parts = [fnmatch.translate(g).removeprefix("(?s:").removesuffix(")\\Z") for g in globs]
    parts += [re.escape(g.split(".", 1)[0] + DDL_SUFFIX) for g in globs]
    return "|".join(f"(?:{p})" for p in sorted(set(parts)))


def _header_kind(headers: list[dict[str, Any]] | None) -> str:
    for header in headers or ():
        if header.get("key") == "bridge.kind" and header.get("value") is not None:
            return bytes(header["value"]).decode("ascii", "replace")
    return "row"


def decode_batches(options: SourceOptions) -> Any:
    """The ``mapInArrow`` function: Spark Kafka rows in, change rows out."""

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if options.rows == "latest":  # the partition's compact rows, reduced as the data source does
            compact: list[Compact] = []
            for batch in batches:
                for m in batch.to_pylist():
                    decoder = _clients(options, m["topic"]).decoder
                    kind = _header_kind(m["headers"])
                    compact.extend(
                        decoder.compact(m["topic"], m["partition"], m["offset"], m["key"], m["value"], kind)
                    )
            reduced = latest_rows(compact)
            for at in range(0, len(reduced), ARROW_ROWS):
                yield to_arrow(reduced[at : at + ARROW_ROWS], COMPACT_ARROW_SCHEMA)
            return
        for batch in batches:
            rows = []
            for m in batch.to_pylist():
                decoder = _clients(options, m["topic"]).decoder
                row = decoder.decode(
                    m["topic"], m["partition"], m["offset"], m["key"], m["value"], _header_kind(m["headers"])
                )
                if row is not None:
                    rows.append(row)
            if rows:
                yield to_arrow(rows)

    return decode


def kafka_stream(spark: Any, config: JobConfig, rows: str = "json") -> Any:
    """The change rows from Spark's Kafka source; a :class:`UserError` when it is not installed.
    ``rows``: as the data source's option (``latest``: the index job's compact rows)."""
    options = SourceOptions.parse({**config.source_options(), "rows": rows})
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.bootstrap_servers)
        .option("subscribePattern", subscribe_pattern(config.topics))
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "false")
    )
    if config.max_offsets_per_trigger > 0:
        reader = reader.option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
    for key, value in config.kafka.items():
        reader = reader.option(f"kafka.{key}", value)
    try:
        frame = reader.load()
    except Exception as exc:  # pyspark's AnalysisException: the connector is missing
        if "KAFKA_DATA_SOURCE_NOT_ENABLED" in str(exc) or "Failed to find data source" in str(exc):
            raise UserError(
                "--source kafka: Spark's Kafka connector (spark-sql-kafka-0-10) is not on the classpath; "
                "use the default --source python, or add the connector (spark.jars.packages)"
            ) from None
        raise
    columns = frame.select("topic", "partition", "offset", "key", "value", "headers")
    return columns.mapInArrow(decode_batches(options), COMPACT_SCHEMA_DDL if rows == "latest" else SCHEMA_DDL)
