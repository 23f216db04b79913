"""A node id is owned: a second live node with the same id is refused, naming the first.

Real ``binlog-bridge meta`` processes (local and etcd backends), real pump
and drainer processes; the holder keeps its id until it has been silent for
longer than its lease.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bridge.errors import NodeIdTaken
from bridge.meta import MetaClient
from bridge.proto import meta_pb2
from tests.integration.test_meta_etcd import start_meta as start_etcd_meta
from tests.support.drainer_cluster import DrainerProcess
from tests.support.process import ChildProcess, run_cli, wait_until
from tests.support.pump_server import PumpProcess

LEASE_MS = 600


def drainer_status(addr: str) -> meta_pb2.NodeStatus:
    return meta_pb2.NodeStatus(
        node_id="drainer-x", kind=meta_pb2.DRAINER, addr=addr, state=meta_pb2.ONLINE, ttl_ms=LEASE_MS
    )


def listed(meta: str) -> dict[str, meta_pb2.NodeStatus]:
    async def main() -> dict[str, meta_pb2.NodeStatus]:
        async with MetaClient(meta) as client:
            return {n.node_id: n for n in (await client.list_nodes()).nodes}

    return asyncio.run(main())


def check_ownership(meta: str) -> None:
    """The registry side: refused while the holder is alive, granted once its lease ran out."""

    async def beat(addr: str) -> int:
        async with MetaClient(meta) as client:
            return await client.heartbeat(drainer_status(addr))

    asyncio.run(beat("127.0.0.1:1001"))
    assert asyncio.run(beat("127.0.0.1:1001")) > 0  # the holder itself beats on
    with pytest.raises(NodeIdTaken) as refused:
        asyncio.run(beat("127.0.0.1:1002"))
    message = str(refused.value)
    assert "drainer-x" in message and "127.0.0.1:1001" in message and "127.0.0.1:1002" in message
    assert listed(meta)["drainer-x"].addr == "127.0.0.1:1001"
    wait_until(lambda: not listed(meta)["drainer-x"].is_alive, what="the holder's lease to run out")
    asyncio.run(beat("127.0.0.1:1002"))
    node = listed(meta)["drainer-x"]
    assert node.addr == "127.0.0.1:1002" and node.is_alive


def test_local_registry_refuses_a_live_node_id_from_another_address(meta_addr: str) -> None:
    check_ownership(meta_addr)


@pytest.mark.etcd
def test_etcd_registry_refuses_a_live_node_id_from_another_address(
    children: list[ChildProcess], tmp_path: Path, etcd_url: str, unique_name: str
) -> None:
    _, meta = start_etcd_meta(children, tmp_path, etcd_url, f"/{unique_name}")
    check_ownership(meta)


def nodes_json(meta: str) -> dict[str, dict[str, object]]:
    result = run_cli("ctl", "--meta", meta, "nodes", "--output", "json")
    assert result.returncode == 0, result.stderr
    return {n["node_id"]: n for n in json.loads(result.stdout)}


def test_a_second_pump_with_a_live_node_id_exits_naming_the_first(tmp_path: Path, meta_addr: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = PumpProcess(tmp_path / "a", meta_addr, node_id="pump-same")
    second = PumpProcess(tmp_path / "b", meta_addr, node_id="pump-same")
    try:
        first.start()
        child = second.launch()
        assert child.wait() == 2
        assert f"binlog-bridge pump: error: node id 'pump-same' is held by the pump at {first.addr}" in (
            child.output
        )
        assert "Traceback" not in child.output
        node = nodes_json(meta_addr)["pump-same"]
        assert node["addr"] == first.addr and node["state"] == "online"
    finally:
        first.kill()


def test_a_second_drainer_with_a_live_node_id_exits_naming_the_first(tmp_path: Path, meta_addr: str) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = DrainerProcess(tmp_path / "a", meta_addr, node_id="drainer-same")
    second = DrainerProcess(tmp_path / "b", meta_addr, node_id="drainer-same")
    try:
        first.start()
        child = second.launch()
        assert child.wait() == 2
        assert (
            "binlog-bridge drainer: error: node id 'drainer-same' is held by the drainer at "
            f"127.0.0.1:{first.port}"
        ) in child.output
        assert "Traceback" not in child.output
        node = nodes_json(meta_addr)["drainer-same"]
        assert node["addr"] == f"127.0.0.1:{first.port}" and node["state"] == "online"
        first.stop()
        restarted = second.start()  # the lease of a stopped holder runs out: the id is free again
        assert "drainer ready" in restarted.output
    finally:
        first.kill()
        second.kill()
