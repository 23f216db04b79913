"""A pump against bad writes (issue 15): binlogs whose timestamps the TSO
never issued (written by a raw gRPC client) are refused, the watermark stays
with the TSO and the valid transactions written after are all pulled; a
binlog over the pump's size limit gets a size error in the SDK and the pump
stays available."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from bridge import tso
from bridge.binlog import commit, prewrite
from bridge.errors import BinlogTooLarge
from bridge.grpcutil import aio_channel
from bridge.meta.client import MetaClient
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc
from bridge.pumpclient import AsyncPumpsClient
from tests.support.process import ChildProcess
from tests.support.pump_server import PumpProcess, prewrite_of, pull_until, start_meta

pytestmark = pytest.mark.timeout(120)

HANG_GUARD = 90.0
LIMIT = 1 << 20  # the pump's max-message-size


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, PumpProcess]]:
    workdir = tmp_path_factory.mktemp("hardening-ts")
    meta: ChildProcess
    meta, meta_addr = start_meta(workdir)
    pump = PumpProcess(workdir, meta_addr, extra_config=f"max-message-size = {LIMIT}")
    try:
        pump.start()
        yield meta_addr, pump
    finally:
        pump.kill()
        meta.kill()


async def write(stub: Any, cluster_id: int, binlog: binlog_pb2.Binlog) -> str:
    response = await stub.WriteBinlog(
        pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=binlog.SerializeToString())
    )
    return str(response.errmsg)


def test_poisoned_timestamps_are_refused_and_later_transactions_are_all_pulled(
    cluster: tuple[str, PumpProcess],
) -> None:
    meta_addr, pump = cluster

    async def scenario() -> None:
        async with MetaClient(meta_addr) as meta, aio_channel(pump.addr) as channel:
            cluster_id = await meta.cluster_id()
            stub = pump_pb2_grpc.PumpStub(channel)
            committed: dict[int, int] = {}
            # A valid Prewrite, then Commits that break each bound.
            start = await meta.get_timestamp()
            assert await write(stub, cluster_id, prewrite_of(start)) == ""
            hour_ahead = tso.compose(tso.physical_ms(await meta.get_timestamp()) + 3_600_000, 0)
            poisons = {
                "start_ts": prewrite_of(1 << 62),
                "commit_ts": commit(start, hour_ahead),
            }
            for bound, binlog in poisons.items():
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await write(stub, cluster_id, binlog)
                assert refused.value.code() == grpc.StatusCode.OUT_OF_RANGE
                assert bound in (refused.value.details() or ""), refused.value.details()
            # commit_ts <= start_ts is malformed: INVALID_ARGUMENT naming the bound.
            for commit_ts in (start, start - 1):
                backwards = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start, commit_ts=commit_ts)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await write(stub, cluster_id, backwards)
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "commit_ts > start_ts" in (refused.value.details() or "")
            # The batch call answers per binlog: the poison refused, the valid one stored.
            batch = await stub.WriteBinlogs(
                pump_pb2.WriteBinlogsReq(
                    clusterID=cluster_id,
                    payloads=[commit(start, hour_ahead + 1).SerializeToString()],
                )
            )
            assert "commit_ts" in batch.errmsgs[0]
            committed[start] = await meta.get_timestamp()
            assert await write(stub, cluster_id, commit(start, committed[start])) == ""
            for _ in range(5):
                start_ts = await meta.get_timestamp()
                assert await write(stub, cluster_id, prewrite_of(start_ts)) == ""
                committed[start_ts] = await meta.get_timestamp()
                assert await write(stub, cluster_id, commit(start_ts, committed[start_ts])) == ""
            pulled = await pull_until(pump.addr, cluster_id, max(committed.values()))
            pulled.check(committed)
            # The watermark never went past what the TSO issued.
            assert pulled.watermark <= await meta.get_timestamp()

    asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD))
    assert "Traceback" not in pump.output


def test_an_oversize_binlog_gets_a_size_error_and_the_pump_stays_available(
    cluster: tuple[str, PumpProcess],
) -> None:
    meta_addr, pump = cluster

    async def scenario() -> None:
        async with AsyncPumpsClient(meta_addr) as client:
            assert client.available == [pump.node_id]
            start = await client.get_timestamp()
            mutation = binlog_pb2.TableMutation(table_id=1, inserted_rows=[bytes(2 * LIMIT)])
            with pytest.raises(BinlogTooLarge) as refused:
                await client.write_binlog(prewrite(start, [mutation]))
            assert f"of {LIMIT} bytes" in str(refused.value)
            assert client.available == [pump.node_id] and client.unavailable == []
            # Small binlogs sent with it in one batch, and after it, are stored.
            starts = [await client.get_timestamp() for _ in range(3)]
            big = client.write_binlog(prewrite(await client.get_timestamp(), [mutation]))
            results = await asyncio.gather(
                big, *(client.write_binlog(prewrite_of(s)) for s in starts), return_exceptions=True
            )
            assert isinstance(results[0], BinlogTooLarge) and results[1:] == [None] * 3
            committed = {}
            for s in starts:
                committed[s] = await client.get_timestamp()
                await client.write_binlog(commit(s, committed[s]))
            pulled = await pull_until(pump.addr, client.cluster_id, max(committed.values()))
            assert {b.start_ts: b.commit_ts for b in pulled.txns}.items() >= committed.items()
            assert client.available == [pump.node_id]

    asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD))


def test_pull_clients_that_leave_before_the_first_message_log_no_traceback(
    cluster: tuple[str, PumpProcess],
) -> None:
    meta_addr, pump = cluster

    async def scenario() -> None:
        async with MetaClient(meta_addr) as meta:
            cluster_id = await meta.cluster_id()
        for i in range(10):
            async with grpc.aio.insecure_channel(pump.addr) as channel:
                after = 0 if i % 2 else 1 << 62  # a backlog to send, or nothing yet
                request = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=after))
                call = pump_pb2_grpc.PumpStub(channel).PullBinlogs(request)
                if i % 3 == 0:
                    call.cancel()  # else the channel closes under it
        # The pump still serves a pull after them.
        async with MetaClient(meta_addr) as meta:
            until = await meta.get_timestamp()
        await pull_until(pump.addr, cluster_id, until)

    asyncio.run(asyncio.wait_for(scenario(), HANG_GUARD))
    assert "Traceback" not in pump.output
