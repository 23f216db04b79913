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
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from spark_consumers.source import register

DEFAULT_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.ui.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.ui.showConsoleProgress": "false",  # the job prints its own progress, one line per batch
    # a micro-batch's Python data source rows arrive as Arrow; keep the batches large
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
}


def python_for_workers() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c: %m%n%ex
"""
CONSOLE = """\
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def driver_logging(log_file: Path, level: str, console: bool) -> Path:
    """A log4j2 file sending the driver JVM's log (Spark's own) to ``log_file`` at ``level``, and
    to the terminal only when ``console`` (``--log-level info`` or ``debug``): Spark's WARN lines
    and stack traces would otherwise bury the job's own lines and its one-line error. Give it to
    the JVM with :func:`logging_option`; it is read once, at the JVM's start."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix="bridge-log4j2-", suffix=".properties")
    with os.fdopen(handle, "w") as out:
        out.write(LOG4J2.format(level=level, file=log_file) + (CONSOLE if console else ""))
    return Path(name)


def logging_option(properties: Path) -> dict[str, str]:
    return {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{properties}"}


def spark_session(
    master: str, app_name: str, conf: Mapping[str, str] | None = None, jvm_output: Path | None = None
) -> SparkSession:
    """A session on ``master`` (``local[2]``, ``spark://host:7077``) with the data source registered;
    an existing session of this process is reused (and gets the registration too). ``jvm_output``:
    a file for what the driver JVM and the Python workers it starts write to stdout and stderr
    (the JVM's start-up notes, a worker's traceback), instead of the terminal."""
    python_for_workers()
    if jvm_output is not None:
        _start_jvm(master, app_name, {**DEFAULT_CONF, **(conf or {})}, jvm_output)
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def _start_jvm(master: str, app_name: str, conf: Mapping[str, str], output: Path) -> None:
    """Start the driver JVM the way ``getOrCreate`` would, with its output sent to ``output``."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:  # a JVM is up already: nothing to redirect
        return
    spark_conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app_name)
    spark_conf.setAll(list(conf.items()))
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("ab") as sink:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": sink, "stderr": sink})  # type: ignore[no-untyped-call]
    SparkContext._ensure_initialized(gateway=gateway, conf=spark_conf)
