"""The change topics as a Spark source: a Python data source (``bridge_changes``), or Spark's own
Kafka source with the same decoding (:mod:`spark_consumers.source.kafka_builtin`)."""

from __future__ import annotations

from typing import Any

from spark_consumers.source.datasource import NAME, SCHEMA_DDL, ChangeTopicsSource, SourceOptions

__all__ = ["NAME", "SCHEMA_DDL", "ChangeTopicsSource", "SourceOptions", "register"]


def register(spark: Any) -> None:
    """Make ``format("bridge_changes")`` known to ``spark`` (idempotent)."""
    spark.dataSource.register(ChangeTopicsSource)
