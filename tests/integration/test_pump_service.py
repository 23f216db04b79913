"""The Pump gRPC service end to end: `binlog-bridge meta` and `binlog-bridge pump`
children, producers through the real pump client SDK, a drainer's PullBinlogs
through a raw gRPC stub."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge.binlog import Binlog, BinlogType, commit, fake_binlog, prewrite, probe, rollback
from bridge.grpcutil import aio_channel
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig, PumpRejected
from tests.support.process import ChildProcess
from tests.support.pump_server import PumpProcess, prewrite_of, pull_until, start_meta
from tests.support.storage_calls import run_guarded

pytestmark = pytest.mark.timeout(300)

HANG_GUARD = 240.0  # seconds: a safety net against hangs, never a performance bound
WRITERS = 16
TOTAL_BINLOGS = 100_000
MIB = 1 << 20


run = partial(run_guarded, guard=HANG_GUARD)


@dataclass
class Server:
    meta: ChildProcess
    meta_addr: str
    pump: PumpProcess

    def client(self, **config: Any) -> AsyncPumpsClient:
        return AsyncPumpsClient(self.meta_addr, PumpClientConfig(**config))


def start_server(workdir: Path) -> Server:
    meta, meta_addr = start_meta(workdir)
    pump = PumpProcess(workdir, meta_addr)
    try:
        pump.start()
    except BaseException:
        meta.kill()
        raise
    return Server(meta, meta_addr, pump)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One meta and one pump for the tests that check their own data only."""
    server = start_server(tmp_path_factory.mktemp("pump-service"))
    yield server
    server.pump.kill()
    server.meta.kill()


@pytest.fixture
def own(tmp_path: Path) -> Iterator[Server]:
    """A meta and a pump holding only what the test writes."""
    server = start_server(tmp_path)
    yield server
    server.pump.kill()
    server.meta.kill()


@dataclass
class Ledger:
    """What the writers were told is durable."""

    committed: dict[int, int] = field(default_factory=dict)
    rolled_back: set[int] = field(default_factory=set)
    binlogs: int = 0


async def writer(client: AsyncPumpsClient, rng: random.Random, budget: list[int], ledger: Ledger) -> None:
    """Random interleavings of new Prewrites and the Commits/Rollbacks of acknowledged ones,
    several in flight at once; a second phase starts only after its Prewrite was acknowledged."""
    open_txns: list[int] = []
    while budget[0] > 0 or open_txns:
        new = min(rng.randint(0, 24), budget[0] // 2)
        budget[0] -= 2 * new
        finishing = rng.sample(open_txns, rng.randint(0, min(len(open_txns), 24)))
        if not new and not finishing:
            continue
        for start_ts in finishing:
            open_txns.remove(start_ts)
        calls: list[Awaitable[None]] = []
        started: list[int] = []
        if new:
            first = await client.get_timestamps(new)
            started = list(range(first, first + new))
            calls += [client.write_binlog(prewrite_of(s)) for s in started]
        commits = [s for s in finishing if rng.random() < 0.7]
        if commits:
            first = await client.get_timestamps(len(commits))
            pairs = dict(zip(commits, range(first, first + len(commits)), strict=True))
            calls += [client.write_binlog(commit(s, c)) for s, c in pairs.items()]
            ledger.committed.update(pairs)
        ledger.rolled_back.update(s for s in finishing if s not in commits)
        calls += [client.write_binlog(rollback(s)) for s in finishing if s not in commits]
        rng.shuffle(calls)
        await asyncio.gather(*calls)
        ledger.binlogs += len(calls)
        open_txns += started


@pytest.mark.slow  # 20-30 s on two cores: the client SDK and the pump share them
def test_100k_binlogs_from_16_writers_pull_back_in_commit_order(own: Server) -> None:
    ledger = Ledger()

    async def scenario() -> tuple[float, float]:
        async with own.client(rpc_timeout=30) as client:
            began = time.perf_counter()
            budget = [TOTAL_BINLOGS]
            rngs = [random.Random(seed) for seed in range(WRITERS)]
            await asyncio.gather(*(writer(client, rng, budget, ledger) for rng in rngs))
            written = time.perf_counter() - began
            until = max(ledger.committed.values())
            pulled = await pull_until(own.pump.addr, client.cluster_id, until)
            pulled.check(ledger.committed)
            return written, time.perf_counter() - began - written

    written, pulled = run(scenario())
    assert ledger.binlogs == TOTAL_BINLOGS
    assert len(ledger.committed) + len(ledger.rolled_back) == TOTAL_BINLOGS // 2
    print(f"wrote {TOTAL_BINLOGS} binlogs in {written:.1f}s, pulled them back in {pulled:.1f}s")


def test_a_100_mb_binlog_is_stored_and_pulled(shared: Server) -> None:
    big = Binlog(tp=BinlogType.Prewrite, prewrite_key=b"big", prewrite_value=b"")
    value = binlog_pb2.PrewriteValue(
        mutations=[
            binlog_pb2.TableMutation(
                table_id=7,
                inserted_rows=[random.randbytes(MIB) for _ in range(100)],
                sequence=[binlog_pb2.Insert] * 100,
            )
        ]
    ).SerializeToString()
    big.prewrite_value = value

    async def scenario() -> None:
        # chunk_bytes = 0: one 100 MB binlog, as the pump took before chunked transactions
        # (tests/integration/test_pump_chunks.py and the client's tests cover the parts)
        async with shared.client(rpc_timeout=120, write_timeout=240, chunk_bytes=0) as client:
            big.start_ts = await client.get_timestamp()
            await client.write_binlog(big)
            commit_ts = await client.get_timestamp()
            await client.write_binlog(commit(big.start_ts, commit_ts))
            pulled = await pull_until(shared.pump.addr, client.cluster_id, commit_ts, after=big.start_ts)
        pulled.check({big.start_ts: commit_ts}, payload_of=lambda _: big)

    assert len(value) > 100 * 1000 * 1000
    run(scenario())


async def raw_stub(server: Server) -> tuple[grpc.aio.Channel, Any, int]:
    async with server.client() as client:
        cluster_id = client.cluster_id
    channel = aio_channel(server.pump.addr)
    return channel, pump_pb2_grpc.PumpStub(channel), cluster_id


def test_each_bad_binlog_of_a_batch_gets_its_own_error_and_the_rest_is_stored(shared: Server) -> None:
    async def scenario() -> None:
        channel, stub, cluster_id = await raw_stub(shared)
        async with channel, shared.client() as client:
            good, committed = await client.get_timestamps(2), 0
            bad_commit = commit(good, good + 1)
            bad_commit.commit_ts = good - 1
            payloads = [
                prewrite_of(good).SerializeToString(),
                b"\xff\xff not a binlog",
                bad_commit.SerializeToString(),
                fake_binlog(good).SerializeToString(),
                Binlog(tp=BinlogType.PreDDL, start_ts=good, ddl_job_id=1, ddl_query=b"x").SerializeToString(),
                probe().SerializeToString(),
            ]
            response = await stub.WriteBinlogs(
                pump_pb2.WriteBinlogsReq(clusterID=cluster_id, payloads=payloads)
            )
            assert response.errmsg == ""
            ok, garbage, backwards, fake, preddl, probed = response.errmsgs
            assert ok == "" and probed == ""
            assert "not a binlog.Binlog" in garbage
            assert "a Commit needs commit_ts > start_ts" in backwards
            assert "fake binlog" in fake
            assert "PreDDL" in preddl and "not stored by a pump" in preddl
            committed = await client.get_timestamp()
            single = await stub.WriteBinlog(
                pump_pb2.WriteBinlogReq(
                    clusterID=cluster_id, payload=commit(good, committed).SerializeToString()
                )
            )
            assert single.errmsg == ""
            pulled = await pull_until(shared.pump.addr, cluster_id, committed, after=good)
            pulled.check({good: committed})

    run(scenario())


def test_wrong_cluster_id_is_refused_on_every_call(shared: Server) -> None:
    async def scenario() -> None:
        channel, stub, cluster_id = await raw_stub(shared)
        async with channel:
            payload = prewrite(12345, []).SerializeToString()
            single = await stub.WriteBinlog(
                pump_pb2.WriteBinlogReq(clusterID=cluster_id + 1, payload=payload)
            )
            assert f"this pump belongs to cluster {cluster_id}" in single.errmsg
            batch = await stub.WriteBinlogs(pump_pb2.WriteBinlogsReq(clusterID=0, payloads=[payload] * 3))
            assert "cluster id mismatch" in batch.errmsg and not batch.errmsgs
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=cluster_id ^ 0xFF)):
                    pass
            assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "cluster id mismatch" in (refused.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as negative:
                request = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=-1))
                async for _ in stub.PullBinlogs(request):
                    pass
            assert negative.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    run(scenario())


def test_the_client_sdk_sees_a_rejected_binlog_as_pump_rejected(shared: Server) -> None:
    async def scenario() -> None:
        async with shared.client() as client:
            broken = prewrite(await client.get_timestamp(), [])
            broken.prewrite_value = b"\x0a\xff"
            with pytest.raises(PumpRejected, match=r"prewrite_value is not a binlog\.PrewriteValue"):
                await client.write_binlog(broken)

    run(scenario())
