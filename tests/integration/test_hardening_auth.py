"""Cluster token, control endpoints and bad requests (issue 15), from outside:
raw gRPC calls and raw HTTP requests against `binlog-bridge meta` and
`binlog-bridge pump` children that share a cluster token."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from bridge.binlog import commit
from bridge.meta.client import MetaClient
from bridge.proto import meta_pb2, meta_pb2_grpc, pump_pb2, pump_pb2_grpc
from bridge.pumpclient import AsyncPumpsClient
from tests.support.process import ChildProcess, bridge_cli, free_port
from tests.support.pump_server import PumpProcess, prewrite_of, pull_until

pytestmark = pytest.mark.timeout(120)

TOKEN = "s3cret-cluster-token"
HANG_GUARD = 90.0
BEARER = (("authorization", f"Bearer {TOKEN}"),)


@dataclass
class Cluster:
    meta: ChildProcess
    meta_addr: str
    pump: PumpProcess


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("hardening-auth")
    meta_addr = f"127.0.0.1:{free_port()}"
    meta = ChildProcess(
        bridge_cli("meta", "--data-dir", str(workdir / "meta"), "--addr", meta_addr),
        workdir / "meta.out",
        env={"BINLOG_BRIDGE_CLUSTER_TOKEN": TOKEN},  # the meta takes it from the environment
    )
    pump = PumpProcess(
        workdir, meta_addr, extra_config=f'cluster-token = "{TOKEN}"'
    )  # ... the pump from config
    try:
        meta.wait_for_line("meta ready")
        pump.start()
        yield Cluster(meta, meta_addr, pump)
    finally:
        pump.kill()
        meta.kill()
    for child in (meta, pump.child):
        assert child is not None and "Traceback" not in child.output
        assert TOKEN not in child.output, "the token was logged"


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, HANG_GUARD))


async def code_of(call: Any) -> grpc.StatusCode:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def test_meta_refuses_heartbeat_tso_and_lists_without_the_token(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with grpc.aio.insecure_channel(cluster.meta_addr) as channel:
            stub = meta_pb2_grpc.MetaStub(channel)
            ghost = meta_pb2.HeartbeatRequest(
                status=meta_pb2.NodeStatus(
                    node_id="ghost", kind=meta_pb2.PUMP, addr="127.0.0.1:1", state=meta_pb2.ONLINE
                )
            )
            wrong = (("authorization", "Bearer not-the-token"),)
            for metadata in ((), wrong):
                assert (
                    await code_of(stub.Heartbeat(ghost, metadata=metadata)) == grpc.StatusCode.UNAUTHENTICATED
                )
                assert (
                    await code_of(stub.GetTimestamps(meta_pb2.TsoRequest(count=1), metadata=metadata))
                    == grpc.StatusCode.UNAUTHENTICATED
                )
                assert (
                    await code_of(stub.ListNodes(meta_pb2.ListNodesRequest(), metadata=metadata))
                    == grpc.StatusCode.UNAUTHENTICATED
                )
            # GetStatus (cluster id, leader) stays open; the token opens the rest.
            await stub.GetStatus(meta_pb2.StatusRequest())
            tso = await stub.GetTimestamps(meta_pb2.TsoRequest(count=1), metadata=BEARER)
            assert tso.first > 0
            nodes = await stub.ListNodes(meta_pb2.ListNodesRequest(), metadata=BEARER)
            assert "ghost" not in {n.node_id for n in nodes.nodes}

    run(scenario())


def test_undecodable_bodies_get_invalid_argument_naming_the_message(cluster: Cluster) -> None:
    async def scenario() -> None:
        async with grpc.aio.insecure_channel(cluster.meta_addr) as channel:
            for method in ("Heartbeat", "GetTimestamps", "ListNodes", "RemoveNode", "GetStatus"):
                raw = channel.unary_unary(f"/bridge.meta.Meta/{method}")
                for _ in range(3):
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await raw(b"\x08", metadata=BEARER)
                    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
                    assert "the request is not a valid bridge.meta." in (refused.value.details() or "")

        # A field that breaks its rule is named, even when the field is huge.
        async with grpc.aio.insecure_channel(cluster.meta_addr) as channel:
            huge = meta_pb2.NodeStatus(node_id="q" * 100_000, kind=meta_pb2.PUMP, addr="127.0.0.1:1")
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await meta_pb2_grpc.MetaStub(channel).Heartbeat(
                    meta_pb2.HeartbeatRequest(status=huge), metadata=BEARER
                )
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "node_id must be" in (refused.value.details() or "")

    run(scenario())
    # One line per peer per interval, not one (or a traceback) per request.
    assert cluster.meta.output.count("refused from ipv4:127.0.0.1") <= 1


def test_pump_writes_and_pulls_need_the_token_and_sdk_clients_present_it(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with grpc.aio.insecure_channel(cluster.pump.addr) as channel:
            stub = pump_pb2_grpc.PumpStub(channel)
            write = pump_pb2.WriteBinlogReq(payload=prewrite_of(1 << 40).SerializeToString())
            assert await code_of(stub.WriteBinlog(write)) == grpc.StatusCode.UNAUTHENTICATED
            pull = stub.PullBinlogs(pump_pb2.PullBinlogReq())
            assert await code_of(pull.read()) == grpc.StatusCode.UNAUTHENTICATED
        monkeypatch.setenv("BINLOG_BRIDGE_CLUSTER_TOKEN", TOKEN)
        async with AsyncPumpsClient(cluster.meta_addr) as client, MetaClient(cluster.meta_addr) as meta:
            start = await client.get_timestamp()
            await client.write_binlog(prewrite_of(start))
            commit_ts = await client.get_timestamp()
            await client.write_binlog(commit(start, commit_ts))
            pulled = await pull_until(cluster.pump.addr, await meta.cluster_id(), commit_ts)
            assert (start, commit_ts) in {(b.start_ts, b.commit_ts) for b in pulled.txns}

    run(scenario())


def http(port: int, request: bytes) -> tuple[int, dict[str, Any]]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(body) if body.strip() else {}


def post(port: int, path: str, headers: dict[str, str], body: bytes = b"") -> tuple[int, dict[str, Any]]:
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return http(port, ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8") + body)


def test_state_changes_need_the_token_and_refuse_what_a_browser_can_forge(cluster: Cluster) -> None:
    port = cluster.pump.status_port
    auth = {"Authorization": f"Bearer {TOKEN}"}
    forged = [
        {"Content-Type": "application/x-www-form-urlencoded", **auth},
        {"Content-Type": "multipart/form-data; boundary=x", **auth},
        {"Content-Type": "text/plain", **auth},
        {"Content-Type": "application/json", "Origin": "http://evil.example", **auth},
    ]
    for headers in forged:
        status, answer = post(port, "/state/pause", headers, b"{}")
        assert status == 403, (headers, answer)
    status, answer = post(port, "/state/pause", {"Content-Type": "application/json"}, b"{}")
    assert status == 401 and "token" in answer["error"]
    status, answer = post(
        port, "/state/pause", {"Content-Type": "application/json", "Authorization": "Bearer x"}
    )
    assert status == 401
    assert http(port, b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")[1]["state"] == "online"
    # The right token, JSON and its own origin: paused, then resumed.
    own = {"Content-Type": "application/json", "Origin": f"http://127.0.0.1:{port}", **auth}
    status, answer = post(port, "/state/pause", own, b"{}")
    assert status == 200 and answer["state"] == "paused"
    status, answer = post(port, "/state/resume", own, b"{}")
    assert status == 200 and answer["state"] == "online"


def test_a_content_length_of_non_ascii_digits_answers_400(cluster: Cluster) -> None:
    request = "POST /state/pause HTTP/1.1\r\nHost: x\r\nContent-Length: ²\r\n\r\n".encode()
    status, answer = http(cluster.pump.status_port, request)
    assert status == 400 and "Content-Length" in answer["error"]
