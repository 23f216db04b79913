"""The meta service SIGKILLed and restarted under load (issue 15, item 7).

A producer writes transactions through a pump while a second client draws timestamps from
the TSO as fast as it can; the meta service (local backend, its data dir kept) is SIGKILLed
twice mid-load and restarted on the same address. Then: every timestamp either client got is
unique, each client's timestamps strictly increase across the restarts (the TSO's persisted
window), the load went on after each restart, and the drainer's sink holds exactly the
committed transactions. Run time: ~10 s.

The fault suite (tests/e2e/test_faults_*.py, 7 cases, all @pytest.mark.slow) ran in 69 s
on a 2-core machine (up to ~2 min while other work shared it).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from pathlib import Path

import pytest

from bridge.errors import BridgeError
from bridge.meta.client import MetaClient
from tests.support.drainer_cluster import (
    DrainerProcess,
    Producer,
    delivered,
    expected_records,
    strip_ddl_details,
    table,
)
from tests.support.process import ChildProcess, bridge_cli, free_port, wait_until
from tests.support.pump_server import PumpProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
log = logging.getLogger(__name__)

KILLS = 2


class Meta:
    """`binlog-bridge meta` on a fixed address and data dir, across kills."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.addr = f"127.0.0.1:{free_port()}"
        self.child: ChildProcess | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        argv = bridge_cli("meta", "--data-dir", str(self.workdir / "meta"), "--addr", self.addr)
        self.child = ChildProcess(argv, self.workdir / f"meta.{self.starts}.out")
        self.child.wait_for_line("meta ready", timeout=60)

    def kill(self) -> None:
        if self.child is not None:
            self.child.kill()


class TimestampDrawer(threading.Thread):
    """Draws TSO timestamps one by one until stopped; a call that fails is retried."""

    def __init__(self, meta_addr: str) -> None:
        super().__init__(daemon=True)
        self.meta_addr = meta_addr
        self.stamps: list[int] = []
        self.failures = 0
        self.stop = threading.Event()

    def run(self) -> None:
        asyncio.run(self._draw())

    async def _draw(self) -> None:
        async with MetaClient(self.meta_addr) as meta:
            while not self.stop.is_set():
                try:
                    self.stamps.append(await meta.get_timestamp())
                except BridgeError:
                    self.failures += 1
                await asyncio.sleep(0.002)


class Load(threading.Thread):
    """Inserts rows through the producer until stopped, recording any failure (none is expected:
    the clients retry through the fault)."""

    def __init__(self, producer: Producer) -> None:
        super().__init__(daemon=True)
        self.producer = producer
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        row = 0
        while not self.stop.is_set():
            row += 1
            try:
                self.producer.txn([("insert", "orders", None, [row, f"row {row}"])])
            except BridgeError as exc:
                self.failures.append(str(exc))


def test_meta_killed_and_restarted_under_load_keeps_the_tso_monotonic(tmp_path: Path) -> None:
    meta = Meta(tmp_path)
    meta.start()
    # max-txn-timeout stays at its default: a transaction whose commit_ts waits out the restart
    # must not have its Prewrite resolved away meanwhile (resolver none would discard it)
    pump = PumpProcess(tmp_path, meta.addr)
    pump.start()
    drainer = DrainerProcess(tmp_path, meta.addr)
    drainer.start()
    producer = Producer(meta.addr)
    producer.create(table("orders", 1))
    drawer, load = TimestampDrawer(meta.addr), Load(producer)
    try:
        drawer.start()
        load.start()
        for kill in range(KILLS):
            wanted = 30 * (kill + 1)
            wait_until(lambda: len(producer.written) >= wanted, what="load before the kill")  # noqa: B023
            before = (len(producer.written), len(drawer.stamps))
            meta.kill()
            time.sleep(0.3)  # let the clients see it gone
            meta.start()
            wait_until(
                lambda: len(producer.written) > before[0] + 10 and len(drawer.stamps) > before[1] + 10,  # noqa: B023
                what="the load to go on after the restart",
            )
        load.stop.set()
        drawer.stop.set()
        load.join(timeout=60)
        drawer.join(timeout=60)
        log.warning(
            "%d restarts: %d transactions and %d timestamps drawn; failed calls: %d txns, %d timestamps",
            KILLS,
            len(producer.written),
            len(drawer.stamps),
            len(load.failures),
            drawer.failures,
        )
        assert load.failures == [], load.failures[:3]
        stamps = drawer.stamps
        assert all(a < b for a, b in itertools.pairwise(stamps)), "TSO went backwards"
        producer_stamps = [ts for w in producer.written for ts in (w.start_ts, w.commit_ts)]
        assert all(a < b for a, b in itertools.pairwise(producer_stamps))
        everything = stamps + producer_stamps
        assert len(set(everything)) == len(everything), "a timestamp was handed out twice"

        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        assert strip_ddl_details(delivered(drainer.records())) == expected_records(producer.written)
    finally:
        load.stop.set()
        drawer.stop.set()
        producer.close()
        drainer.kill()
        pump.kill()
        meta.kill()
