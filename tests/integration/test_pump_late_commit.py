"""A pump never acknowledges a Commit it will not deliver.

The finding: with a short ``max-txn-timeout`` and ``resolver.type = none``, a
Prewrite is discarded; its Commit, arriving later, was acknowledged and then
never pulled (the sorter kept it as an orphan and dropped it). Now such a
Commit is refused: ``FAILED_PRECONDITION`` on ``WriteBinlog``, the errmsg in
``WriteBinlogs``, :class:`CommitRefused` in the SDK (not retried elsewhere).
Real ``binlog-bridge meta`` and ``pump`` processes, one pair per resolver type
(none, sqlite), shared by the module's cases; plus the ordering race through
the storage engine itself, and a settlement outliving SIGKILL of the pump
(slow). Measured: ~6 s for the module on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import grpc
import pytest

from bridge.binlog import COMMIT_REFUSED_PREFIX, commit
from bridge.errors import CommitRefused
from bridge.grpcutil import aio_channel
from bridge.meta.client import MetaClient
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc
from bridge.pumpclient import AsyncPumpsClient
from pump.storage import CommittedTxn
from pump.storage.late_commits import LateCommit
from pump.storage.storage import Storage
from tests.support.process import ChildProcess
from tests.support.pump_server import PumpProcess, prewrite_of, pull_until, start_meta
from tests.support.storage_calls import run_guarded

pytestmark = pytest.mark.timeout(120)

HANG_GUARD = 60.0  # seconds: a safety net against hangs, never a performance bound
LATE_CONFIG = """\
max-txn-timeout = "{max_txn_timeout}"
[resolver]
type = "{type}"
interval = "50ms"
{dsn}
"""


run = partial(run_guarded, guard=HANG_GUARD)


@dataclass
class Pump:
    meta: ChildProcess
    meta_addr: str
    process: PumpProcess
    cluster_id: int = 0

    @property
    def addr(self) -> str:
        return self.process.addr

    def metric(self, name: str, **labels: str) -> float:
        url = f"http://127.0.0.1:{self.process.status_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            text = response.read().decode()
        selector = ",".join(f'{key}="{value}"' for key, value in labels.items())
        pattern = rf"^{name}\{{{re.escape(selector)}\}} (\S+)$" if labels else rf"^{name} (\S+)$"
        found = re.search(pattern, text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    async def lost_commits_settled(self, outcome: str, count: float) -> None:
        """Wait (hang guard only) until the sweeper settled ``count`` Prewrites with ``outcome``."""
        while self.metric("bridge_pump_lost_commits_total", outcome=outcome) < count:
            await asyncio.sleep(0.05)

    async def timestamp(self) -> int:
        async with MetaClient(self.meta_addr) as meta:
            return await meta.get_timestamp()

    async def write(self, binlog: binlog_pb2.Binlog) -> str:
        """One raw ``WriteBinlog`` call; its errmsg."""
        async with aio_channel(self.addr) as channel:
            stub = pump_pb2_grpc.PumpStub(channel)
            request = pump_pb2.WriteBinlogReq(clusterID=self.cluster_id, payload=binlog.SerializeToString())
            response = await stub.WriteBinlog(request, timeout=30)
            return str(response.errmsg)


def start_pump(workdir: Path, resolver_type: str, dsn: str = "", max_txn_timeout: str = "200ms") -> Pump:
    workdir.mkdir()
    meta, meta_addr = start_meta(workdir)
    extra = LATE_CONFIG.format(
        type=resolver_type, dsn=f'dsn = "{dsn}"' if dsn else "", max_txn_timeout=max_txn_timeout
    )
    process = PumpProcess(workdir, meta_addr, extra_config=extra)
    try:
        process.start()
    except BaseException:
        meta.kill()
        raise

    async def cluster_id() -> int:
        async with MetaClient(meta_addr) as client:
            return await client.cluster_id()

    return Pump(meta, meta_addr, process, run(cluster_id()))


@pytest.fixture(scope="module")
def none_pump(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pump]:
    pump = start_pump(tmp_path_factory.mktemp("late") / "none", "none")
    yield pump
    pump.process.kill()
    pump.meta.kill()


STATUS_TABLE = "CREATE TABLE bridge_txn_status (start_ts INTEGER PRIMARY KEY, commit_ts INTEGER NOT NULL)"


@pytest.fixture(scope="module")
def sqlite_pump(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pump, Path]]:
    upstream = tmp_path_factory.mktemp("upstream") / "up.db"
    with sqlite3.connect(upstream) as conn:
        conn.execute(STATUS_TABLE)
    conn.close()
    # 1 s: the "found" scenario writes its status row after its Prewrite (see there)
    pump = start_pump(
        tmp_path_factory.mktemp("late") / "sqlite", "sqlite", f"sqlite://{upstream}", max_txn_timeout="1s"
    )
    yield pump, upstream
    pump.process.kill()
    pump.meta.kill()


def test_the_sdk_gets_commit_refused_for_a_discarded_prewrite(none_pump: Pump) -> None:
    """The finding, through the SDK: Prewrite, wait past max-txn-timeout, Commit."""
    pump = none_pump

    async def scenario() -> None:
        discarded = pump.metric("bridge_pump_lost_commits_total", outcome="discarded")
        refused = pump.metric("bridge_pump_late_commits_refused_total", reason="settled")
        async with AsyncPumpsClient(pump.meta_addr) as client:
            lost_start = await client.get_timestamp()
            await client.write_binlog(prewrite_of(lost_start))
            await pump.lost_commits_settled("discarded", discarded + 1)
            lost_commit = await client.get_timestamp()  # fresh: above everything the pump released
            with pytest.raises(CommitRefused) as refusal:
                await client.write_binlog(commit(lost_start, lost_commit))
            message = str(refusal.value)
            assert f"start_ts {lost_start}" in message and f"commit_ts {lost_commit}" in message
            assert 'discarded by resolver "none"' in message, message
            # The pump still takes and delivers other transactions.
            start_ts = await client.get_timestamp()
            await client.write_binlog(prewrite_of(start_ts))
            commit_ts = await client.get_timestamp()
            await client.write_binlog(commit(start_ts, commit_ts))
        pulled = await pull_until(pump.addr, pump.cluster_id, commit_ts)
        pulled.check({start_ts: commit_ts})
        assert pump.metric("bridge_pump_late_commits_refused_total", reason="settled") == refused + 1

    run(scenario())
    assert pump.process.output.count("refused a Commit:") >= 1


def test_write_binlog_answers_failed_precondition_and_takes_duplicates(none_pump: Pump) -> None:
    """Raw gRPC: the refused Commit ends with FAILED_PRECONDITION; a Commit below
    the watermark with no Prewrite too; a retried delivered Commit is still taken."""
    pump = none_pump

    async def scenario() -> None:
        discarded = pump.metric("bridge_pump_lost_commits_total", outcome="discarded")
        lost_start = await pump.timestamp()
        assert await pump.write(prewrite_of(lost_start)) == ""
        await pump.lost_commits_settled("discarded", discarded + 1)
        with pytest.raises(grpc.aio.AioRpcError) as refusal:
            await pump.write(commit(lost_start, await pump.timestamp()))
        assert refusal.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        details = refusal.value.details() or ""
        assert details.startswith(COMMIT_REFUSED_PREFIX) and f"start_ts {lost_start}" in details

        start_ts = await pump.timestamp()
        assert await pump.write(prewrite_of(start_ts)) == ""
        commit_ts = await pump.timestamp()
        assert await pump.write(commit(start_ts, commit_ts)) == ""
        await pull_until(pump.addr, pump.cluster_id, commit_ts + 1)  # the watermark passed it
        assert await pump.write(commit(start_ts, commit_ts)) == ""  # a retry: a duplicate, taken
        with pytest.raises(grpc.aio.AioRpcError) as late:  # no Prewrite here, below the watermark
            await pump.write(commit(start_ts - 1, start_ts))
        assert late.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "watermark" in (late.value.details() or "")
        pulled = await pull_until(pump.addr, pump.cluster_id, await pump.timestamp(), after=lost_start - 1)
        pulled.check({start_ts: commit_ts})

    run(scenario())


def test_the_sqlite_resolver_settles_both_ways(sqlite_pump: tuple[Pump, Path]) -> None:
    """Found upstream: the producer's late Commit at the same commit_ts is a
    duplicate (taken, delivered once), at another commit_ts refused; not found:
    refused naming the sqlite resolver."""
    pump, upstream = sqlite_pump

    async def scenario() -> None:
        found_start, lost_start = await pump.timestamp(), await pump.timestamp()
        for start_ts in (found_start, lost_start):
            assert await pump.write(prewrite_of(start_ts)) == ""
        # As a producer does: the commit_ts is taken once the Prewrite is durable, so it is above
        # every fake binlog the pump wrote before (one taken earlier could fall below the
        # watermark, and the resolver's Commit at it would be late). The status row follows
        # within the pump's max-txn-timeout (1 s here) of found_start.
        found_commit = await pump.timestamp()
        with sqlite3.connect(upstream) as conn:
            conn.execute("INSERT INTO bridge_txn_status VALUES (?, ?)", (found_start, found_commit))
        conn.close()
        await pump.lost_commits_settled("found", 1)
        await pump.lost_commits_settled("discarded", 1)
        assert await pump.write(commit(found_start, found_commit)) == ""
        with pytest.raises(grpc.aio.AioRpcError) as other:
            await pump.write(commit(found_start, found_commit + 1))
        assert f"found it committed at commit_ts {found_commit}" in (other.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as lost:
            await pump.write(commit(lost_start, await pump.timestamp()))
        assert lost.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        details = lost.value.details() or ""
        assert f'discarded by resolver "sqlite" ({upstream})' in details, details
        pulled = await pull_until(pump.addr, pump.cluster_id, await pump.timestamp())
        pulled.check({found_start: found_commit})

    run(scenario())


def test_a_commit_racing_the_resolver_is_either_stored_first_or_refused(tmp_path: Path) -> None:
    """The storage engine alone: a Commit submitted before the sweeper's Rollback
    is delivered (and its retry taken); one submitted after it is refused."""

    async def scenario() -> None:
        storage = await Storage.open(tmp_path / "pump")
        try:
            first, second = 1 << 40, (1 << 40) + 10
            for start_ts in (first, second):
                binlog = prewrite_of(start_ts)
                await storage.write([(binlog, binlog.SerializeToString())])
            ahead = commit(first, first + 5)
            # Scheduled in this order: the Commit is submitted before the Rollback.
            await asyncio.gather(
                storage.write([(ahead, ahead.SerializeToString())]), storage.resolve(first, None, by="test")
            )
            await storage.resolve(second, None, by="test")
            behind = commit(second, second + 5)
            with pytest.raises(LateCommit, match=f"start_ts {second} .*discarded by test"):
                await storage.write([(behind, behind.SerializeToString())])
            await storage.write_fake(second + 100)
            await storage.write([(ahead, ahead.SerializeToString())])  # a retry: taken
            pulled: list[tuple[int, int]] = []
            async for items in storage.pull(0):
                pulled += [(i.start_ts, i.commit_ts) for i in items if isinstance(i, CommittedTxn)]
                if storage.watermark >= second + 100:
                    break
            assert pulled == [(first, first + 5)]
        finally:
            await storage.close()
        reopened = await Storage.open(tmp_path / "pump")  # the settlement outlives the process
        try:
            above = commit(second, second + 1_000_000)  # above the watermark: only settled.log knows
            with pytest.raises(LateCommit, match=f"start_ts {second} .*discarded by test"):
                await reopened.write([(above, above.SerializeToString())])
        finally:
            await reopened.close()

    run(scenario())


@pytest.mark.slow
def test_a_settlement_survives_sigkill_of_the_pump(none_pump: Pump) -> None:
    """Prewrite, discarded, pump SIGKILLed and restarted: the Commit is still refused."""
    pump = none_pump

    async def discard() -> int:
        discarded = pump.metric("bridge_pump_lost_commits_total", outcome="discarded")
        start_ts = await pump.timestamp()
        assert await pump.write(prewrite_of(start_ts)) == ""
        await pump.lost_commits_settled("discarded", discarded + 1)
        return start_ts

    start_ts = run(discard())
    pump.process.kill()
    pump.process.start()

    async def late_commit() -> None:
        with pytest.raises(grpc.aio.AioRpcError) as refusal:
            await pump.write(commit(start_ts, await pump.timestamp()))
        assert refusal.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"start_ts {start_ts}" in (refusal.value.details() or "")

    run(late_commit())
