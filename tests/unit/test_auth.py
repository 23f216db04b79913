"""bridge.auth: the token check and the decode guard, on an in-process gRPC
server running the drainer's Notify service, called by a raw client."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import pytest

from bridge import auth
from bridge.proto import drainer_pb2, drainer_pb2_grpc
from drainer.server import CisternService

TOKEN = "t0ken"
NOTIFY = "/" + drainer_pb2.DESCRIPTOR.services_by_name["Cistern"].full_name + "/Notify"


class Collector:
    def __init__(self) -> None:
        self.notified = 0

    async def notify(self) -> None:
        self.notified += 1


async def call_notify(token: str, body: bytes, metadata: tuple[tuple[str, str], ...] = ()) -> Any:
    collector = Collector()
    server = grpc.aio.server(interceptors=auth.server_interceptors(token))
    drainer_pb2_grpc.add_CisternServicer_to_server(CisternService(collector), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            raw = channel.unary_unary(NOTIFY)
            try:
                await raw(body, metadata=metadata, timeout=10)
            except grpc.aio.AioRpcError as exc:
                return exc.code(), exc.details(), collector.notified
            return grpc.StatusCode.OK, "", collector.notified
    finally:
        await server.stop(None)


def test_notify_answers_an_undecodable_body_invalid_argument_naming_the_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)

    async def scenario() -> list[Any]:
        return [await call_notify("", b"\x08") for _ in range(3)]

    for code, details, notified in asyncio.run(scenario()):
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "NotifyReq" in details
        assert notified == 0
    assert "Traceback" not in caplog.text
    assert sum("refused from" in r.getMessage() for r in caplog.records) <= 1


def test_notify_needs_the_token_when_one_is_set() -> None:
    bearer = (("authorization", f"Bearer {TOKEN}"),)

    async def scenario() -> list[Any]:
        return [
            await call_notify(TOKEN, b""),
            await call_notify(TOKEN, b"", (("authorization", "Bearer wrong"),)),
            await call_notify(TOKEN, b"", bearer),
            await call_notify("", b""),
        ]

    missing, wrong, right, open_ = asyncio.run(scenario())
    assert missing[0] == wrong[0] == grpc.StatusCode.UNAUTHENTICATED and missing[2] == wrong[2] == 0
    assert TOKEN not in missing[1] and "cluster-token" in missing[1]
    assert right[0] == open_[0] == grpc.StatusCode.OK and right[2] == 1


def test_bearer_comparison_and_token_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    assert auth.bearer_matches(f"Bearer {TOKEN}", TOKEN)
    assert auth.bearer_matches(f"bearer {TOKEN}", TOKEN)
    assert not auth.bearer_matches(TOKEN, TOKEN)
    assert not auth.bearer_matches(f"Bearer {TOKEN}x", TOKEN)
    assert not auth.bearer_matches(f"Basic {TOKEN}", TOKEN)
    monkeypatch.setenv(auth.TOKEN_ENV, "from-env")
    assert auth.resolve_token("") == "from-env"
    assert auth.resolve_token("from-config") == "from-config"
    monkeypatch.delenv(auth.TOKEN_ENV)
    assert auth.client_interceptors("") == []
    assert len(auth.client_interceptors("x")) == 2


def test_peer_log_writes_one_line_per_host_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    peers = auth.PeerLog(interval=3600)
    for port in range(100):
        peers.warn(f"ipv4:10.0.0.1:{port}", "bad body")
    peers.warn("ipv4:10.0.0.2:1", "bad body")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["refused from ipv4:10.0.0.1: bad body", "refused from ipv4:10.0.0.2: bad body"]
