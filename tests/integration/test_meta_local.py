"""``binlog-bridge meta`` with the local backend, as a real process, over real gRPC."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bridge.errors import ClusterMismatch, ProtocolError
from bridge.meta import MetaClient
from bridge.proto import meta_pb2
from bridge.tso import physical_ms
from tests.support.process import ChildProcess, bridge_cli, free_port

READY = r"meta ready: addr=(\S+) backend=(\w+) cluster_id=(\d+) leader=(yes|no)"


def start_meta(
    children: list[ChildProcess], tmp_path: Path, data_dir: Path, *args: str
) -> tuple[ChildProcess, str]:
    port = free_port()
    argv = bridge_cli("meta", "--data-dir", str(data_dir), "--addr", f"127.0.0.1:{port}", *args)
    child = ChildProcess(argv, tmp_path / f"meta-{port}.log")
    children.append(child)
    match = child.wait_for_line(READY)
    assert match.group(2) == "local" and match.group(4) == "yes"
    return child, match.group(1)


def pump(
    node_id: str, ttl_ms: int = 10_000, state: meta_pb2.NodeState = meta_pb2.ONLINE
) -> meta_pb2.NodeStatus:
    return meta_pb2.NodeStatus(
        node_id=node_id, kind=meta_pb2.PUMP, addr="127.0.0.1:8250", state=state, score=10, ttl_ms=ttl_ms
    )


def assert_disjoint_increasing(batches: list[tuple[int, int]]) -> None:
    ordered = sorted(batches)
    for (first, count), (nxt, _) in itertools.pairwise(ordered):
        assert first + count <= nxt, f"batch {first}+{count} overlaps {nxt}"
    for first, count in batches:
        assert physical_ms(first) == physical_ms(first + count - 1), "a batch crossed a millisecond"


def test_tso_is_unique_and_increasing_across_1000_concurrent_batch_requests(children, tmp_path) -> None:
    _, addr = start_meta(children, tmp_path, tmp_path / "meta")
    rng = random.Random(1)
    counts = [rng.randint(1, 1000) for _ in range(1000)]

    async def main() -> tuple[list[tuple[int, int]], int]:
        async with MetaClient(addr) as client:
            firsts = await asyncio.gather(*(client.get_timestamps(n) for n in counts))
            after = await client.get_timestamp()
        return list(zip(firsts, counts, strict=True)), after

    batches, after = asyncio.run(main())
    assert_disjoint_increasing(batches)
    assert after > max(first + count - 1 for first, count in batches)


def test_tso_never_goes_backwards_across_sigkill_and_restart(children, tmp_path) -> None:
    data_dir = tmp_path / "meta"
    meta, addr = start_meta(children, tmp_path, data_dir)

    async def stream(addr: str, calls: int) -> list[int]:
        async with MetaClient(addr) as client:
            out = []
            for _ in range(calls):
                first = await client.get_timestamps(100)
                out.append(first + 99)
            cluster_id = await client.cluster_id()
        return [cluster_id, *out]

    before = asyncio.run(stream(addr, 300))
    meta.kill()
    _, addr2 = start_meta(children, tmp_path, data_dir)
    after = asyncio.run(stream(addr2, 300))
    assert after[0] == before[0], "the cluster id must survive a restart"
    assert min(after[1:]) > max(before[1:])
    assert after[1:] == sorted(set(after[1:]))


def test_second_meta_on_the_same_data_dir_fails_clearly(children, tmp_path) -> None:
    start_meta(children, tmp_path, tmp_path / "meta")
    second = ChildProcess(
        bridge_cli("meta", "--data-dir", str(tmp_path / "meta"), "--addr", f"127.0.0.1:{free_port()}"),
        tmp_path / "second.log",
    )
    children.append(second)
    assert second.wait(timeout=60) != 0
    assert "is in use by another meta process" in second.output
    assert "Traceback" not in second.output


def test_heartbeat_ttl_turns_is_alive_false_and_long_poll_sees_it(children, tmp_path) -> None:
    _, addr = start_meta(children, tmp_path, tmp_path / "meta")

    async def main() -> tuple[meta_pb2.ListNodesResponse, meta_pb2.ListNodesResponse, int]:
        async with MetaClient(addr) as client:
            update_ts = await client.heartbeat(pump("pump-1", ttl_ms=2000))
            alive = await client.list_nodes(meta_pb2.PUMP)
            expired = alive
            while expired.nodes[0].is_alive:  # each call waits for the next change (the TTL flip)
                expired = await asyncio.wait_for(
                    client.list_nodes(meta_pb2.PUMP, wait_revision=expired.revision, wait_ms=60_000), 30
                )
        return alive, expired, update_ts

    alive, expired, update_ts = asyncio.run(main())
    assert [n.node_id for n in alive.nodes] == ["pump-1"]
    assert alive.nodes[0].is_alive and alive.nodes[0].update_ts == update_ts
    assert not expired.nodes[0].is_alive
    assert expired.revision != alive.revision


def test_list_nodes_long_poll_wakes_on_a_change(children, tmp_path) -> None:
    _, addr = start_meta(children, tmp_path, tmp_path / "meta")

    async def main() -> tuple[meta_pb2.ListNodesResponse, meta_pb2.ListNodesResponse]:
        async with MetaClient(addr) as client, MetaClient(addr) as other:
            await client.heartbeat(pump("pump-1"))
            first = await client.list_nodes()
            poll = asyncio.create_task(client.list_nodes(wait_revision=first.revision, wait_ms=60_000))
            await asyncio.sleep(0.2)
            assert not poll.done(), "the long poll answered before anything changed"
            await other.heartbeat(pump("pump-2"))
            return first, await asyncio.wait_for(poll, 30)

    first, changed = asyncio.run(main())
    assert [n.node_id for n in first.nodes] == ["pump-1"]
    assert [n.node_id for n in changed.nodes] == ["pump-1", "pump-2"]
    assert changed.revision != first.revision


def test_registry_survives_a_restart_and_bad_heartbeats_are_refused(children, tmp_path) -> None:
    data_dir = tmp_path / "meta"
    meta, addr = start_meta(children, tmp_path, data_dir)

    async def register() -> int:
        async with MetaClient(addr) as client:
            cluster_id = await client.cluster_id()
            await client.heartbeat(pump("pump-a", state=meta_pb2.PAUSED), cluster_id=cluster_id)
            with pytest.raises(ClusterMismatch, match=f"serves cluster {cluster_id}"):
                await client.heartbeat(pump("pump-a"), cluster_id=cluster_id + 1)
            with pytest.raises(ProtocolError, match="node_id"):
                await client.heartbeat(pump(""))
            with pytest.raises(ProtocolError, match="kind"):
                await client.heartbeat(meta_pb2.NodeStatus(node_id="x", state=meta_pb2.ONLINE))
            return cluster_id

    asyncio.run(register())
    meta.kill()
    _, addr2 = start_meta(children, tmp_path, data_dir)

    async def listed() -> meta_pb2.ListNodesResponse:
        async with MetaClient(addr2) as client:
            return await client.list_nodes()

    nodes = asyncio.run(listed())
    assert [(n.node_id, n.state, n.score) for n in nodes.nodes] == [("pump-a", meta_pb2.PAUSED, 10)]
    assert not nodes.errors


def test_status_and_metrics_endpoint(children, tmp_path) -> None:
    status_port = free_port()
    _, addr = start_meta(children, tmp_path, tmp_path / "meta", "--status-addr", str(status_port))

    async def use() -> None:
        async with MetaClient(addr) as client:
            await client.get_timestamps(50)
            await client.heartbeat(pump("pump-1"))

    asyncio.run(use())
    with urllib.request.urlopen(f"http://127.0.0.1:{status_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    assert "bridge_meta_is_leader 1.0" in text
    assert 'bridge_meta_registry_nodes{alive="true",kind="pump",state="online"} 1.0' in text
    counter = next(
        line for line in text.splitlines() if line.startswith("bridge_meta_timestamps_allocated_total")
    )
    assert float(counter.rsplit(" ", 1)[1]) >= 50

    with urllib.request.urlopen(f"http://127.0.0.1:{status_port}/status", timeout=10) as response:
        status = json.loads(response.read())
    assert (status["addr"], status["backend"], status["is_leader"]) == (addr, "local", True)
    assert status["leader_addr"] == addr and status["cluster_id"] > 0
    assert status["tso"]["allocated"] >= 50 and status["tso"]["serving"]
    registered = {"node_id": "pump-1", "kind": "pump", "state": "online", "alive": True}
    assert status["registry"]["nodes"] == [registered]
    # the shared status server (bridge.status_http): an unknown path names the endpoints; nothing but GET
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{status_port}/state/close", timeout=10)
    assert missing.value.code == 404 and "GET /status, GET /metrics" in missing.value.read().decode()
    post = urllib.request.Request(
        f"http://127.0.0.1:{status_port}/status", b"{}", {"Content-Type": "application/json"}, method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(post, timeout=10)
    assert refused.value.code == 405
