"""bridge.status_http: the status server pumps and drainers share, and the drainer's thin routes.

Real sockets on 127.0.0.1; the pump's routes are covered by tests/unit/test_pump_node.py.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from bridge.errors import BridgeError, UserError
from bridge.status_http import Response, StatusServer
from drainer.http import REFUSE_PAUSE
from drainer.http import StatusServer as DrainerStatusServer


async def request(port: int, data: bytes) -> tuple[str, dict[str, str], bytes]:
    """(status line, headers, body) of one raw request."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return status_line, headers, body


def serve(server: StatusServer, scenario: Callable[[int], Awaitable[None]]) -> None:
    async def main() -> None:
        port = await server.start()
        try:
            await scenario(port)
        finally:
            await server.stop()

    asyncio.run(main())


def failing(exc: Exception) -> Callable[[], Awaitable[Response]]:
    async def handler() -> Response:
        raise exc

    return handler


def test_status_metrics_and_routing() -> None:
    refreshed: list[bool] = []
    server = StatusServer(
        "tester",
        lambda: {"state": "online", "ts": 7},
        "127.0.0.1",
        0,
        before_metrics=lambda: refreshed.append(True),
    )

    async def scenario(port: int) -> None:
        line, headers, body = await request(port, b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
        assert line == "HTTP/1.1 200 OK" and headers["Content-Type"] == "application/json"
        assert json.loads(body) == {"state": "online", "ts": 7}
        line, headers, body = await request(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert line == "HTTP/1.1 200 OK" and headers["Content-Type"].startswith("text/plain")
        assert b"# TYPE" in body and refreshed == [True]
        line, _, body = await request(port, b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
        assert line.startswith("HTTP/1.1 404 ") and b"GET /status, GET /metrics" in body
        line, headers, _ = await request(port, b"POST /status HTTP/1.1\r\nHost: x\r\n\r\n")
        assert line.startswith("HTTP/1.1 405 ") and headers["Allow"] == "GET, HEAD"
        line, _, body = await request(
            port, b"POST /status HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        assert line.startswith("HTTP/1.1 501 ") and b"chunked" in body

    serve(server, scenario)


def test_handler_errors_map_to_409_503_and_500_and_are_counted() -> None:
    errors: list[bool] = []
    server = StatusServer(
        "tester",
        dict,
        "127.0.0.1",
        0,
        routes={
            "/refused": {"POST": failing(UserError("not now"))},
            "/down": {"POST": failing(BridgeError("store unreachable"))},
            "/bug": {"POST": failing(RuntimeError("boom"))},
        },
        on_error=lambda: errors.append(True),
    )

    async def scenario(port: int) -> None:
        line, _, body = await request(port, b"POST /refused HTTP/1.1\r\nHost: x\r\n\r\n")
        assert line == "HTTP/1.1 409 Conflict" and json.loads(body) == {"error": "not now"}
        line, _, body = await request(port, b"POST /down HTTP/1.1\r\nHost: x\r\n\r\n")
        assert line.startswith("HTTP/1.1 503 ") and json.loads(body) == {
            "error": "BridgeError: store unreachable"
        }
        line, _, body = await request(port, b"POST /bug HTTP/1.1\r\nHost: x\r\n\r\n")
        assert line.startswith("HTTP/1.1 500 ")
        assert json.loads(body) == {"error": "internal error; see the tester's log"}
        line, headers, _ = await request(port, b"GET /bug HTTP/1.1\r\nHost: x\r\n\r\n")
        assert line.startswith("HTTP/1.1 405 ") and headers["Allow"] == "POST"

    serve(server, scenario)
    assert len(errors) == 2  # the 409 is the caller's mistake, not the node's


def test_drainer_routes_close_and_refuse_pause() -> None:
    closed: list[bool] = []

    def close() -> dict[str, object]:
        closed.append(True)
        return {"state": "closing"}

    server = DrainerStatusServer(lambda: {"state": "online"}, lambda: None, close, "127.0.0.1", 0)

    async def scenario(port: int) -> None:
        for path in (b"/state/pause", b"/state/resume"):
            line, _, body = await request(port, b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            assert line == "HTTP/1.1 409 Conflict" and json.loads(body) == {"error": REFUSE_PAUSE}
        assert closed == []
        line, _, body = await request(port, b"POST /state/close HTTP/1.1\r\nHost: x\r\n\r\n")
        assert line == "HTTP/1.1 200 OK" and json.loads(body) == {"state": "closing"}
        assert closed == [True]
        line, _, body = await request(port, b"HEAD /status HTTP/1.1\r\nHost: x\r\n\r\n")
        assert line == "HTTP/1.1 200 OK" and body == b""

    serve(server, scenario)
