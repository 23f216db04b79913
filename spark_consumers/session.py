"""The SparkSession of a job, with the data source registered.

``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` are set here to this
interpreter (unless the user set them): Python workers started with another
interpreter cannot import this project, and Spark waits 60 s before saying so.
On a standalone cluster the executors must have the same path (same image or
same virtualenv path on every worker); ``docs/spark-consumers.md`` says so.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from spark_consumers.source import register

DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    # a micro-batch's Python data source rows arrive as Arrow; keep the batches large
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
}


def python_for_workers() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def spark_session(master: str, app_name: str, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A session on ``master`` (``local[2]``, ``spark://host:7077``) with the data source registered;
    an existing session of this process is reused (and gets the registration too)."""
    python_for_workers()
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
