"""A stand-in pump: a TEST DOUBLE for the pump server, used to test the pump client.

It is not the real pump (the pump issue builds that as ``binlog-bridge pump``):
it keeps what it receives in memory and in a text log, sorts nothing and
forgets everything on exit. It does speak the real protocol over a real
gRPC server and registers in the real meta service, so the pump client under
test cannot tell the difference in what it exercises:

- ``WriteBinlog`` / ``WriteBinlogs``: refuses another cluster's id (whole-call
  errmsg), answers a probe (start_ts = commit_ts = 0) without recording it,
  refuses a binlog it cannot decode or whose start_ts is negative (per-binlog
  errmsg), and records every other binlog.
- ``PullBinlogs``: streams everything recorded so far, in arrival order, then ends.
- Heartbeats its status (ONLINE, ``--score``, ``--ttl-ms``) every
  ``--heartbeat`` seconds through MetaClient.

Each recorded binlog appends one line ``<tp> <start_ts> <commit_ts>`` (tp as
its name, e.g. ``Prewrite 4242 0``) to ``--log``, written before the call is
answered, so a test can see where binlogs went even after a SIGKILL.

Run: ``python -m tests.support.standin_pump --meta ADDR --node-id ID
--addr 127.0.0.1:PORT --log FILE``; it prints ``standin pump ready`` once it
serves and is registered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from bridge.errors import MetaError
from bridge.grpcutil import add_port, channel_options
from bridge.meta.client import MetaClient
from bridge.proto import binlog_pb2, meta_pb2, pump_pb2, pump_pb2_grpc
from bridge.startup import configure_logging, run_until_stopped

log = logging.getLogger("standin_pump")


class StandinPumpService(pump_pb2_grpc.PumpServicer):
    """The Pump gRPC service of the stand-in."""

    def __init__(self, cluster_id: int, log_fd: int) -> None:
        self._cluster_id = cluster_id
        self._log_fd = log_fd
        self.received: list[binlog_pb2.Binlog] = []

    def _cluster_error(self, cluster_id: int) -> str:
        if cluster_id != self._cluster_id:
            return f"cluster id mismatch: this pump serves cluster {self._cluster_id}, got {cluster_id}"
        return ""

    def _record(self, payloads: list[bytes]) -> list[str]:
        lines: list[str] = []
        errmsgs: list[str] = []
        for payload in payloads:
            try:
                binlog = binlog_pb2.Binlog.FromString(payload)
            except DecodeError as exc:
                errmsgs.append(f"malformed binlog: {exc}")
                continue
            if binlog.start_ts == 0 and binlog.commit_ts == 0:
                errmsgs.append("")  # a probe
                continue
            if binlog.start_ts < 0:
                errmsgs.append(f"malformed binlog: negative start_ts {binlog.start_ts}")
                continue
            self.received.append(binlog)
            tp = binlog_pb2.BinlogType.Name(binlog.tp)
            lines.append(f"{tp} {binlog.start_ts} {binlog.commit_ts}\n")
            errmsgs.append("")
        if lines:
            os.write(self._log_fd, "".join(lines).encode())
        return errmsgs

    async def WriteBinlog(self, request: Any, context: Any) -> pump_pb2.WriteBinlogResp:
        errmsg = self._cluster_error(request.clusterID) or self._record([request.payload])[0]
        return pump_pb2.WriteBinlogResp(errmsg=errmsg)

    async def WriteBinlogs(self, request: Any, context: Any) -> pump_pb2.WriteBinlogsResp:
        errmsg = self._cluster_error(request.clusterID)
        if errmsg:
            return pump_pb2.WriteBinlogsResp(errmsg=errmsg)
        return pump_pb2.WriteBinlogsResp(errmsgs=self._record(list(request.payloads)))

    async def PullBinlogs(self, request: Any, context: Any) -> AsyncIterator[pump_pb2.PullBinlogResp]:
        if self._cluster_error(request.clusterID):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, self._cluster_error(request.clusterID))
        for offset, binlog in enumerate(list(self.received)):
            entity = pump_pb2.Entity(
                pos=pump_pb2.Pos(offset=offset),
                payload=binlog.SerializeToString(),
                meta=pump_pb2.Meta(startTs=binlog.start_ts, commitTs=binlog.commit_ts),
            )
            yield pump_pb2.PullBinlogResp(entity=entity)


async def heartbeat_forever(
    meta: MetaClient, status: meta_pb2.NodeStatus, cluster_id: int, every: float
) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            await meta.heartbeat(status, cluster_id)
        except MetaError as exc:
            log.warning("heartbeat failed: %s", exc)


async def serve(args: argparse.Namespace, stop: asyncio.Event) -> None:
    meta = MetaClient(args.meta)
    cluster_id = await meta.cluster_id()
    log_fd = os.open(args.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    server = grpc.aio.server(options=channel_options())
    pump_pb2_grpc.add_PumpServicer_to_server(StandinPumpService(cluster_id, log_fd), server)
    add_port(server, args.addr)
    await server.start()
    status = meta_pb2.NodeStatus(
        node_id=args.node_id,
        kind=meta_pb2.PUMP,
        addr=args.addr,
        state=meta_pb2.ONLINE,
        score=args.score,
        ttl_ms=args.ttl_ms,
    )
    await meta.heartbeat(status, cluster_id)
    print(f"standin pump ready: {args.node_id} on {args.addr}, cluster {cluster_id}", flush=True)
    beating = asyncio.create_task(heartbeat_forever(meta, status, cluster_id, args.heartbeat))
    await stop.wait()
    beating.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await beating
    status.state = meta_pb2.OFFLINE
    with contextlib.suppress(MetaError):
        await meta.heartbeat(status, cluster_id)
    await server.stop(grace=1.0)
    await meta.close()
    os.close(log_fd)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Stand-in pump for pump client tests (a test double).")
    parser.add_argument("--meta", required=True, help="meta service address(es), host:port[,host:port]")
    parser.add_argument("--node-id", required=True)
    parser.add_argument("--addr", required=True, help="host:port to serve on and register")
    parser.add_argument("--log", required=True, help="file that receives one line per recorded binlog")
    parser.add_argument("--score", type=int, default=100)
    parser.add_argument("--ttl-ms", type=int, default=3000)
    parser.add_argument("--heartbeat", type=float, default=0.5, help="seconds between heartbeats")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging("info")
    try:
        return run_until_stopped(lambda stop: serve(args, stop))
    except MetaError as exc:
        print(f"standin pump: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
