"""The Spark consumers end to end, real broker and real Spark (the run's one local[2] session):
`binlog-bridge load` (updates, deletes, key changes, keyless rows, added and dropped columns, tables
created and dropped) against a SQLite upstream → three pumps → a drainer with the kafka sink
(single-object encoding) → the index job → ``bridge.diff`` of the index against the upstream: equal,
every upstream row found by its key, no deleted row found; the snapshot job's Parquet: equal too.

The index job streams (1 s trigger) while the load runs, so rows committed meanwhile become
searchable as they come; then the same topics from an empty checkpoint with ``--available-now``
must give the same documents. The registry encoding end to end is in test_spark_registry_e2e.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import tantivy

from spark_consumers.config import JobConfig
from spark_consumers.index import search
from spark_consumers.jobs import RunningJob, StopFlag, run
from spark_consumers.source import kafka, offsets
from tests.e2e.test_kafka_e2e import HANG_GUARD, kafka_cluster, upstream  # noqa: F401 (fixtures)
from tests.e2e.test_pipeline import LOAD_TABLES, run_load
from tests.support.spark_sources import IndexSource, SnapshotSource, assert_equal_to_upstream

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(600)]


def job(kind: str, bootstrap: str, prefix: str, work: Path, name: str, **settings: Any) -> JobConfig:
    """A job over every table topic of ``prefix`` writing ``work/name`` (checkpoint beside it)."""
    return JobConfig(
        kind=kind, bootstrap_servers=bootstrap, topics=[f"{prefix}.*"], output=work / name,
        checkpoint=work / f"{name}.checkpoint", **settings,
    )  # fmt: skip


def topic_ends(bootstrap: str, prefix: str) -> offsets.Offsets:
    """Where every selected partition ends now (the job's own Tansu-safe probe)."""
    probe = kafka.EndProbe(bootstrap)
    try:
        return probe.ends(kafka.list_partitions(probe.consumer, [f"{prefix}.*"], True))
    finally:
        probe.close()


def documents(path: Path) -> dict[str, tuple[Any, ...]]:
    """Every document of an index, live or tombstone: id -> (live, commit_ts, position, row)."""
    out = {}
    for index in search.open_existing(path):
        searcher = index.searcher()
        for _, address in searcher.search(tantivy.Query.all_query(), limit=max(searcher.num_docs, 1)).hits:
            doc = searcher.doc(address).to_dict()
            row = json.dumps(search.hit(doc)["row"], sort_keys=True)
            assert doc["_id"][0] not in out, f"{doc['_id'][0]} in two shards"
            out[doc["_id"][0]] = (doc["_live"][0], doc["_ts"][0], doc["_pos"][0], row)
    return out


def assert_found_by_key(dsn: str, index_path: Path) -> int:
    """Every row of the keyed load tables is the live document ``main/<table>/<id>``."""
    from tests.support.spark_sources import diff_module

    index = search.open_existing(index_path)
    source = diff_module("").open_source(dsn, "--upstream")
    found = 0
    try:
        for table in ("load_accounts", "load_orders", "load_docs", "load_wide"):
            for (key,) in source.rows("main", table, ["id"]):
                hit = search.get(index, f"main/{table}/{key}")
                assert hit is not None and hit["row"]["id"] == key, f"main.{table} id {key} not found"
                found += 1
    finally:
        source.close()
    return found


def assert_full_text_finds(dsn: str, index_path: Path) -> None:
    """A word of a load_docs title finds that document (full text over the table's string columns)."""
    from tests.support.spark_sources import diff_module

    source = diff_module("").open_source(dsn, "--upstream")
    try:
        key, title = next(iter(source.rows("main", "load_docs", ["id", "title"])))
    finally:
        source.close()
    word = next(w for w in str(title).split() if w.isalnum())
    hits = search.search(index_path, f'_key:"{key}" AND {word}', table="main.load_docs", limit=5)
    assert [h["row"]["id"] for h in hits] == [key], (word, hits)
    assert hits[0]["score"] > 0


def assert_readme_search_finds(dsn: str, index_path: Path) -> None:
    """The README tour's last command, as a user runs it (``python -m spark_consumers search``), over
    this index of the load's data: its hits are paid orders of the upstream, as many as it has (<= 3)."""
    from tests.support.spark_sources import diff_module

    source = diff_module("").open_source(dsn, "--upstream")
    try:
        orders = source.rows("main", "load_orders", ["id", "status"])
        paid = {key for key, status in orders if status == "paid"}
    finally:
        source.close()
    argv = [sys.executable, "-m", "spark_consumers", "search", "--index", str(index_path), "row.status:paid",
            "--table", "main.load_orders", "--limit", "3"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    hits = [json.loads(line) for line in out.splitlines()]
    assert len(hits) == min(3, len(paid)) and {h["row"]["id"] for h in hits} <= paid, (len(paid), out)


def commit_probe_row(meta_addr: str, dsn: str) -> str:
    """CREATE TABLE spark_probe and insert one row upstream, through the pumps; the row's key."""
    from bridge.producer import TxnWriter, open_upstream
    from bridge.pumpclient import PumpsClient

    word = f"probe{time.monotonic_ns()}"
    with PumpsClient(meta_addr) as pumps:
        writer = TxnWriter(open_upstream(dsn), pumps)
        writer.ddl("CREATE TABLE spark_probe (id VARCHAR(40) NOT NULL PRIMARY KEY, n INT NULL)")
        with writer.transaction() as txn:
            txn.insert("spark_probe", {"id": word, "n": 1})
        writer.close()
    return word


def rename_under_load(meta_addr: str, dsn: str, index: Path) -> Any:
    """A fault for ``run_load``: while the load runs, create ``spark_moving`` with rows, wait until
    the job indexed them, update a few and at once ``ALTER TABLE spark_moving RENAME TO spark_moved``:
    the documents must move, the updated ones with their update."""
    from bridge.producer import TxnWriter, open_upstream
    from bridge.pumpclient import PumpsClient

    def fault(cluster: Any, load: Any) -> None:
        with PumpsClient(meta_addr) as pumps:
            writer = TxnWriter(open_upstream(dsn), pumps)
            writer.ddl("CREATE TABLE spark_moving (id INT NOT NULL PRIMARY KEY, title VARCHAR(40) NULL)")
            with writer.transaction() as txn:
                for i in range(20):
                    txn.insert("spark_moving", {"id": i, "title": f"moving row {i}"})
            wait_for(
                lambda: search.get(search.open_existing(index), "main/spark_moving/19"),
                "spark_moving indexed",
            )
            with writer.transaction() as txn:  # most likely in the rename's micro-batch: these move
                for i in range(5):
                    txn.update("spark_moving", {"id": i}, {"title": f"updated row {i}"})
            writer.ddl("ALTER TABLE spark_moving RENAME TO spark_moved")  # SQLite and MySQL alike
            with writer.transaction() as txn:
                txn.insert("spark_moved", {"id": 20, "title": "after the rename"})
            writer.close()

    return fault


class StreamingJob:
    """The index job streaming in a thread of the test process (the shared SparkSession)."""

    def __init__(self, spark: Any, config: JobConfig) -> None:
        self.stop = StopFlag()
        self.running = RunningJob(spark, config, self.stop)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._wait, name="index-job", daemon=True)
        self.thread.start()

    def _wait(self) -> None:
        try:
            self.running.wait(sys.stderr)
        except BaseException as exc:  # reported by check()
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"the index job failed: {self.error!r}") from self.error

    def applied_through(self, ends: offsets.Offsets) -> bool:
        """A batch that reached ``ends`` on every partition was applied."""
        self.check()
        return offsets.behind(self.running.position(), ends) == 0

    def close(self) -> None:
        self.stop.requested = True
        self.thread.join(HANG_GUARD)
        assert not self.thread.is_alive(), "hang guard: the index job did not stop"
        self.check()


def wait_for(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD
    while not predicate():
        assert time.monotonic() < deadline, f"hang guard: no {what} after {HANG_GUARD:g}s"
        time.sleep(0.5)


def test_load_streamed_into_the_index_and_snapshot_equals_the_upstream(
    spark: Any,
    kafka_cluster: Any,  # noqa: F811
    upstream: str,  # noqa: F811
    kafka_bootstrap: str,
    unique_name: str,
    tmp_path: Path,
) -> None:
    cluster = kafka_cluster
    streaming = StreamingJob(
        spark, job("index", kafka_bootstrap, unique_name, tmp_path, "live", trigger_interval=1.0)
    )
    try:
        rename = rename_under_load(cluster.meta_addr, upstream, tmp_path / "live")
        run_load(cluster, upstream, seconds=6, fault=rename, interrupt=False)
        final_ts = cluster.timestamp()
        cluster.wait_caught_up(final_ts, timeout=HANG_GUARD)
        ends = topic_ends(kafka_bootstrap, unique_name)
        wait_for(lambda: streaming.applied_through(ends), "index batch through the end of every topic")
        # a row committed now, into a table created now (a topic the job has not seen), is found
        word = commit_probe_row(cluster.meta_addr, upstream)
        wait_for(
            lambda: search.get(search.open_existing(tmp_path / "live"), f"main/spark_probe/{word}"),
            "the probe row indexed",
        )
        final_ts = cluster.timestamp()
        cluster.wait_caught_up(final_ts, timeout=HANG_GUARD)
        ends = topic_ends(kafka_bootstrap, unique_name)
        wait_for(lambda: streaming.applied_through(ends), "index batch through the probe's watermarks")
    finally:
        streaming.close()

    live = tmp_path / "live"
    report = assert_equal_to_upstream(
        upstream, IndexSource(live), {*LOAD_TABLES, "spark_probe", "spark_moved"}
    )
    assert search.get(search.open_existing(live), "main/spark_moved/0") is not None  # moved, not re-read
    print("\n".join(report.lines()))
    assert assert_found_by_key(upstream, live) > 0
    assert_full_text_finds(upstream, live)
    assert_readme_search_finds(upstream, live)

    # the same topics again from an empty checkpoint, available-now: the same documents
    assert run(spark, job("index", kafka_bootstrap, unique_name, tmp_path, "again", available_now=True)) == 0
    assert documents(tmp_path / "again") == documents(live)

    # the snapshot consumer, in batches of at most 3000 offsets
    snap = job("snapshot", kafka_bootstrap, unique_name, tmp_path, "snapshot", available_now=True,
               max_offsets_per_trigger=3000)  # fmt: skip
    assert run(spark, snap) == 0
    assert_equal_to_upstream(upstream, SnapshotSource(tmp_path / "snapshot"), LOAD_TABLES)
    # and Spark SQL reads it as it is
    accounts = spark.read.parquet(str(tmp_path / "snapshot" / "main.load_accounts" / "rows.parquet"))
    assert accounts.count() == sum(1 for _ in IndexSource(live).rows("main", "load_accounts", ["id"]))
