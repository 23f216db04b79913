"""The index job as a user runs it (``python -m spark_consumers index``, its own Spark driver): SIGKILLed
mid-run and restarted from its checkpoint, then SIGTERMed while streaming; and on a Spark standalone
cluster (a master and two workers started from pyspark's own launcher class), where each worker's
executor writes about half of the documents into its shards, and where a worker SIGKILLed during the
run leaves the retried tasks to the other. Each must give the same
documents as the job run in this process (the test run's SparkSession) from an empty checkpoint.

The topic holds changes encoded as the Kafka sink encodes them (``bench spark``'s producer: inserts
and updates of an 8-column table, single-object encoding, partitioned by key), written before the
jobs start. Four partitions: the default (direct) index mode has one shard per partition, so each
batch is four equal shard tasks, two per one-core worker.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from bench.spark import produce
from spark_consumers.config import JobConfig
from spark_consumers.jobs import run
from tests.e2e.test_spark_e2e import documents
from tests.support.process import ChildProcess, free_port

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

ROWS = 12_000
START_GUARD = 240.0  # a Spark driver's start on a loaded 2-core machine


@pytest.fixture(scope="module")
def topic(tmp_path_factory: pytest.TempPathFactory) -> str:
    bootstrap = os.environ.get("BRIDGE_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
    return produce(bootstrap, f"t{uuid.uuid4().hex[:10]}", ROWS, updates=0.3, partitions=4)


@pytest.fixture(scope="module")
def reference(spark: Any, topic: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The documents of the job run in this process over ``topic`` from an empty checkpoint."""
    work = tmp_path_factory.mktemp("reference")
    bootstrap = os.environ.get("BRIDGE_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
    config = JobConfig(kind="index", bootstrap_servers=bootstrap, topics=[topic], output=work / "index",
                       checkpoint=work / "checkpoint", available_now=True)  # fmt: skip
    assert run(spark, config) == 0
    found = documents(work / "index")
    assert len(found) == int(ROWS * 0.7)  # every inserted key, updated or not
    return found


def assert_same_documents(found: dict[str, Any], reference: dict[str, Any]) -> None:
    """``found == reference``, failing with counts and a few ids rather than two 8,400-entry dicts."""
    missing = sorted(set(reference) - set(found))
    extra = sorted(set(found) - set(reference))
    differing = sorted(k for k in set(found) & set(reference) if found[k] != reference[k])
    assert not (missing or extra or differing), (
        f"{len(missing)} missing (e.g. {missing[:5]}), {len(extra)} extra (e.g. {extra[:5]}), "
        f"{len(differing)} differing (e.g. {[(k, found[k], reference[k]) for k in differing[:2]]})"
    )


def index_job(
    kafka_bootstrap: str, topic: str, work: Path, *flags: str, env: dict[str, str] | None = None
) -> ChildProcess:
    argv = [sys.executable, "-m", "spark_consumers", "index", "--bootstrap-servers", kafka_bootstrap,
            "--topics", topic, "--index", str(work / "index"), "--checkpoint", str(work / "checkpoint"),
            *flags]  # fmt: skip
    return ChildProcess(argv, work / "job.log", env=env)


def test_sigkilled_driver_restarts_from_its_checkpoint_and_sigterm_stops_after_a_batch(
    kafka_bootstrap: str, topic: str, reference: dict[str, Any], tmp_path: Path
) -> None:
    first = index_job(
        kafka_bootstrap, topic, tmp_path, "--available-now", "--max-offsets-per-trigger", "1500"
    )
    try:
        first.wait_for_line(r"^batch 1: ", timeout=START_GUARD)  # two batches committed, more to come
    finally:
        first.kill()
    assert "stopped:" not in first.output
    # streaming from the checkpoint, until a batch finds nothing left behind; then SIGTERM
    second = index_job(kafka_bootstrap, topic, tmp_path, "--trigger-interval", "1s")
    try:
        second.wait_for_line(r"^batch \d+: [1-9]\d* rows .* 0 offsets behind", timeout=START_GUARD)
    finally:
        status = second.stop(timeout=120)
    assert status == 0, second.output[-3000:]
    assert "stopped: signal" in second.output
    assert "batch 0:" not in second.output  # it resumed after the killed run's last committed batch
    # the job's own lines come first: no Spark progress bar, WARN line or JVM note before them
    assert re.match(r"batch \d+: ", second.output), second.output[:2000]
    assert_same_documents(documents(tmp_path / "index"), reference)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[ChildProcess]]]:
    """A master and two workers (1 core, 1 GB each) from the pip package's own launcher: its URL
    and the worker processes (the last test of the module SIGKILLs one)."""
    work = tmp_path_factory.mktemp("standalone")
    home = Path(pyspark.__file__).parent
    env = {"SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(work / "work")}
    port = free_port()
    spark_class = str(home / "bin" / "spark-class")
    master = ChildProcess([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                           "--port", str(port), "--webui-port", str(free_port())],
                          work / "master.log", env)  # fmt: skip
    url = f"spark://127.0.0.1:{port}"
    workers: list[ChildProcess] = []
    try:
        master.wait_for_line(r"I have been elected leader", timeout=START_GUARD)
        for n in range(2):
            argv = [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--cores", "1",
                    "--memory", "1g", "--host", "127.0.0.1", "--webui-port", str(free_port())]  # fmt: skip
            workers.append(ChildProcess(argv, work / f"worker{n}.log", env))
        for worker in workers:
            worker.wait_for_line(r"Successfully registered with master", timeout=START_GUARD)
        yield url, workers
    finally:
        for child in (*workers, master):
            child.stop(timeout=30)


def executor_shares(output: str) -> dict[str, int]:
    """The job's closing count of documents applied per executor."""
    found = re.search(r"^documents applied per executor: (.*)$", output, re.MULTILINE)
    assert found is not None, output[-3000:]
    shares: dict[str, int] = json.loads(found.group(1))
    return shares


def test_the_job_on_a_standalone_cluster_of_two_workers_gives_the_same_index_written_by_both(
    kafka_bootstrap: str,
    topic: str,
    reference: dict[str, Any],
    standalone: tuple[str, list[Any]],
    tmp_path: Path,
) -> None:
    job = index_job(kafka_bootstrap, topic, tmp_path, "--available-now", "--master", standalone[0],
                    "--max-offsets-per-trigger", "4000", env={"SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
    try:
        status = job.wait(timeout=START_GUARD + 240)
    finally:
        job.stop()
    assert status == 0, job.output[-3000:]
    assert "stopped: all available data applied" in job.output
    assert_same_documents(documents(tmp_path / "index"), reference)
    shares = executor_shares(job.output)
    assert len(shares) == 2, shares  # one executor per worker, each wrote shards
    total = sum(shares.values())
    print(f"documents applied per executor: {shares}")  # for docs/benchmarks.md (pytest -s)
    assert all(0.4 <= n / total <= 0.6 for n in shares.values()), shares


def test_a_sigkilled_worker_during_a_batch_ends_equal_after_the_retry(
    kafka_bootstrap: str,
    topic: str,
    reference: dict[str, Any],
    standalone: tuple[str, list[Any]],
    tmp_path: Path,
) -> None:
    url, workers = standalone
    job = index_job(kafka_bootstrap, topic, tmp_path, "--available-now", "--master", url,
                    "--max-offsets-per-trigger", "1500", env={"SPARK_LOCAL_IP": "127.0.0.1"})  # fmt: skip
    try:
        job.wait_for_line(r"^batch 0: ", timeout=START_GUARD)  # the next batch's tasks are running
        victim = workers[-1]
        executors = Path(f"/proc/{victim.proc.pid}/task/{victim.proc.pid}/children").read_text().split()
        victim.kill()  # the worker JVM, then its executor (which would exit on losing its worker)
        for pid in executors:
            os.kill(int(pid), signal.SIGKILL)
        status = job.wait(timeout=START_GUARD + 240)
    finally:
        job.stop()
    assert status == 0, job.output[-3000:]
    assert "stopped: all available data applied" in job.output
    assert_same_documents(documents(tmp_path / "index"), reference)
