"""The pump's HTTP endpoint: status, Prometheus metrics and state control.

=====================  =====================================================
``GET /status``        JSON: node id, state, watermark, max commit ts,
                       unpaired Prewrites, disk, score, storage figures
``GET /metrics``       Prometheus text format (every ``bridge_*`` metric)
``POST /state/pause``  online -> paused; answers once paused
``POST /state/resume`` paused -> online
``POST /state/close``  begins closing; answers once closing is registered
=====================  =====================================================

State changes answer 200 with the status JSON, 409 with ``{"error": ...}``
when the current state does not allow the change. Unknown paths get 404,
known paths with another method 405 (with ``Allow``). One request per
connection (``Connection: close``); request heads are limited to 16 KiB and
bodies (ignored) to 64 KiB. TLS when ``[security]`` names a certificate,
requiring client certificates when it names a CA, as the gRPC port does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bridge.errors import BridgeError, ConfigError, UserError
from bridge.grpcutil import SecurityConfig
from pump import metrics

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
READ_TIMEOUT = 10.0


class NodeControl(Protocol):
    """What the endpoint drives; :class:`pump.node.PumpNode` is one."""

    def status(self) -> Mapping[str, object]: ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...

    async def close(self) -> None: ...


@dataclass
class Response:
    status: HTTPStatus
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, status: HTTPStatus, data: Mapping[str, object]) -> Response:
        return cls(status, json.dumps(data, indent=1, sort_keys=True).encode() + b"\n")

    @classmethod
    def error(cls, status: HTTPStatus, message: str, allow: str = "") -> Response:
        response = cls.json(status, {"error": message})
        if allow:
            response.headers = (("Allow", allow),)
        return response


class BadRequest(Exception):
    """The request cannot be parsed; ``status`` is the answer."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def server_ssl_context(security: SecurityConfig) -> ssl.SSLContext | None:
    """TLS for the HTTP endpoint from ``[security]``; None when it names no certificates."""
    if not security.enabled:
        return None
    if not (security.ssl_cert and security.ssl_key):
        raise ConfigError("security: the HTTP status endpoint needs ssl-cert and ssl-key for TLS")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(security.ssl_cert, security.ssl_key)
    if security.ssl_ca:
        context.load_verify_locations(security.ssl_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class StatusServer:
    """Serves the endpoints above for ``control`` on ``host:port`` (port 0 = any free port)."""

    def __init__(
        self, control: NodeControl, host: str, port: int, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._control = control
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._server: asyncio.Server | None = None
        self._routes: dict[str, dict[str, Callable[[], Awaitable[Response]]]] = {
            "/status": {"GET": self._status},
            "/metrics": {"GET": self._metrics},
            "/state/pause": {"POST": self._state_change(control.pause)},
            "/state/resume": {"POST": self._state_change(control.resume)},
            "/state/close": {"POST": self._state_change(control.close)},
        }

    @property
    def port(self) -> int:
        return self._port

    async def start(self) -> int:
        """Listen; returns the port bound."""
        try:
            self._server = await asyncio.start_server(
                self._handle, self._host, self._port, ssl=self._ssl, limit=MAX_HEAD_BYTES
            )
        except OSError as exc:
            raise ConfigError(
                f"status-addr: cannot listen on {self._host}:{self._port}: {exc.strerror}"
            ) from exc
        self._port = int(self._server.sockets[0].getsockname()[1])
        log.info("status endpoint on %s://%s:%d", "https" if self._ssl else "http", self._host, self._port)
        return self._port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                method, path = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT)
                response = await self._dispatch(method, path)
            except BadRequest as exc:
                method, response = "", Response.error(exc.status, str(exc))
            except TimeoutError:
                method, response = (
                    "",
                    Response.error(HTTPStatus.REQUEST_TIMEOUT, "request not received in time"),
                )
            await _write_response(writer, response, head_only=method == "HEAD")
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
            log.debug("status endpoint: connection dropped: %s", exc)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, ssl.SSLError):
                log.debug("status endpoint: connection closed uncleanly")

    async def _dispatch(self, method: str, path: str) -> Response:
        methods = self._routes.get(path)
        if methods is None:
            endpoints = ", ".join(f"{m} {p}" for p, ms in self._routes.items() for m in ms)
            return Response.error(HTTPStatus.NOT_FOUND, f"no endpoint {path}; endpoints: {endpoints}")
        handler = methods.get("GET" if method == "HEAD" else method)
        if handler is None:
            allow = ", ".join(methods)
            return Response.error(HTTPStatus.METHOD_NOT_ALLOWED, f"{path} takes {allow}, not {method}", allow)
        try:
            return await handler()
        except UserError as exc:
            return Response.error(HTTPStatus.CONFLICT, str(exc))
        except BridgeError as exc:
            metrics.ERRORS.labels("http").inc()
            return Response.error(HTTPStatus.SERVICE_UNAVAILABLE, f"{type(exc).__name__}: {exc}")
        except Exception:
            metrics.ERRORS.labels("http").inc()
            log.exception("status endpoint: %s %s failed", method, path)
            return Response.error(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error; see the pump's log")

    async def _status(self) -> Response:
        return Response.json(HTTPStatus.OK, self._control.status())

    async def _metrics(self) -> Response:
        return Response(HTTPStatus.OK, generate_latest(), CONTENT_TYPE_LATEST)

    def _state_change(self, change: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[Response]]:
        async def handler() -> Response:
            await change()
            return Response.json(HTTPStatus.OK, self._control.status())

        return handler


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str]:
    """Read the request head (and discard any body); returns (method, path without query)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large") from None
    except asyncio.IncompleteReadError:
        raise BadRequest(HTTPStatus.BAD_REQUEST, "incomplete request") from None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"malformed request line {lines[0][:100]!r}")
    method, target, _ = parts
    length = 0
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == "content-length":
            if not value.strip().isdigit():
                raise BadRequest(HTTPStatus.BAD_REQUEST, "malformed Content-Length")
            length = int(value)
        elif sep and name.strip().lower() == "transfer-encoding":
            raise BadRequest(HTTPStatus.NOT_IMPLEMENTED, "chunked request bodies are not supported")
    if length > MAX_BODY_BYTES:
        raise BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body over {MAX_BODY_BYTES} bytes")
    if length:
        await reader.readexactly(length)
    return method, target.split("?", 1)[0]


async def _write_response(writer: asyncio.StreamWriter, response: Response, head_only: bool) -> None:
    status = response.status
    head = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        "Connection: close",
        *(f"{name}: {value}" for name, value in response.headers),
    ]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    if not head_only:
        writer.write(response.body)
    await writer.drain()
