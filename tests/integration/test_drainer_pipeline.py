"""The drainer end to end: real `binlog-bridge meta`, real `binlog-bridge pump` children,
writes through the real pump client, a real `binlog-bridge drainer` child.

The sink is the recording test double of the drainer's own Sink protocol
(:mod:`tests.support.recording_sink`), so each test sees exactly which events
the drainer delivered and in which order; the sqlite sink test checks a real
downstream.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.proto import row_pb2
from tests.support.drainer_cluster import (
    DrainerProcess,
    Producer,
    check_runs,
    delivered,
    expected_records,
    strip_ddl_details,
    table,
)
from tests.support.process import wait_until
from tests.support.pump_server import PumpProcess, running_pumps

pytestmark = pytest.mark.timeout(300)

T = row_pb2.ColumnType


@pytest.fixture
def pumps(tmp_path: Path, meta_addr: str) -> Iterator[list[PumpProcess]]:
    yield from running_pumps(tmp_path, meta_addr, 3)


@pytest.fixture
def drainer(tmp_path: Path, meta_addr: str) -> Iterator[DrainerProcess]:
    process = DrainerProcess(tmp_path, meta_addr)
    yield process
    process.kill()


@pytest.fixture
def producer(meta_addr: str) -> Iterator[Producer]:
    producer = Producer(meta_addr)
    yield producer
    producer.close()


def check_delivered(drainer: DrainerProcess, producer: Producer) -> list[dict[str, object]]:
    """Everything written arrived once, in commit order; returns the raw records."""
    drainer.wait_checkpoint(producer.written[-1].commit_ts)
    records = drainer.records()
    assert strip_ddl_details(delivered(records)) == expected_records(producer.written)
    check_runs(records)
    return records


def write_mix(producer: Producer, start: int, count: int) -> None:
    """Inserts, updates (also of the key) and deletes over two tables."""
    for i in range(start, start + count):
        producer.txn(
            [
                ("insert", "users", None, (i, f"user {i}")),
                ("insert", "orders", None, (i, f"order {i}")),
                ("update", "users", (i, f"user {i}"), (i, f"user {i} v2")),
            ]
        )
        if i % 5 == 0:
            producer.txn(
                [
                    ("update", "orders", (i, f"order {i}"), (i + 1_000_000, f"order {i}")),
                    ("delete", "users", (i, f"user {i} v2"), None),
                ]
            )


def test_three_pumps_merge_in_commit_order_exactly_once(
    pumps: list[PumpProcess], drainer: DrainerProcess, producer: Producer
) -> None:
    drainer.start()
    producer.create(table("users", 10))
    producer.create(table("orders", 11))
    write_mix(producer, 0, 60)
    email = row_pb2.Column(id=3, name="email", type=T.TEXT, nullable=True)
    producer.alter(table("users", 10, extra=[email]))
    for i in range(500, 520):
        producer.txn(
            [("insert", "users", None, (i, "after alter", f"{i}@y")), ("insert", "orders", None, (i, None))]
        )
    producer.txn([("update", "users", (500, "after alter", "500@y"), (500, "after alter", None))])
    records = check_delivered(drainer, producer)
    assert check_runs(records) == [0]
    status = drainer.status()
    assert {p["node_id"] for p in status["pumps"]} == {"pump-0", "pump-1", "pump-2"}
    assert all(p["received_txns"] > 0 for p in status["pumps"]), "range routing spread the writes"
    assert status["checkpoint_ts"] >= producer.written[-1].commit_ts
    assert status["lag_seconds"] is not None
    metrics = drainer.metrics()
    assert 'bridge_drainer_rows_total{kind="insert",table="shop.users"}' in metrics
    assert (
        "bridge_drainer_checkpoint_ts" in metrics
        and 'bridge_drainer_pump_watermark{pump="pump-1"}' in metrics
    )
    assert drainer.stop() == 0
    assert drainer.checkpoint()["consistent"] is True


def test_a_pump_joining_mid_run_is_notified_and_merged(
    tmp_path: Path, meta_addr: str, drainer: DrainerProcess, producer: Producer
) -> None:
    first = [PumpProcess(tmp_path, meta_addr, node_id=f"pump-{i}") for i in range(2)]
    joining = PumpProcess(tmp_path, meta_addr, node_id="pump-new")
    try:
        for pump in first:
            pump.start()
        drainer.start()
        producer.create(table("users", 10))
        producer.create(table("orders", 11))
        write_mix(producer, 0, 20)
        joining.start()  # goes online only after the drainer answered Notify
        assert drainer.child is not None
        drainer.child.wait_for_line(r"Notify answered: merging .*pump-new")
        wait_until(lambda: "pump-new" in producer.client.available, what="the pump client to see pump-new")
        write_mix(producer, 100, 30)
        check_delivered(drainer, producer)
        new = next(p for p in drainer.status()["pumps"] if p["node_id"] == "pump-new")
        assert new["received_txns"] > 0
    finally:
        for pump in [*first, joining]:
            pump.kill()


def test_sigkill_and_restart_resume_from_the_checkpoint(
    pumps: list[PumpProcess], drainer: DrainerProcess, producer: Producer
) -> None:
    drainer.start()
    producer.create(table("users", 10))
    producer.create(table("orders", 11))
    stop_writing = threading.Event()
    counter = itertools.count()

    def keep_writing() -> None:
        while not stop_writing.is_set():
            write_mix(producer, 10 * next(counter), 1)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    restarts = []
    try:
        for _ in range(2):
            wait_until(lambda: len(producer.written) > 40, what="some writes")
            drainer.wait_checkpoint(producer.written[-1].commit_ts)
            drainer.kill()
            restarts.append(drainer.checkpoint()["commitTS"])
            assert drainer.checkpoint()["consistent"] is False
            drainer.start()
            assert drainer.child is not None
            drainer.child.wait_for_line(rf"resuming after commit_ts {restarts[-1]}")
    finally:
        stop_writing.set()
        writer.join()
    records = check_delivered(drainer, producer)
    assert check_runs(records) == [0, *restarts]  # each run resumed at the checkpoint it found


def test_sigkilled_pump_is_pulled_again_after_its_restart(
    pumps: list[PumpProcess], drainer: DrainerProcess, producer: Producer
) -> None:
    drainer.start()
    producer.create(table("users", 10))
    producer.create(table("orders", 11))
    write_mix(producer, 0, 20)
    drainer.wait_checkpoint(producer.written[-1].commit_ts)
    pumps[1].kill()
    wait_until(lambda: "pump-1" not in producer.client.available, what="the client to drop pump-1")
    write_mix(producer, 100, 10)  # the other pumps take these; the merge waits for pump-1
    pumps[1].start()
    write_mix(producer, 200, 20)
    check_delivered(drainer, producer)
    status = next(p for p in drainer.status()["pumps"] if p["node_id"] == "pump-1")
    assert status["connects"] >= 2


def test_the_seeds_transaction_reaches_the_sqlite_and_file_sinks(
    pumps: list[PumpProcess], tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = DrainerProcess(tmp_path, meta_addr, sink_type='["sqlite", "file"]')
    try:
        drainer.start()
        schema = table("test", 10, db="seeds")
        producer.create(schema)
        producer.txn(
            [
                ("insert", "test", None, (1, "a")),
                ("insert", "test", None, (2, "b")),
                ("update", "test", (1, "a"), (1, "c")),
                ("update", "test", (2, "b"), (2, "d")),
                ("delete", "test", (2, "d"), None),
                ("insert", "test", None, (2, "c")),
            ]
        )
        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        rows = downstream_rows(drainer.data_dir / "sqlite", "seeds", "test")
        assert rows == [(1, "c"), (2, "c")]
        assert list((drainer.data_dir / "binlog-files").glob("binlog-*")), "the file sink got the stream too"
    finally:
        drainer.kill()


def downstream_rows(directory: Path, db: str, name: str) -> list[tuple[object, ...]]:
    """The rows of ``db.name`` in the sqlite sink's files (one file per upstream database)."""
    conn = sqlite3.connect(directory / f"{db}.db")
    try:
        return list(conn.execute(f'select id, name from "{name}" order by id'))
    finally:
        conn.close()
