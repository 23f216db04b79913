"""Client-side batching against a real pump (`binlog-bridge meta` and
`binlog-bridge pump` children): binlogs written concurrently from many
threads (PumpsClient) and many tasks (AsyncPumpsClient) coalesce into
WriteBinlogs calls that carry several binlogs each, and every transaction
written is durable on the pump and pulled back once, intact."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from bridge.binlog import commit
from bridge.pumpclient import AsyncPumpsClient, PumpsClient
from tests.support.process import ChildProcess
from tests.support.pump_server import PumpProcess, prewrite_of, pull_until, start_meta

pytestmark = pytest.mark.timeout(180)

HANG_GUARD = 120.0  # seconds: a safety net against hangs, never a performance bound
THREADS = 16
TASKS = 128
TXNS_EACH = 20


@pytest.fixture(scope="module")
def pump(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, PumpProcess]]:
    workdir: Path = tmp_path_factory.mktemp("pump-batching")
    meta: ChildProcess
    meta, meta_addr = start_meta(workdir)
    server = PumpProcess(workdir, meta_addr)
    try:
        server.start()
        yield meta_addr, server
    finally:
        server.kill()
        meta.kill()


def calls_and_binlogs() -> tuple[float, float]:
    """WriteBinlogs calls the client made so far in this process, and the binlogs they carried."""
    calls = REGISTRY.get_sample_value("bridge_pump_client_batch_size_count") or 0.0
    binlogs = REGISTRY.get_sample_value("bridge_pump_client_batch_size_sum") or 0.0
    return calls, binlogs


def test_threads_writes_coalesce_and_are_all_durable(pump: tuple[str, PumpProcess]) -> None:
    meta_addr, server = pump
    written: dict[int, int] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []
    calls_before, binlogs_before = calls_and_binlogs()

    with PumpsClient(meta_addr) as client:

        def producer() -> None:
            try:
                for _ in range(TXNS_EACH):
                    start_ts = client.get_timestamp()
                    client.write_binlog(prewrite_of(start_ts))
                    commit_ts = client.get_timestamp()
                    client.write_binlog(commit(start_ts, commit_ts))
                    with lock:
                        written[start_ts] = commit_ts
            except BaseException as exc:  # reported by the test thread below
                errors.append(exc)

        threads = [threading.Thread(target=producer) for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(HANG_GUARD)
        assert not any(t.is_alive() for t in threads), "a producer thread hung"
        cluster_id = client.cluster_id

    assert not errors, errors[:3]
    calls, binlogs = (a - b for a, b in zip(calls_and_binlogs(), (calls_before, binlogs_before), strict=True))
    assert binlogs == 2 * THREADS * TXNS_EACH
    assert calls < binlogs, "no WriteBinlogs call carried more than one binlog"

    pulled = asyncio.run(
        asyncio.wait_for(pull_until(server.addr, cluster_id, max(written.values())), HANG_GUARD)
    )
    pulled.check(written)


def test_task_writes_coalesce_and_are_all_durable(pump: tuple[str, PumpProcess]) -> None:
    meta_addr, server = pump

    async def main() -> tuple[dict[int, int], int, int, int]:
        written: dict[int, int] = {}
        async with AsyncPumpsClient(meta_addr) as client:
            calls_before, binlogs_before = calls_and_binlogs()

            async def producer() -> None:
                for _ in range(TXNS_EACH):
                    start_ts = await client.get_timestamp()
                    await client.write_binlog(prewrite_of(start_ts))
                    commit_ts = await client.get_timestamp()
                    await client.write_binlog(commit(start_ts, commit_ts))
                    written[start_ts] = commit_ts

            await asyncio.gather(*(producer() for _ in range(TASKS)))
            calls, binlogs = calls_and_binlogs()
            return written, int(calls - calls_before), int(binlogs - binlogs_before), client.cluster_id

    written, calls, binlogs, cluster_id = asyncio.run(asyncio.wait_for(main(), HANG_GUARD))
    assert binlogs == 2 * TASKS * TXNS_EACH
    assert calls < binlogs, "no WriteBinlogs call carried more than one binlog"
    after = min(written) - 1
    pulled = asyncio.run(
        asyncio.wait_for(pull_until(server.addr, cluster_id, max(written.values()), after=after), HANG_GUARD)
    )
    pulled.check(written)
