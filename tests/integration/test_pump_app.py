"""`binlog-bridge pump` as a process: start, ready line, fake binlogs on an idle
pump, status and metrics, SIGTERM, close to OFFLINE, and start-up errors."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge.binlog import commit
from bridge.grpcutil import aio_channel
from bridge.meta.client import MetaClient
from bridge.proto import meta_pb2, pump_pb2, pump_pb2_grpc
from bridge.pumpclient import AsyncPumpsClient
from tests.support.process import ChildProcess, bridge_cli, free_port, run_cli
from tests.support.pump_server import PumpProcess, prewrite_of, pull_until, start_meta
from tests.support.storage_calls import run_guarded

pytestmark = pytest.mark.timeout(180)

HANG_GUARD = 120.0  # seconds: a safety net against hangs, never a performance bound


run = partial(run_guarded, guard=HANG_GUARD)


@dataclass
class Cluster:
    meta: ChildProcess
    meta_addr: str
    pump: PumpProcess

    def http(self, method: str, path: str) -> dict[str, Any]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.pump.status_port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return dict(json.loads(response.read()))

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.pump.status_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as response:
            return str(response.read().decode())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr)
    try:
        pump.start()
        yield Cluster(meta, meta_addr, pump)
    finally:
        pump.kill()
        meta.kill()


async def write_one(meta_addr: str) -> tuple[int, int, int]:
    """One committed transaction through the SDK; returns (cluster id, start_ts, commit_ts)."""
    async with AsyncPumpsClient(meta_addr) as client:
        start_ts = await client.get_timestamp()
        await client.write_binlog(prewrite_of(start_ts))
        commit_ts = await client.get_timestamp()
        await client.write_binlog(commit(start_ts, commit_ts))
        return client.cluster_id, start_ts, commit_ts


async def registry_entry(meta_addr: str, node_id: str) -> meta_pb2.NodeStatus:
    async with MetaClient(meta_addr) as meta:
        for node in (await meta.list_nodes(meta_pb2.PUMP)).nodes:
            if node.node_id == node_id:
                return node
    raise AssertionError(f"{node_id} is not in the registry")


def test_an_idle_pump_moves_its_watermark_and_reports_it(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with MetaClient(cluster.meta_addr) as meta:
            now = await meta.get_timestamp()
            cluster_id = await meta.cluster_id()
        pulled = await pull_until(cluster.pump.addr, cluster_id, now)  # fake binlogs carry it past now
        assert not pulled.txns

    run(scenario())
    status = cluster.http("GET", "/status")
    assert status["state"] == "online" and status["node_id"] == cluster.pump.node_id
    assert status["storage_bytes"] > 0 and "gc_ts" in status
    text = cluster.metrics()
    assert 'bridge_pump_writes_total{result="ok",type="fake"}' in text
    assert "bridge_pump_storage_bytes" in text
    entry = run(registry_entry(cluster.meta_addr, cluster.pump.node_id))
    assert (entry.addr, entry.status_addr) == (cluster.pump.addr, f"127.0.0.1:{cluster.pump.status_port}")


async def stop_while_pulling(cluster: Cluster, cluster_id: int) -> int:
    """SIGTERM the pump while a pull stream is open; the stream ends with UNAVAILABLE."""
    async with aio_channel(cluster.pump.addr) as channel:
        stub = pump_pb2_grpc.PumpStub(channel)
        call = stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=cluster_id), wait_for_ready=True)
        assert await call.read() is not grpc.aio.EOF
        stopping = asyncio.ensure_future(asyncio.to_thread(cluster.pump.stop))
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            while await call.read() is not grpc.aio.EOF:
                pass
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert ended.value.details() == "the pump is stopping"
        return await stopping


def test_sigterm_stops_cleanly_and_a_restart_goes_online_with_the_data(cluster: Cluster) -> None:
    cluster_id, start_ts, commit_ts = run(write_one(cluster.meta_addr))
    assert run(stop_while_pulling(cluster, cluster_id)) == 0
    assert "stopping (the registry keeps its state)" in cluster.pump.output
    assert "storage closed at watermark" in cluster.pump.output
    cluster.pump.start()
    assert "was online before: going online without a new Notify" in cluster.pump.output
    pulled = run(pull_until(cluster.pump.addr, cluster_id, commit_ts))
    pulled.check({start_ts: commit_ts})


def test_close_takes_the_pump_offline_and_the_process_exits(cluster: Cluster) -> None:
    run(write_one(cluster.meta_addr))
    assert cluster.http("POST", "/state/close")["state"] in ("closing", "offline")
    assert cluster.pump.child is not None
    assert cluster.pump.child.wait(timeout=HANG_GUARD) == 0
    assert "is offline: exiting" in cluster.pump.output
    assert run(registry_entry(cluster.meta_addr, cluster.pump.node_id)).state == meta_pb2.OFFLINE


def test_start_up_errors_name_their_cause(cluster: Cluster, tmp_path: Path) -> None:
    taken = run_cli("pump", "--config", str(cluster.pump.config_path), "--data-dir", str(tmp_path / "other"))
    assert taken.returncode == 2
    assert f"addr: cannot listen on 127.0.0.1:{cluster.pump.port}" in taken.stderr

    locked = run_cli(
        "pump", "--config", str(cluster.pump.config_path), "--addr", f"127.0.0.1:{free_port()}",
        "--status-addr", str(free_port()),
    )  # fmt: skip
    assert locked.returncode == 2
    assert "another process has this pump data dir open" in locked.stderr

    bad_key = tmp_path / "bad.toml"
    bad_key.write_text("[storage]\nsegment-size = 10\n")
    invalid = run_cli("pump", "--config", str(bad_key))
    assert invalid.returncode == 2
    assert "storage.segment-size: expected at least 4096 bytes" in invalid.stderr


def test_a_pump_without_a_meta_service_does_not_start(tmp_path: Path) -> None:
    child = ChildProcess(
        bridge_cli(
            "pump", "--data-dir", str(tmp_path / "p"), "--meta", f"127.0.0.1:{free_port()}",
            "--addr", f"127.0.0.1:{free_port()}", "--status-addr", str(free_port()),
        ),
        tmp_path / "pump.out",
    )  # fmt: skip
    assert child.wait(timeout=HANG_GUARD) == 3  # a dependency could not be reached
    assert "binlog-bridge pump: error: no meta leader answered" in child.output
    assert "pump ready" not in child.output
