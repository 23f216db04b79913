"""Timestamp poisoning (issue 15): a raw gRPC client writes binlogs whose
timestamps the TSO never issued; the pump refuses them, its watermark stays
with the TSO, and the valid transactions written after are all pulled."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge import tso
from bridge.binlog import commit
from bridge.grpcutil import aio_channel
from bridge.meta.client import MetaClient
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc
from tests.support.process import ChildProcess
from tests.support.pump_server import PumpProcess, prewrite_of, pull_until, start_meta

pytestmark = pytest.mark.timeout(120)

HANG_GUARD = 90.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, PumpProcess]]:
    workdir = tmp_path_factory.mktemp("hardening-ts")
    meta: ChildProcess
    meta, meta_addr = start_meta(workdir)
    pump = PumpProcess(workdir, meta_addr)
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
            # commit_ts <= start_ts is malformed: the pump's payload check answers it in errmsg.
            backwards = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start, commit_ts=start)
            assert "commit_ts > start_ts" in await write(stub, cluster_id, backwards)
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
