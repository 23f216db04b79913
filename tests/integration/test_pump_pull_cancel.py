"""A drainer that goes away in the middle of a ``PullBinlogs`` stream (issue 27, item 4).

The 10k-request fuzz found grpc logging ``ExecuteBatchError`` with a traceback from the pump
when a client disconnected mid-stream. Here clients pull a backlog far larger than one
response and leave after the first message, three ways: cancelling the call, closing the
channel, and a client process SIGKILLed. The pump stays up, logs no traceback, serves the next
pull whole, and says at most one debug line per ended stream (its log level here is info).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from bridge.grpcutil import aio_channel
from bridge.proto import pump_pb2, pump_pb2_grpc
from bridge.pumpclient import AsyncPumpsClient
from tests.integration.test_pump_fuzz import run, write_transactions
from tests.support.pump_server import PumpProcess, pull_until, start_meta
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.timeout(300)

ROUNDS = 20
RESETS = 20
BACKLOG = 1500  # transactions: many responses' worth (prewrite_of carries up to 224 bytes each)

PULL_AND_WAIT = """\
import asyncio, sys
from bridge.grpcutil import aio_channel
from bridge.proto import pump_pb2, pump_pb2_grpc

async def main():
    async with aio_channel(sys.argv[1]) as channel:
        call = pump_pb2_grpc.PumpStub(channel).PullBinlogs(
            pump_pb2.PullBinlogReq(clusterID=int(sys.argv[2]), startFrom=pump_pb2.Pos(offset=0)))
        await call.read()
        print("pulling", flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def leave_mid_stream(addr: str, cluster_id: int, how: str) -> None:
    request = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=0))
    async with aio_channel(addr) as channel:
        call = pump_pb2_grpc.PumpStub(channel).PullBinlogs(request)
        await call.read()
        if how == "cancel":
            call.cancel()
    # "close": leaving the block closes the channel under the open call


async def reset_mid_stream(proxy: TcpProxy, cluster_id: int) -> None:
    """The connection RST under a stream the pump is sending on (no cancel reaches it)."""
    request = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=0))
    for attempt in range(5):
        async with aio_channel(proxy.addr) as channel:
            # wait_for_ready: on a loaded machine the connection through the proxy may take a retry
            call = pump_pb2_grpc.PumpStub(channel).PullBinlogs(request, wait_for_ready=True)
            try:
                await call.read()
            except grpc.aio.AioRpcError as exc:
                # grpc-core shares subchannels between channels to one address: a new channel
                # may start on the connection the last round reset before its RST was read
                if exc.code() != grpc.StatusCode.UNAVAILABLE or attempt == 4:
                    raise
                continue
            proxy.reset_all()
            with contextlib.suppress(grpc.aio.AioRpcError):
                while await call.read() is not grpc.aio.EOF:
                    pass
            return


def killed_client(addr: str, cluster_id: int) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", PULL_AND_WAIT, addr, str(cluster_id)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "pulling"
    finally:
        child.kill()  # SIGKILL: the connection goes away with the process
        child.wait()


def test_a_client_leaving_mid_stream_ends_it_quietly(tmp_path: Path) -> None:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr)
    try:
        pump.start()

        async def backlog() -> tuple[int, dict[int, int]]:
            async with AsyncPumpsClient(meta_addr) as client:
                return client.cluster_id, await write_transactions(client, BACKLOG)

        cluster_id, written = run(backlog())
        for i in range(ROUNDS):
            run(leave_mid_stream(pump.addr, cluster_id, "cancel" if i % 2 else "close"))
        for _ in range(3):
            killed_client(pump.addr, cluster_id)
        with TcpProxy(("127.0.0.1", pump.port)) as proxy:
            for _ in range(RESETS):
                run(reset_mid_stream(proxy, cluster_id))
        pulled = run(pull_until(pump.addr, cluster_id, max(written.values())))
        pulled.check(written)
        assert pump.child is not None and pump.child.proc.poll() is None, "the pump went down"
        output = pump.output
        assert "ExecuteBatchError" not in output, output[-3000:]
        assert "Traceback" not in output, output[-3000:]
        assert output.count("pull from commit_ts 0 by") == ROUNDS + 3 + RESETS + 1
    finally:
        pump.kill()
        meta.kill()
