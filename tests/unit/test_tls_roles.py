"""Mutual TLS role checks (bridge.tls) on a real in-process gRPC server over TLS.

The servicer is a stand-in for the meta service's methods (it only answers), so
what is tested is the TLS handshake and the role policy, with certificates of one
test CA and of a CA the server does not trust.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge.grpcutil import SecurityConfig, add_port, aio_channel, server_interceptors
from bridge.proto import meta_pb2, meta_pb2_grpc
from bridge.tls import has_role, http_peer_names, http_role_problem
from tests.support.certs import CertFiles, TestCA


class AnsweringMeta(meta_pb2_grpc.MetaServicer):
    async def Heartbeat(self, request: meta_pb2.HeartbeatRequest, context: Any) -> meta_pb2.HeartbeatResponse:
        return meta_pb2.HeartbeatResponse(update_ts=7)

    async def RemoveNode(
        self, request: meta_pb2.RemoveNodeRequest, context: Any
    ) -> meta_pb2.RemoveNodeResponse:
        return meta_pb2.RemoveNodeResponse()

    async def GetTimestamps(self, request: meta_pb2.TsoRequest, context: Any) -> meta_pb2.TsoResponse:
        return meta_pb2.TsoResponse(first=42, count=1)


def security(files: CertFiles) -> SecurityConfig:
    return SecurityConfig(ssl_ca=str(files.ca), ssl_cert=str(files.cert), ssl_key=str(files.key))


async def call(addr: str, client: SecurityConfig, method: str, request: Any) -> grpc.StatusCode:
    channel = aio_channel(addr, client)
    try:
        await getattr(meta_pb2_grpc.MetaStub(channel), method)(request, timeout=5)
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    finally:
        await channel.close()


def heartbeat(kind: int) -> meta_pb2.HeartbeatRequest:
    return meta_pb2.HeartbeatRequest(status=meta_pb2.NodeStatus(node_id="n1", kind=kind))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("ca"))


def run_against_server(ca: TestCA, calls: list[tuple[str, str, Any]]) -> list[grpc.StatusCode]:
    """Start a mutual-TLS server with the ``meta`` certificate; make each (role, method, request) call."""
    server_security = security(ca.issue("meta"))
    clients = {role: security(ca.issue(role)) for role in {role for role, _, _ in calls}}

    async def run() -> list[grpc.StatusCode]:
        server = grpc.aio.server(interceptors=server_interceptors(server_security))
        meta_pb2_grpc.add_MetaServicer_to_server(AnsweringMeta(), server)
        port = add_port(server, "127.0.0.1:0", server_security)
        await server.start()
        try:
            return [await call(f"127.0.0.1:{port}", clients[role], m, r) for role, m, r in calls]
        finally:
            await server.stop(None)

    return asyncio.run(run())


def test_membership_calls_need_the_matching_role(ca: TestCA) -> None:
    codes = run_against_server(
        ca,
        [
            ("pump", "Heartbeat", heartbeat(meta_pb2.PUMP)),
            ("drainer", "Heartbeat", heartbeat(meta_pb2.DRAINER)),
            ("ctl", "Heartbeat", heartbeat(meta_pb2.PUMP)),
            ("ctl", "RemoveNode", meta_pb2.RemoveNodeRequest(node_id="n1")),
            ("producer", "GetTimestamps", meta_pb2.TsoRequest(count=1)),
            # refused: a drainer posing as a pump, a producer registering, a pump removing nodes
            ("drainer", "Heartbeat", heartbeat(meta_pb2.PUMP)),
            ("producer", "Heartbeat", heartbeat(meta_pb2.DRAINER)),
            ("pump", "RemoveNode", meta_pb2.RemoveNodeRequest(node_id="n1")),
        ],
    )
    ok, denied = grpc.StatusCode.OK, grpc.StatusCode.PERMISSION_DENIED
    assert codes == [ok, ok, ok, ok, ok, denied, denied, denied]


def test_clients_without_a_valid_certificate_are_refused(ca: TestCA, tmp_path: Path) -> None:
    server_security = security(ca.issue("meta"))
    stranger = TestCA(tmp_path / "other", "other-ca").issue("pump")
    # trusts the server's CA but presents a certificate of another CA
    forged = SecurityConfig(ssl_ca=str(ca.path), ssl_cert=str(stranger.cert), ssl_key=str(stranger.key))
    no_cert = SecurityConfig(ssl_ca=str(ca.path))

    async def run() -> list[grpc.StatusCode]:
        server = grpc.aio.server(interceptors=server_interceptors(server_security))
        meta_pb2_grpc.add_MetaServicer_to_server(AnsweringMeta(), server)
        addr = f"127.0.0.1:{add_port(server, '127.0.0.1:0', server_security)}"
        await server.start()
        try:
            return [
                await call(addr, client, "GetTimestamps", meta_pb2.TsoRequest(count=1))
                for client in (forged, no_cert)
            ]
        finally:
            await server.stop(None)

    assert asyncio.run(run()) == [grpc.StatusCode.UNAVAILABLE] * 2  # the handshake fails


def test_role_names() -> None:
    assert has_role(["pump"], "pump")
    assert has_role(["127.0.0.1", "pump.dc1.example.com"], "pump")
    assert not has_role(["pumpkin"], "pump")
    assert not has_role(["pump-1"], "pump")
    assert not has_role([], "ctl")


def test_no_interceptor_without_mutual_tls(ca: TestCA) -> None:
    files = ca.issue("meta")
    assert server_interceptors(None) == []
    assert server_interceptors(SecurityConfig(ssl_cert=str(files.cert), ssl_key=str(files.key))) == []
    assert len(server_interceptors(security(files))) == 1


def test_http_state_changes_need_the_ctl_role() -> None:
    ctl = {"subject": ((("commonName", "ctl"),),), "subjectAltName": (("IP Address", "127.0.0.1"),)}
    by_san = {"subject": ((("commonName", "ops"),),), "subjectAltName": (("DNS", "ctl.example.com"),)}
    pump = {"subject": ((("commonName", "pump"),),), "subjectAltName": (("DNS", "localhost"),)}
    assert http_peer_names(by_san) == ["ops", "ctl.example.com"]
    assert http_role_problem("POST", ctl) is None
    assert http_role_problem("POST", by_san) is None
    assert http_role_problem("GET", pump) is None
    assert http_role_problem("POST", pump) == "POST needs a certificate with role ctl (got pump, localhost)"
    assert (
        http_role_problem("POST", None)
        == "POST needs a certificate with role ctl (got no client certificate)"
    )
