"""The ceiling of ``binlog-bridge bench pump``: gRPC + append + fsync and nothing else.

:func:`drive_batched` is the ceiling's producer side: pre-encoded binlogs
sent ``batch`` per ``WriteBinlogs`` call over plain gRPC stubs, ``inflight``
calls at a time, no SDK. Against this server it measures what one Python
process can push through gRPC into one fsynced file on this machine.

``python -m bench.pump_ceiling --meta ADDR --file PATH`` serves the Pump
service on a free port and registers in the meta service as an ONLINE pump,
so the pump client SDK drives it exactly as it drives a pump. Its
``WriteBinlogs`` appends the call's payloads to one file and fsyncs once per
call, on one writer thread (as the pump's group commit does), then answers
success for each; ``WriteBinlog`` (probes) answers success. No parsing, no
index, no sorting, no pulls: what a pump costs beyond this is the storage
engine and the service's checks. Prints ``ceiling ready: node_id=... addr=...``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import grpc

from bench.cpu import CpuMeter
from bridge.grpcutil import add_port, aio_channel, channel_options
from bridge.meta.client import MetaClient
from bridge.proto import meta_pb2, pump_pb2, pump_pb2_grpc
from bridge.startup import run_until_stopped

NODE_ID = "bench-ceiling"


class AppendService(pump_pb2_grpc.PumpServicer):
    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ceiling-append")

    def _append(self, data: bytes) -> None:
        os.write(self._fd, data)
        os.fsync(self._fd)

    async def WriteBinlog(self, request: Any, context: Any) -> pump_pb2.WriteBinlogResp:
        return pump_pb2.WriteBinlogResp()

    async def WriteBinlogs(self, request: Any, context: Any) -> pump_pb2.WriteBinlogsResp:
        payloads = request.payloads
        await asyncio.get_running_loop().run_in_executor(self._writer, self._append, b"".join(payloads))
        return pump_pb2.WriteBinlogsResp(errmsgs=[""] * len(payloads))


async def drive_batched(
    addr: str,
    payloads: Sequence[bytes],
    *,
    batch: int,
    inflight: int,
    seconds: float,
    warmup: float,
    meter: CpuMeter | None = None,
) -> tuple[int, float]:
    """Binlogs acknowledged and the seconds they took when ``inflight``
    callers each send ``batch`` payloads per ``WriteBinlogs`` call to ``addr``
    in a loop (counted after ``warmup`` seconds, for about ``seconds``);
    ``meter`` runs over the counted part."""
    channel = aio_channel(addr)
    stub = pump_pb2_grpc.PumpStub(channel)  # type: ignore[no-untyped-call]
    request = pump_pb2.WriteBinlogsReq(payloads=[payloads[i % len(payloads)] for i in range(batch)])
    counted = [0]
    measuring = [False]
    loop = asyncio.get_running_loop()
    end = loop.time() + warmup + seconds

    async def caller() -> None:
        while loop.time() < end:
            response = await stub.WriteBinlogs(request, timeout=30)
            if response.errmsg or any(response.errmsgs):
                raise RuntimeError(f"the ceiling server refused a batch: {response.errmsg}")
            if measuring[0]:
                counted[0] += len(response.errmsgs)

    try:
        callers = asyncio.gather(*(caller() for _ in range(inflight)))
        await asyncio.sleep(warmup)
        measuring[0] = True
        if meter is not None:
            meter.start()
        began = time.perf_counter()
        await callers
        elapsed = time.perf_counter() - began
        if meter is not None:
            meter.stop()
        return counted[0], elapsed
    finally:
        await channel.close()


async def heartbeat(meta: MetaClient, status: meta_pb2.NodeStatus, cluster_id: int) -> None:
    while True:
        await meta.heartbeat(status, cluster_id)
        await asyncio.sleep(1.0)


async def serve(args: argparse.Namespace, stop: asyncio.Event) -> None:
    fd = os.open(args.file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    server = grpc.aio.server(options=channel_options())
    pump_pb2_grpc.add_PumpServicer_to_server(AppendService(fd), server)  # type: ignore[no-untyped-call]
    port = add_port(server, "127.0.0.1:0")
    await server.start()
    addr = f"127.0.0.1:{port}"
    async with MetaClient(args.meta) as meta:
        cluster_id = await meta.cluster_id()
        status = meta_pb2.NodeStatus(
            node_id=NODE_ID, kind=meta_pb2.PUMP, addr=addr, state=meta_pb2.ONLINE, score=1000, ttl_ms=5000
        )
        await meta.heartbeat(status, cluster_id)
        beating = asyncio.ensure_future(heartbeat(meta, status, cluster_id))
        print(f"ceiling ready: node_id={NODE_ID} addr={addr}", file=sys.stderr, flush=True)
        await stop.wait()
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
    await server.stop(grace=1.0)
    os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--meta", required=True, help="meta service address")
    parser.add_argument("--file", required=True, help="the file payloads are appended to")
    args = parser.parse_args()
    run_until_stopped(lambda stop: serve(args, stop))


if __name__ == "__main__":
    main()
