"""The pump node against a real `binlog-bridge meta` and real drainer-side
`binlog.Cistern` gRPC servers, driven through its HTTP endpoint.

Storage is a small object written here that implements the node's own
``NodeStorage`` protocol (watermark, max commit ts, unpaired count) and the
final-fake callback; everything else is real: the meta service is a child
process, Notify goes over gRPC, state changes go over HTTP.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from bridge.grpcutil import SecurityConfig
from bridge.meta.client import MetaClient
from bridge.proto import drainer_pb2, drainer_pb2_grpc, meta_pb2
from pump.health import DiskGuard
from pump.http import StatusServer, server_ssl_context
from pump.join import DrainerNotifier, JoinFailed
from pump.node import NodeSettings, PumpNode, PumpState
from tests.support.process import ChildProcess, bridge_cli, free_port
from tests.support.tls import self_signed_cert

pytestmark = pytest.mark.timeout(120)

HANG_GUARD = 60.0  # seconds: only against hangs, never a performance bound


@pytest.fixture
def meta_addr(tmp_path: Path, children: list[ChildProcess]) -> str:
    addr = f"127.0.0.1:{free_port()}"
    child = ChildProcess(
        bridge_cli("meta", "--data-dir", str(tmp_path / "meta"), "--addr", addr), tmp_path / "meta.out"
    )
    children.append(child)
    child.wait_for_line("meta ready")
    return addr


class Storage:
    """The node's NodeStorage protocol plus the final-fake callback."""

    def __init__(self) -> None:
        self.watermark = 1000
        self.max_commit_ts = 990
        self.unpaired_count = 0
        self.fakes: list[int] = []

    async def write_fake(self) -> int:
        self.watermark += 7
        self.fakes.append(self.watermark)
        return self.watermark


@dataclass
class Cistern:
    """A drainer's Notify endpoint. mode: ack | refuse | hang; ``refusals`` acks after that many refusals."""

    mode: str = "ack"
    refusals: int = 0
    calls: int = 0
    # What the registry said about the pump, and whether the pump accepted writes, at each Notify.
    seen: list[tuple[str, bool]] = field(default_factory=list)
    meta: MetaClient | None = None
    node: PumpNode | None = None
    pump_id: str = ""

    async def Notify(
        self, request: drainer_pb2.NotifyReq, context: grpc.aio.ServicerContext
    ) -> drainer_pb2.NotifyResp:
        self.calls += 1
        if self.mode == "hang":
            await asyncio.sleep(3600)
        if self.mode == "refuse" or self.calls <= self.refusals:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "drainer not ready (test)")
        assert self.meta is not None and self.node is not None
        self.seen.append((await pump_state(self.meta, self.pump_id), self.node.accepts_prewrite()))
        return drainer_pb2.NotifyResp()


async def pump_state(meta: MetaClient, node_id: str) -> str:
    for node in (await meta.list_nodes(meta_pb2.PUMP)).nodes:
        if node.node_id == node_id:
            return meta_pb2.NodeState.Name(node.state)
    return "absent"


@asynccontextmanager
async def drainer(meta: MetaClient, node_id: str, cistern: Cistern) -> AsyncIterator[str]:
    """A real Cistern gRPC server, registered ONLINE and alive as drainer ``node_id``."""
    server = grpc.aio.server()
    drainer_pb2_grpc.add_CisternServicer_to_server(cistern, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    cistern.meta = meta
    addr = f"127.0.0.1:{port}"
    await set_drainer(meta, node_id, addr, max_commit_ts=0)
    try:
        yield addr
    finally:
        await server.stop(grace=None)


async def set_drainer(meta: MetaClient, node_id: str, addr: str, max_commit_ts: int) -> None:
    status = meta_pb2.NodeStatus(
        node_id=node_id,
        kind=meta_pb2.DRAINER,
        addr=addr,
        state=meta_pb2.ONLINE,
        max_commit_ts=max_commit_ts,
        ttl_ms=120_000,
    )
    await meta.heartbeat(status)


def make_node(meta: MetaClient, storage: Storage, node_id: str, join_timeout: float = HANG_GUARD) -> PumpNode:
    settings = NodeSettings(
        node_id=node_id, addr="127.0.0.1:1", heartbeat_interval=0.2, ttl_ms=600, join_timeout=join_timeout
    )
    guard = DiskGuard(".", threshold=0)
    return PumpNode(
        settings,
        meta,
        storage,
        storage.write_fake,
        disk_guard=guard,
        notifier=DrainerNotifier(call_timeout=0.5),
    )


async def watch_states(meta: MetaClient, node_id: str, states: list[str]) -> None:
    """Record every state the registry shows for ``node_id``, in order."""
    revision = 0
    while True:
        response = await meta.list_nodes(meta_pb2.PUMP, revision, 1000)
        for node in response.nodes:
            name = meta_pb2.NodeState.Name(node.state)
            if node.node_id == node_id and (not states or states[-1] != name):
                states.append(name)
        revision = response.revision


def run(coro: object) -> None:
    asyncio.run(asyncio.wait_for(coro, HANG_GUARD))  # type: ignore[arg-type]


def test_pump_goes_online_only_after_every_drainer_acknowledged(meta_addr: str, unique_name: str) -> None:
    pump_id = f"pump-{unique_name}"
    first, late = Cistern(pump_id=pump_id), Cistern(pump_id=pump_id, refusals=2)
    states: list[str] = []

    async def scenario() -> None:
        async with MetaClient(meta_addr) as meta:
            storage = Storage()
            node = make_node(meta, storage, pump_id)
            first.node = late.node = node
            watcher = asyncio.create_task(watch_states(meta, pump_id, states))
            async with drainer(meta, "d-first", first), drainer(meta, "d-late", late):
                await node.start()
                assert node.state is PumpState.ONLINE
                assert await pump_state(meta, pump_id) == "ONLINE"
                await node.stop()
            watcher.cancel()

    run(scenario())
    # Each drainer saw the pump registered but not online, and not taking writes.
    assert first.seen == [("PAUSED", False)]
    assert late.seen == [("PAUSED", False)]
    assert late.calls == 3  # refused twice, retried until acknowledged
    assert first.calls == 1  # an acknowledged drainer is not asked again
    assert states == ["PAUSED", "ONLINE"]


@pytest.mark.parametrize(
    ("mode", "reason"), [("refuse", "UNAVAILABLE: drainer not ready"), ("hang", "no answer within")]
)
def test_pump_does_not_go_online_when_a_drainer_does_not_acknowledge(
    meta_addr: str, unique_name: str, mode: str, reason: str
) -> None:
    pump_id = f"pump-{unique_name}"
    good, bad = Cistern(pump_id=pump_id), Cistern(mode=mode, pump_id=pump_id)
    states: list[str] = []

    async def scenario() -> None:
        async with MetaClient(meta_addr) as meta:
            node = make_node(meta, Storage(), pump_id, join_timeout=1.5)
            good.node = bad.node = node
            watcher = asyncio.create_task(watch_states(meta, pump_id, states))
            async with drainer(meta, "d-good", good), drainer(meta, "d-bad", bad) as bad_addr:
                with pytest.raises(JoinFailed) as failure:
                    await node.start()
                message = str(failure.value)
                assert f"drainer d-bad at {bad_addr}: {reason}" in message
                assert "d-good" not in message
                assert "join-timeout = 1.5s" in message
                assert node.state is PumpState.OFFLINE
                assert not node.accepts_prewrite() and not node.accepts_commit()
                assert await pump_state(meta, pump_id) == "OFFLINE"
            watcher.cancel()

    run(scenario())
    assert "ONLINE" not in states
    assert states[0] == "PAUSED" and states[-1] == "OFFLINE"


def http_call(
    method: str, url: str, context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, str], str]:
    # JSON, as ctl sends: urllib's default form content type is refused (a browser can forge it)
    headers = {"Content-Type": "application/json"} if method == "POST" else {}
    request = urllib.request.Request(
        url, method=method, data=b"{}" if method == "POST" else None, headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=HANG_GUARD, context=context) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


async def call(
    method: str, url: str, context: ssl.SSLContext | None = None
) -> tuple[int, dict[str, str], str]:
    return await asyncio.to_thread(http_call, method, url, context)


def test_http_drives_pause_resume_and_close_which_waits_for_the_drainer(
    meta_addr: str, unique_name: str
) -> None:
    pump_id = f"pump-{unique_name}"
    cistern = Cistern(pump_id=pump_id)

    async def scenario() -> None:
        async with MetaClient(meta_addr) as meta:
            storage = Storage()
            node = make_node(meta, storage, pump_id)
            cistern.node = node
            async with drainer(meta, "d-1", cistern) as drainer_addr:
                await node.start()
                server = StatusServer(node, "127.0.0.1", 0)
                base = f"http://127.0.0.1:{await server.start()}"
                try:
                    await check_status_and_metrics(base, pump_id)
                    await check_pause_resume(base, meta, pump_id)
                    await check_errors(base)
                    await check_close(base, meta, node, storage, pump_id, drainer_addr)
                finally:
                    await server.stop()
                    await node.stop()

    run(scenario())


async def check_status_and_metrics(base: str, pump_id: str) -> None:
    code, _, body = await call("GET", f"{base}/status")
    status = json.loads(body)
    assert code == 200
    assert (status["node_id"], status["state"], status["watermark"]) == (pump_id, "online", 1000)
    assert status["max_commit_ts"] == 990 and status["unpaired_prewrites"] == 0
    assert status["disk_available_bytes"] > 0 and status["prewrite_refusal"] is None
    code, headers, body = await call("GET", f"{base}/metrics")
    assert code == 200 and headers["Content-Type"].startswith("text/plain")
    assert 'bridge_pump_state{state="online"} 1.0' in body


async def check_pause_resume(base: str, meta: MetaClient, pump_id: str) -> None:
    code, _, body = await call("POST", f"{base}/state/pause")
    assert code == 200 and json.loads(body)["state"] == "paused"
    assert await pump_state(meta, pump_id) == "PAUSED"
    code, _, body = await call("POST", f"{base}/state/resume")
    assert code == 200 and json.loads(body)["state"] == "online"
    assert await pump_state(meta, pump_id) == "ONLINE"


async def check_errors(base: str) -> None:
    code, headers, body = await call("GET", f"{base}/state/pause")
    assert code == 405 and headers["Allow"] == "POST"
    assert "/state/pause takes POST, not GET" in json.loads(body)["error"]
    code, _, body = await call("GET", f"{base}/nothing")
    assert code == 404 and "no endpoint /nothing" in json.loads(body)["error"]


async def check_close(
    base: str, meta: MetaClient, node: PumpNode, storage: Storage, pump_id: str, drainer_addr: str
) -> None:
    storage.unpaired_count = 1
    code, _, body = await call("POST", f"{base}/state/close")
    assert code == 200 and json.loads(body)["state"] == "closing"
    assert await pump_state(meta, pump_id) == "CLOSING"
    offline = asyncio.create_task(node.wait_offline())
    storage.unpaired_count = 0  # its Commit arrived
    while not storage.fakes:
        await asyncio.sleep(0.02)
    final = storage.fakes[-1]
    await set_drainer(meta, "d-1", drainer_addr, max_commit_ts=final - 1)
    await asyncio.sleep(0.5)
    assert not offline.done()  # the drainer is one ts short of the final watermark
    assert await pump_state(meta, pump_id) == "CLOSING"
    await set_drainer(meta, "d-1", drainer_addr, max_commit_ts=final)
    await offline
    assert await pump_state(meta, pump_id) == "OFFLINE"
    code, _, body = await call("POST", f"{base}/state/resume")
    assert code == 409 and "it is offline" in json.loads(body)["error"]


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[str, str]:
    cert, key = self_signed_cert(tmp_path)
    return str(cert), str(key)


def test_http_over_tls_when_security_names_certificates(
    meta_addr: str, unique_name: str, tls_files: tuple[str, str]
) -> None:
    cert, key = tls_files
    security = SecurityConfig(ssl_cert=cert, ssl_key=key)
    security.validate()
    client_context = ssl.create_default_context(cafile=cert)

    async def scenario() -> None:
        async with MetaClient(meta_addr) as meta:
            node = make_node(meta, Storage(), f"pump-{unique_name}")
            await node.start()
            server = StatusServer(node, "127.0.0.1", 0, server_ssl_context(security))
            port = await server.start()
            try:
                code, _, body = await call("GET", f"https://127.0.0.1:{port}/status", client_context)
                assert code == 200 and json.loads(body)["state"] == "online"
                with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
                    await call("GET", f"http://127.0.0.1:{port}/status")  # plaintext is not served
            finally:
                await server.stop()
                await node.stop()

    run(scenario())
