"""The drainer's HTTP endpoint.

=====================  =====================================================
``GET /status``        JSON: the node, the checkpoint (ts, time, lag
                       seconds), the merge (resolved ts, each pump's
                       position, stream state, buffer), the sink (flushed
                       position, queue, retries), the error that stopped
                       replication, if one did
``GET /metrics``       Prometheus text format (every ``bridge_*`` metric)
``POST /state/close``  take the drainer out of the cluster for good: it
                       stops cleanly and registers OFFLINE, so closing pumps
                       stop waiting for it (``binlog-bridge ctl close ID``)
=====================  =====================================================

``POST /state/pause`` and ``/state/resume`` answer 409: a drainer is
stopped (SIGTERM), not paused.

Same shape as the pump's endpoint (:mod:`pump.http`): one request per
connection, request heads up to 16 KiB, bodies ignored (up to 64 KiB), 404
for unknown paths, 405 for other methods, HEAD answered like GET without a
body, TLS when ``[security]`` names a certificate.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable, Mapping
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bridge.errors import ConfigError
from drainer import metrics

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
READ_TIMEOUT = 10.0

Reply = tuple[HTTPStatus, str, bytes]


def _json(status: HTTPStatus, data: Mapping[str, object]) -> Reply:
    return (
        status,
        "application/json",
        json.dumps(data, indent=1, sort_keys=True, default=str).encode() + b"\n",
    )


REFUSE_PAUSE = "a drainer is not paused: stop it (SIGTERM) and start it again, or close it for good"


class StatusServer:
    """Serves the endpoints above. ``before_metrics`` refreshes gauges computed on
    demand (pump positions, lag); ``close`` begins a close and returns the status."""

    def __init__(
        self,
        status: Callable[[], Mapping[str, object]],
        before_metrics: Callable[[], None],
        close: Callable[[], Mapping[str, object]],
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._before_metrics = before_metrics
        self._routes: dict[str, tuple[str, Callable[[], Reply]]] = {
            "/status": ("GET", lambda: _json(HTTPStatus.OK, status())),
            "/metrics": ("GET", self._metrics),
            "/state/close": ("POST", lambda: _json(HTTPStatus.OK, close())),
            "/state/pause": ("POST", lambda: _json(HTTPStatus.CONFLICT, {"error": REFUSE_PAUSE})),
            "/state/resume": ("POST", lambda: _json(HTTPStatus.CONFLICT, {"error": REFUSE_PAUSE})),
        }
        self._host = host
        self.port = port
        self._ssl = ssl_context
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        try:
            self._server = await asyncio.start_server(
                self._handle, self._host, self.port, ssl=self._ssl, limit=MAX_HEAD_BYTES
            )
        except OSError as exc:
            raise ConfigError(
                f"status-addr: cannot listen on {self._host}:{self.port}: {exc.strerror}"
            ) from exc
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("status endpoint on %s://%s:%d", "https" if self._ssl else "http", self._host, self.port)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def _metrics(self) -> Reply:
        self._before_metrics()
        return HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest()

    def _answer(self, method: str, path: str) -> Reply:
        route = self._routes.get(path)
        if route is None:
            endpoints = ", ".join(f"{m} {p}" for p, (m, _) in self._routes.items())
            return _json(HTTPStatus.NOT_FOUND, {"error": f"no endpoint {path}; endpoints: {endpoints}"})
        allowed, handler = route
        if method != allowed and not (method == "HEAD" and allowed == "GET"):
            return _json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"{path} takes {allowed}, not {method}"})
        try:
            return handler()
        except Exception:
            metrics.ERRORS.labels("http").inc()
            log.exception("status endpoint: %s %s failed", method, path)
            return _json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error; see the drainer's log"})

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        method = path = ""
        try:
            try:
                method, path = await asyncio.wait_for(_read_head(reader), READ_TIMEOUT)
                reply = self._answer(method, path)
            except _BadRequest as exc:
                reply = _json(exc.status, {"error": str(exc)})
            except TimeoutError:
                reply = _json(HTTPStatus.REQUEST_TIMEOUT, {"error": "request not received in time"})
            allow = self._routes[path][0] if reply[0] == HTTPStatus.METHOD_NOT_ALLOWED else ""
            await _write(writer, reply, allow, body=method != "HEAD")
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
            log.debug("status endpoint: connection dropped: %s", exc)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, ssl.SSLError):
                log.debug("status endpoint: connection closed uncleanly")


class _BadRequest(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str]:
    """(method, path without query) of one request; its body, if any, is read and dropped."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise _BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large") from None
    except asyncio.IncompleteReadError:
        raise _BadRequest(HTTPStatus.BAD_REQUEST, "incomplete request") from None
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _BadRequest(HTTPStatus.BAD_REQUEST, f"malformed request line {request_line[:100]!r}")
    length = 0
    for line in header_lines:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            if not value.strip().isdigit():
                raise _BadRequest(HTTPStatus.BAD_REQUEST, "malformed Content-Length")
            length = int(value)
    if length > MAX_BODY_BYTES:
        raise _BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body over {MAX_BODY_BYTES} bytes")
    if length:
        await reader.readexactly(length)
    return parts[0], parts[1].split("?", 1)[0]


async def _write(writer: asyncio.StreamWriter, reply: Reply, allow: str, body: bool) -> None:
    status, content_type, payload = reply
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(payload)}\r\n"
        + (f"Allow: {allow}{', HEAD' if allow == 'GET' else ''}\r\n" if allow else "")
        + "Connection: close\r\n\r\n"
    )
    writer.write(head.encode("latin-1"))
    if body:
        writer.write(payload)
    await writer.drain()
