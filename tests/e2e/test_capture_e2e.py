"""`binlog-bridge capture` end to end: a binlog-enabled MariaDB source written by a plain SQL
client -> capture -> pumps -> drainer -> MySQL sink into a second MariaDB server, and
``binlog-bridge diff`` (``bridge.apps.diff``) must find the copy equal to the source.

The source has tables with rows before the capture starts (the initial snapshot copies them);
while the capture streams, :class:`tests.support.capture_workload.SqlWorkload` runs inserts,
updates, primary-key changes, deletes, multi-statement and rolled-back transactions and DDL.
The fault test SIGKILLs the capture five times at random points under that load and restarts
it each time; the sink runs in normal mode, so a transaction delivered twice would fail on its
duplicate key or leave a difference. The Kafka test takes the other road: a drainer with the
kafka sink into the broker, then ``binlog-bridge consume --apply`` into SQLite files, diffed
against the source the same way. Timeouts are hang guards only.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.apps.demo.cluster import Cluster, ClusterSpec
from bridge.apps.diff import diff
from tests.support.capture_source import CaptureProcess
from tests.support.capture_workload import SqlWorkload, create_tables
from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import discard, free_port

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(600)]

HANG_GUARD = 240.0
SINK_SETTINGS = {"worker-count": 8, "batch-rows": 500, "txn-rows": 4096, "safe-mode-duration": "0s"}
SEED_ROWS = 2000
LOAD_RATE = 250  # transactions/s of the SQL load (about a quarter of what a quiet machine takes)


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBInstance]:
    server = MariaDBInstance(tmp_path_factory.mktemp("capture-source"), free_port(), binlog=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Pipeline:
    def __init__(self, source: MariaDBInstance, downstream: MariaDBInstance, db: str, workdir: Path) -> None:
        self.source, self.downstream, self.db, self.workdir = source, downstream, db, workdir
        own = f"ckpt_{db}"
        mysql_sink = {"dsn": downstream.dsn, "progress-schema": own, **SINK_SETTINGS}
        checkpoint = {"type": "mysql", "dsn": downstream.dsn, "schema": own}
        self.cluster = Cluster(
            ClusterSpec(
                workdir / "cluster",
                pumps=2,
                sinks=("mysql",),
                drainer_settings={"sink": {"mysql": mysql_sink}, "checkpoint": checkpoint},
            )
        )
        self.capture = CaptureProcess(workdir, source, self.cluster.meta_addr, [db], chunk=500)

    def assert_replicated(self) -> None:
        self.capture.wait_caught_up(timeout=HANG_GUARD)
        self.cluster.wait_caught_up(self.cluster.timestamp(), timeout=HANG_GUARD)
        report = diff(f"{self.source.dsn}{self.db}", f"{self.downstream.dsn}{self.db}")
        names = {table.name.split(".", 1)[1] for table in report.tables}
        assert {"items", "logs"} <= names, report.lines()
        assert report.equal, "\n".join(report.lines())


@pytest.fixture
def pipeline(
    source: MariaDBInstance, downstream_mysql: MariaDBInstance, unique_name: str, tmp_path: Path
) -> Iterator[Pipeline]:
    db = f"cap_{unique_name}"
    create_tables(source, db, SEED_ROWS)
    pipe = Pipeline(source, downstream_mysql, db, tmp_path)
    try:
        pipe.cluster.start()
        yield pipe
    finally:
        pipe.capture.kill()
        discard(pipe.cluster)
        source.drop_database(db)
        downstream_mysql.drop_database(db)
        downstream_mysql.drop_database(f"ckpt_{db}")


def test_snapshot_and_stream_under_sql_load_replicate_into_mysql(pipeline: Pipeline) -> None:
    workload = SqlWorkload(pipeline.source, pipeline.db, seed=3, first_id=SEED_ROWS, rate=LOAD_RATE)
    workload.start()
    try:
        pipeline.capture.start()
        time.sleep(5)  # load while streaming (not a timing assertion)
    finally:
        workload.stop()
    assert workload.transactions > 50 and workload.ddl > 0
    pipeline.assert_replicated()
    assert pipeline.capture.stop() == 0


def test_capture_sigkilled_five_times_under_load(pipeline: Pipeline) -> None:
    rng = random.Random(11)
    workload = SqlWorkload(pipeline.source, pipeline.db, seed=5, first_id=SEED_ROWS, rate=LOAD_RATE)
    workload.start()
    try:
        pipeline.capture.launch()  # the first kill may land inside the snapshot
        for _ in range(5):
            time.sleep(rng.uniform(0.3, 2.5))
            pipeline.capture.kill()
            pipeline.capture.launch()
        assert pipeline.capture.child is not None
        pipeline.capture.child.wait_for_line("capture streaming from", timeout=HANG_GUARD)
        time.sleep(2)
    finally:
        workload.stop()
    pipeline.assert_replicated()
    assert pipeline.capture.stop() == 0


@pytest.mark.kafka
def test_capture_through_the_kafka_sink_and_consume_apply(
    source: MariaDBInstance, unique_name: str, tmp_path: Path, kafka_bootstrap: str
) -> None:
    db = f"cap_{unique_name}"
    create_tables(source, db, 500)
    kafka = {"bootstrap-servers": kafka_bootstrap, "prefix": unique_name, "resolved-interval": "300ms"}
    spec = ClusterSpec(
        tmp_path / "cluster",
        pumps=2,
        sinks=("kafka",),
        drainer_settings={"sink": {"kafka": kafka}, "resolved-interval": "300ms"},
    )
    cluster = Cluster(spec)
    capture = CaptureProcess(tmp_path, source, cluster.meta_addr, [db], chunk=200)
    try:
        cluster.start()
        workload = SqlWorkload(source, db, seed=9, first_id=500, ddl_every=25, rate=LOAD_RATE)
        workload.start()
        try:
            capture.start()
            time.sleep(5)  # load while streaming (not a timing assertion)
        finally:
            workload.stop()
        capture.wait_caught_up(timeout=HANG_GUARD)
        final_ts = cluster.timestamp()
        cluster.wait_caught_up(final_ts, timeout=HANG_GUARD)
        target = tmp_path / "replica"
        argv = [sys.executable, "-m", "bridge.cli", "consume", "--bootstrap-servers", kafka_bootstrap]
        argv += ["--prefix", unique_name, "--apply", f"sqlite://{target}", "--until-ts", str(final_ts)]
        result = subprocess.run([*argv, "--idle-timeout", "60"], capture_output=True, text=True, check=False)
        assert result.returncode == 0, f"{result.stdout}\n{result.stderr[-4000:]}"
        report = diff(f"{source.dsn}{db}", f"sqlite://{target}")
        names = {table.name.split(".", 1)[1] for table in report.tables}
        assert {"items", "logs"} <= names, report.lines()
        assert report.equal, "\n".join(report.lines())
        assert capture.child is not None
        found = re.search(rf"snapshot of {db}\.items: (\d+) rows", capture.child.output)
        assert found is not None, capture.child.output
        copied = int(found.group(1))
        topic = f"{unique_name}.{db}.items"
        argv = [sys.executable, "-m", "bridge.cli", "consume", "--bootstrap-servers", kafka_bootstrap]
        argv += ["--topic", topic, "--from-beginning", "--until-ts", str(final_ts), "--idle-timeout", "60"]
        printed = subprocess.run(argv, capture_output=True, text=True, check=False)
        ops = [json.loads(line)["op"] for line in printed.stdout.splitlines() if line.startswith("{")]
        assert ops.count("r") == copied >= 500, printed.stderr[-2000:]  # the snapshot's rows, marked r
        assert capture.stop() == 0
    finally:
        capture.kill()
        discard(cluster)
        source.drop_database(db)
