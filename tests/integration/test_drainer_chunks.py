"""Chunked transactions through real `binlog-bridge meta`, `pump` and `drainer` children.

A producer whose pump client has a small ``chunk-bytes`` writes a transaction of
~50,000 changes (inserts, updates, deletes over two tables) as ~100 PrewriteChunk
parts and its Prewrite, with ordinary transactions on two pumps around it. The
drainer gathers the parts on disk and hands the recording sink one transaction:
every change arrives exactly once, in order. A drainer SIGKILLed after it began
pulling the chunked transaction, and again while the sink is in the middle of it,
restarts, pulls it again from part 1 and ends equal; the spill directory holds no
file (the parts live in unlinked files).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.drainer_cluster import (
    DrainerProcess,
    Producer,
    Written,
    check_runs,
    delivered,
    expected_records,
    strip_ddl_details,
    table,
)
from tests.support.process import wait_until
from tests.support.pump_server import PumpProcess

pytestmark = [pytest.mark.timeout(600)]

CHUNK_BYTES = 16384
BIG_INSERTS = 45_000


@pytest.fixture
def producer(pumps: list[PumpProcess], meta_addr: str) -> Iterator[Producer]:
    made = Producer(meta_addr, chunk_bytes=CHUNK_BYTES)
    yield made
    made.close()


def ordinary(producer: Producer, first: int, count: int) -> None:
    for i in range(first, first + count):
        producer.txn([("insert", "small", None, (i, f"s{i}")), ("insert", "big", None, (i, f"b{i}"))])


def big_txn(producer: Producer) -> Written:
    """~50,000 changes: inserts into big, updates and deletes of rows written before, small rows
    in between (two tables, each split across parts)."""
    changes: list[tuple[str, str, tuple[object, ...] | None, tuple[object, ...] | None]] = []
    for i in range(BIG_INSERTS):
        changes.append(("insert", "big", None, (10_000 + i, f"row number {i} of the big one")))
        if i % 20 == 0:
            changes.append(("insert", "small", None, (10_000 + i, f"beside {i}")))
    for i in range(0, 40):
        changes.append(("update", "big", (i, f"b{i}"), (i, f"updated {i}")))
    for i in range(40, 80):
        changes.append(("delete", "big", (i, f"b{i}"), None))
    written = producer.txn(changes)
    assert len(written.changes) > 47_000
    return written


def metric(drainer: DrainerProcess, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", drainer.metrics(), re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def assert_equal(drainer: DrainerProcess, producer: Producer) -> None:
    got = strip_ddl_details(delivered(drainer.records()))
    assert len(got) == len(producer.written)
    for record, want in zip(got, expected_records(producer.written), strict=True):
        assert record == want, f"commit_ts {want['commit_ts']} differs"
    check_runs(drainer.records())


def test_a_chunked_transaction_arrives_once_in_order_among_others(
    tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = DrainerProcess(tmp_path, meta_addr)
    try:
        drainer.start()
        producer.create(table("big", 30))
        producer.create(table("small", 31))
        ordinary(producer, 0, 100)
        big = big_txn(producer)
        ordinary(producer, 100, 20)
        drainer.wait_checkpoint(producer.written[-1].commit_ts, timeout=300)
        assert_equal(drainer, producer)
        assert metric(drainer, "bridge_drainer_chunked_txns_total") == 1
        spilled = metric(drainer, "bridge_drainer_spilled_bytes_total")
        assert spilled > 1 << 20  # the parts went to disk
        assert os.listdir(drainer.data_dir / "spill") == []
        assert all(p["pending_parts"] == 0 for p in drainer.status()["pumps"])
        assert sum(len(w.changes) for w in producer.written if w.commit_ts == big.commit_ts) > 47_000
    finally:
        drainer.kill()


def test_a_drainer_killed_in_the_middle_of_a_chunked_transaction_ends_equal(
    tmp_path: Path, meta_addr: str, producer: Producer
) -> None:
    drainer = DrainerProcess(tmp_path, meta_addr)
    spill = drainer.data_dir / "spill"
    try:
        drainer.start()
        producer.create(table("big", 30))
        producer.create(table("small", 31))
        ordinary(producer, 0, 100)
        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        big = big_txn(producer)
        ordinary(producer, 100, 10)
        # killed once it has begun gathering the parts (pulling, or already applying)
        wait_until(
            lambda: metric(drainer, "bridge_drainer_spilled_bytes_total") > 0,
            timeout=120,
            what="the drainer to spill the chunked transaction's parts",
        )
        drainer.kill()
        assert os.listdir(spill) == []  # unlinked files: a crash leaves nothing

        # killed while the sink is half-way through the transaction's rows
        drainer.sink_tables = (
            f'[sink."{drainer.sink_type.strip(chr(34))}"]\nhang-at-commit-ts = {big.commit_ts}'
        )
        hanging = drainer.data_dir / "hanging"
        drainer.start()
        wait_until(hanging.exists, timeout=300, what="the sink to be half-way through the big transaction")
        assert drainer.checkpoint()["commitTS"] < big.commit_ts
        drainer.kill()
        assert os.listdir(spill) == []
        hanging.unlink()

        drainer.sink_tables = ""
        drainer.start()
        ordinary(producer, 200, 10)
        drainer.wait_checkpoint(producer.written[-1].commit_ts, timeout=300)
        assert_equal(drainer, producer)
        assert metric(drainer, "bridge_drainer_chunked_txns_total") == 1  # pulled again from part 1
        # the last run began below the big transaction (a killed run's own "open" line may be lost
        # with its unflushed buffer)
        assert check_runs(drainer.records())[-1] < big.commit_ts
    finally:
        drainer.kill()
