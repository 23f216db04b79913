"""The relay log end to end (and the MySQL checkpoint across a downstream restart):
MariaDB upstream -> meta, pumps, drainer (MySQL sink, MySQL
checkpoint, relay log) -> a second MariaDB; the drainer SIGKILLed mid-batch, then meta
and pumps SIGKILLed too; the drainer started again must replay its relay log, set the
checkpoint consistent and exit 0, leaving the downstream equal to the upstream.

How "mid-batch" is made certain rather than likely: before the last (big) transaction
is written upstream, the test holds a row lock downstream on one row that transaction
updates. The sink then applies part of the batch and waits on that lock; the relay log
already holds the whole transaction (it is appended before the sink gets it), so the
test waits for ``/status`` to show it relayed, SIGKILLs the drainer, and only then
releases the lock. The checkpoint is then below the final commit_ts (asserted).
"""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from bridge.apps.demo.cluster import DRAINER, Cluster, ClusterSpec, cli_argv, resolver_for
from bridge.apps.diff import diff
from bridge.dsn import Dsn
from bridge.producer import TxnWriter, open_upstream
from bridge.pumpclient import PumpsClient
from drainer.checkpoint import CheckpointState, build_checkpoint
from tests.e2e.test_pipeline import (
    LOAD_TABLES,
    assert_replicated,
    kill_and_restart,
    mysql_text,
    mysql_upstream,
    run_load,
    wait_for,
)
from tests.integration.test_mysql_worker_processes import wait_gone
from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import discard, wait_until

pytestmark = pytest.mark.timeout(420)

MYSQL_DSN_ENV = "BRIDGE_TEST_MYSQL_DSN"
DEFAULT_MYSQL_DSN = "mysql://root@127.0.0.1:3306/"
BIG_ROWS = 20_000
SMALL_TXNS = 20
HANG_GUARD = 180.0


__all__ = ["mysql_upstream"]  # a fixture of tests/e2e/test_pipeline.py, used here


@pytest.fixture
def upstream_db(mysql_upstream: Dsn) -> Dsn:
    """A database of its own on the shared MariaDB (the upstream), dropped afterwards."""
    return mysql_upstream


def worker_process_pids(log_text: str) -> list[int]:
    """The pids of the MySQL sink's worker processes its drainer logged (every start's)."""
    return [int(pid) for pid in re.findall(r"mysql sink: worker process \d+ \(pid (\d+)\)", log_text)]


def checkpoint_row(downstream: MariaDBInstance, schema: str, cluster_id: int) -> tuple[int, int]:
    """(commit_ts, consistent) of the cluster's row in the downstream checkpoint table."""
    conn = downstream.connect()
    try:
        with conn.cursor() as cursor:
            cursor.execute(
                f"SELECT commit_ts, consistent FROM `{schema}`.`checkpoint` WHERE cluster_id = %s",
                (cluster_id,),
            )
            row = cursor.fetchone()
    finally:
        conn.close()
    assert row is not None, f"no checkpoint row of cluster {cluster_id} in {schema}.checkpoint"
    return int(row[0]), int(row[1])


def downstream_value(downstream: MariaDBInstance, sql: str) -> int:
    conn = downstream.connect()
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
            row = cursor.fetchone()
    finally:
        conn.close()
    assert row is not None, sql
    return int(row[0])


def relayed_ts(cluster: Cluster) -> int:
    status = cluster.drainer_status()
    relay = (status or {}).get("relay") or {}
    return int(relay.get("relayed_ts") or 0)


@pytest.mark.mysql
def test_sigkill_mid_batch_with_pumps_gone_recovers_from_the_relay_log(
    tmp_path: Path, upstream_db: Dsn, downstream_mysql: MariaDBInstance, unique_name: str
) -> None:
    processes = 2
    upstream = mysql_text(upstream_db)
    db = upstream_db.database
    checkpoint_schema = f"ck_{unique_name}"
    settings: dict[str, Any] = {
        # Workers commit every 200 changes: part of the last transaction becomes visible downstream.
        # The keyed workers run in two children of the drainer (worker-processes): the one waiting
        # for the lock below must die with the drainer. (A SIGKILL of a drainer whose workers are
        # threads kills them with it: tests/e2e/test_mysql_sink_e2e.py kills such a drainer.)
        "sink": {
            "mysql": {
                "dsn": downstream_mysql.dsn,
                "worker-count": 4,
                "txn-rows": 200,
                "worker-processes": processes,
            }
        },
        "checkpoint": {"type": "mysql", "schema": checkpoint_schema},
        "relay": {"dir": "relay", "max-file-size": 16 << 10},  # several files above the checkpoint
        # Checkpoints only after DDLs and at stop: the relay then holds many events above it.
        "checkpoint-interval": "60s",
    }
    spec = ClusterSpec(
        tmp_path / "cluster",
        pumps=2,
        sinks=("mysql",),
        resolver=resolver_for(upstream),
        drainer_settings=settings,
    )
    cluster = Cluster(spec)
    lock_conn: Any = None
    try:
        cluster.start()
        cluster_id = int((cluster.drainer_status() or {})["cluster_id"])
        run_load(cluster, upstream, seconds=5)

        with PumpsClient(cluster.meta_addr) as pumps:
            writer = TxnWriter(open_upstream(upstream), pumps)
            try:
                writer.ddl("CREATE TABLE relay_big (id BIGINT NOT NULL PRIMARY KEY, note VARCHAR(64))")
                writer.ddl("CREATE TABLE relay_hold (id INT NOT NULL PRIMARY KEY, v INT)")
                writer.run(lambda txn: txn.insert("relay_hold", {"id": 1, "v": 0}))
                cluster.wait_caught_up(writer.timestamp(), timeout=HANG_GUARD)

                # Downstream, a row lock the last transaction will wait for.
                lock_conn = downstream_mysql.connect(autocommit=False)
                with lock_conn.cursor() as cursor:
                    cursor.execute(
                        f"SELECT v FROM `{upstream_db.database}`.relay_hold WHERE id = 1 FOR UPDATE"
                    )

                # Small transactions the sink applies past the checkpoint (the replay applies them
                # again, in safe mode), then the big one it cannot finish.
                for k in range(SMALL_TXNS):
                    first = BIG_ROWS + k * 50
                    with writer.transaction() as small:
                        small.insert_many(
                            "relay_big", ({"id": i, "note": f"small {i}"} for i in range(first, first + 50))
                        )
                    with writer.transaction() as small:
                        small.update("relay_big", {"id": first}, {"note": "moved"})
                with writer.transaction() as txn:
                    txn.insert_many("relay_big", ({"id": i, "note": f"row {i}"} for i in range(BIG_ROWS)))
                    txn.update("relay_hold", {"id": 1}, {"v": 1})
                final_ts = txn.commit_ts
            finally:
                writer.close()

        wait_for(lambda: relayed_ts(cluster) >= final_ts, f"commit_ts {final_ts} in the relay log", cluster)
        big_rows_sql = f"SELECT COUNT(*) FROM `{db}`.relay_big"
        wait_for(
            lambda: downstream_value(downstream_mysql, big_rows_sql) > SMALL_TXNS * 50,
            "part of the last transaction committed downstream",
            cluster,
        )
        children = worker_process_pids(cluster.members[DRAINER].process.output())
        assert len(children) == processes
        cluster.kill(DRAINER)
        # The children die with the drainer, before the lock they wait for is released: none of
        # them can apply or commit anything after it.
        wait_gone(children, "the drainer's worker processes")
        for name in [*cluster.pump_names, "meta"]:
            cluster.kill(name)
        lock_conn.rollback()
        lock_conn.close()
        lock_conn = None

        before_ts, before_consistent = checkpoint_row(downstream_mysql, checkpoint_schema, cluster_id)
        assert before_ts < final_ts and before_consistent == 0
        relay_files = list((cluster.drainer_dir / "relay").glob("binlog-*.bbf"))
        assert relay_files, "the relay log is empty after the kill"
        # The downstream is between two upstream snapshots: part of the last transaction is
        # applied, its relay_hold update (waiting for the lock) is not.
        big_rows_before = downstream_value(downstream_mysql, big_rows_sql)
        assert big_rows_before < BIG_ROWS + SMALL_TXNS * 50
        assert downstream_value(downstream_mysql, f"SELECT v FROM `{db}`.relay_hold WHERE id = 1") == 0

        # Meta and pumps are gone: the drainer replays its relay log and exits.
        process = cluster.members[DRAINER].process
        process.start()
        started = time.monotonic()
        status = process.wait(timeout=HANG_GUARD)
        log_text = process.output()
        assert status == 0, f"the recovering drainer exited with {status}:\n{process.tail()}"
        summary = [line for line in log_text.splitlines() if "relay recovery of cluster" in line]
        assert summary, process.tail()
        recovery_seconds = time.monotonic() - started

        after_ts, after_consistent = checkpoint_row(downstream_mysql, checkpoint_schema, cluster_id)
        assert (after_ts, after_consistent) == (final_ts, 1)
        assert not list((cluster.drainer_dir / "relay").glob("binlog-*.bbf"))

        downstream_db = f"{downstream_mysql.dsn}{upstream_db.database}"
        report = diff(upstream, downstream_db)
        names = {table.name.split(".", 1)[1] for table in report.tables}
        assert names >= LOAD_TABLES | {"relay_big", "relay_hold"}, report.lines()
        assert report.equal, "\n".join(report.lines())
        # The same through the command operators run.
        command = cli_argv("diff", "--upstream", upstream, "--downstream", downstream_db, "--quiet")
        result = subprocess.run(command, capture_output=True, text=True, timeout=HANG_GUARD)
        assert result.returncode == 0, result.stdout + result.stderr
        print(
            f"\n{summary[0]}\nrelay files {len(relay_files)}, relay_big rows downstream before: "
            f"{big_rows_before}/{BIG_ROWS + SMALL_TXNS * 50}, recovering process ran {recovery_seconds:.1f}s"
        )
    finally:
        if lock_conn is not None:
            lock_conn.close()
        discard(cluster)  # teardown asserts nothing about the stop
        downstream_mysql.start()
        downstream_mysql.drop_database(upstream_db.database)
        downstream_mysql.drop_database(checkpoint_schema)


def test_sigkilled_drainer_with_reachable_pumps_reuses_its_relay_log(tmp_path: Path) -> None:
    """The normal restart: meta and pumps answer, so the drainer resumes from its checkpoint
    (no recovery), keeps the relay events it has (re-delivered ones are not appended twice),
    and removes relay files once applied. SQLite up- and downstream: the relay is sink-agnostic."""
    upstream = f"sqlite://{tmp_path / 'upstream.db'}"
    settings = {"relay": {"dir": "relay", "max-file-size": 64 << 10}}
    spec = ClusterSpec(
        tmp_path / "cluster",
        pumps=2,
        sinks=("sqlite",),
        resolver=resolver_for(upstream),
        drainer_settings=settings,
    )
    cluster = Cluster(spec)
    try:
        cluster.start()
        # the whole 8 s (not interrupted after the kill): enough relay data to rotate 64 KiB files
        fault = kill_and_restart(DRAINER, down_seconds=1.0)
        run_load(cluster, upstream, seconds=8, fault=fault, interrupt=False)
        drainer = cluster.members[DRAINER].process
        assert drainer.starts == 2 and "relay recovery" not in drainer.output()
        assert "relay " in drainer.output() and "holds events up to commit_ts" in drainer.output()
        assert_replicated(cluster, upstream)
        status = cluster.drainer_status()
        assert status is not None and status["relay"] is not None, status
        relay = status["relay"]
        assert relay["relayed_ts"] > 0 and relay["removed_files"] > 0, relay
        # Applied files are removed at each flush; the file being written always stays.
        wait_for(
            lambda: ((cluster.drainer_status() or {}).get("relay") or {}).get("files") == 1,
            "relay GC",
            cluster,
        )
    finally:
        discard(cluster)  # teardown asserts nothing about the stop


@pytest.mark.mysql
def test_mysql_checkpoint_save_waits_out_a_downstream_restart(
    tmp_path: Path, downstream_mysql: MariaDBInstance, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A save while the downstream is down retries (within retry-timeout) and lands once it is back."""
    schema = f"ck_{unique_name}"
    table = {"type": "mysql", "dsn": downstream_mysql.dsn, "schema": schema, "retry-timeout": "120s"}
    checkpoint = build_checkpoint(table, tmp_path, 11)
    errors: list[BaseException] = []

    def save() -> None:
        try:
            checkpoint.save(CheckpointState(2, b"after", consistent=False))
        except BaseException as exc:  # reported to the test thread
            errors.append(exc)

    try:
        checkpoint.save(CheckpointState(1, b"before", consistent=False))
        downstream_mysql.stop()
        caplog.set_level(logging.WARNING, logger="drainer.checkpoint.mysql")
        saver = threading.Thread(target=save, name="checkpoint-save")
        saver.start()
        wait_until(
            lambda: any("save failed" in r.getMessage() for r in caplog.records),
            timeout=HANG_GUARD,
            what="a retried save",
        )
        downstream_mysql.start()
        saver.join(timeout=HANG_GUARD)
        assert not saver.is_alive() and not errors, errors
        assert checkpoint.load() == CheckpointState(2, b"after", False)
    finally:
        checkpoint.close()
        downstream_mysql.start()
        downstream_mysql.drop_database(schema)
