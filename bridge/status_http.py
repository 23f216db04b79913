"""The HTTP status endpoint a node serves: ``/status``, ``/metrics`` and the node's own routes.

Pumps and drainers each add their routes (``/state/...``) in a thin module of
their own (:mod:`pump.http`, :mod:`drainer.http`); this module is the server
they share with ``capture`` and the meta server:

=====================  =====================================================
``GET /status``        the node's status as JSON (what ``status()`` returns)
``GET /metrics``       Prometheus text format (every registered metric);
                       ``before_metrics`` refreshes gauges computed on demand
=====================  =====================================================

Behaviour of every route: one request per connection (``Connection:
close``); request heads are limited to 16 KiB and bodies (read and ignored)
to 64 KiB, chunked bodies are refused (501); unknown paths answer 404 naming
the endpoints, a known path with another method 405 with ``Allow``; HEAD is
answered like GET without a body. A handler's
:class:`~bridge.errors.UserError` answers 409, another
:class:`~bridge.errors.BridgeError` 503, anything else 500 (logged, counted
by ``on_error``); errors are ``{"error": ...}`` JSON. TLS when ``[security]``
names a certificate (:func:`server_ssl_context`), requiring client
certificates when it names a CA, as the gRPC port does; then a state change
also needs a certificate with role ``ctl`` (:mod:`bridge.tls`), else 403.

Requests other than GET and HEAD change state, so (issue 15) they are
refused with 403 when a browser could send them cross-origin without a
preflight: a form or text ``Content-Type`` (``application/x-www-form-urlencoded``,
``multipart/form-data``, ``text/plain``) or an ``Origin`` header that is not
this server's own ``Host``. When the cluster has a token
(:mod:`bridge.auth`) they also need ``Authorization: Bearer <token>``, else
401. GET and HEAD stay open. A ``Content-Length`` that is not ASCII digits
answers 400.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.registry import CollectorRegistry

from bridge.auth import bearer_matches, current_token
from bridge.errors import BridgeError, ConfigError, UserError
from bridge.grpcutil import SecurityConfig
from bridge.tls import http_role_problem

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 64 * 1024
READ_TIMEOUT = 10.0
READ_ONLY_METHODS = frozenset({"GET", "HEAD"})
# Content types a cross-origin page can POST without a CORS preflight.
SIMPLE_CONTENT_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})


@dataclass
class Response:
    status: HTTPStatus
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, status: HTTPStatus, data: Mapping[str, object]) -> Response:
        """``data`` as indented JSON; values JSON cannot carry are written as their ``str``."""
        return cls(status, json.dumps(data, indent=1, sort_keys=True, default=str).encode() + b"\n")

    @classmethod
    def error(cls, status: HTTPStatus, message: str, allow: str = "") -> Response:
        response = cls.json(status, {"error": message})
        if allow:
            response.headers = (("Allow", allow),)
        return response


Handler = Callable[[], Awaitable[Response]]
Routes = Mapping[str, Mapping[str, Handler]]  # path -> method -> handler


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


def _no_refresh() -> None:
    return None


class StatusServer:
    """Serves ``/status``, ``/metrics`` and ``routes`` for one node on ``host:port`` (0 = any free port).

    ``component`` (``pump``, ``drainer``) names the node in log lines and
    error answers; ``on_error`` is called once per request that failed
    inside a handler (for the component's error counter). ``/metrics``
    serves ``registry`` (default: the process-wide one); the meta server
    passes its member's own, as several members may share a process.
    """

    def __init__(
        self,
        component: str,
        status: Callable[[], Mapping[str, object]],
        host: str,
        port: int,
        *,
        routes: Routes | None = None,
        before_metrics: Callable[[], None] = _no_refresh,
        on_error: Callable[[], None] = _no_refresh,
        ssl_context: ssl.SSLContext | None = None,
        token: str | None = None,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self._component = component
        self._registry = registry
        self._status = status
        self._before_metrics = before_metrics
        self._on_error = on_error
        self._routes: dict[str, Mapping[str, Handler]] = {
            "/status": {"GET": self._get_status},
            "/metrics": {"GET": self._get_metrics},
            **(routes or {}),
        }
        self._host = host
        self._port = port
        self._ssl = ssl_context
        self._token = current_token() if token is None else token  # never logged
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        """The port bound once started (the one asked for before)."""
        return self._port

    def status_response(self) -> Response:
        """200 with the node's status: what a route that changes state answers when it is done."""
        return Response.json(HTTPStatus.OK, self._status())

    async def start(self) -> int:
        """Listen; returns the port bound. A port not free is a ConfigError naming ``status-addr``."""
        try:
            self._server = await asyncio.start_server(
                self._handle, self._host, self._port, ssl=self._ssl, limit=MAX_HEAD_BYTES
            )
        except OSError as exc:
            raise ConfigError(
                f"status-addr: cannot listen on {self._host}:{self._port}: {exc.strerror}"
            ) from exc
        self._port = int(self._server.sockets[0].getsockname()[1])
        log.info(
            "%s status endpoint on %s://%s:%d",
            self._component,
            "https" if self._ssl else "http",
            self._host,
            self._port,
        )
        return self._port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _get_status(self) -> Response:
        return self.status_response()

    async def _get_metrics(self) -> Response:
        self._before_metrics()
        return Response(HTTPStatus.OK, generate_latest(self._registry), CONTENT_TYPE_LATEST)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                method, path, headers = await asyncio.wait_for(_read_request(reader), READ_TIMEOUT)
                response = (
                    self._refusal(method, headers)
                    or self._role_refusal(method, writer)
                    or await self._dispatch(method, path)
                )
            except BadRequest as exc:
                method, response = "", Response.error(exc.status, str(exc))
            except TimeoutError:
                method = ""
                response = Response.error(HTTPStatus.REQUEST_TIMEOUT, "request not received in time")
            await _write_response(writer, response, head_only=method == "HEAD")
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError) as exc:
            log.debug("status endpoint: connection dropped: %s", exc)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, ssl.SSLError):
                log.debug("status endpoint: connection closed uncleanly")

    def _refusal(self, method: str, headers: Mapping[str, str]) -> Response | None:
        """403/401 for a state change a browser could forge or that lacks the token; None = go on."""
        if method in READ_ONLY_METHODS:
            return None
        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type in SIMPLE_CONTENT_TYPES:
            return Response.error(
                HTTPStatus.FORBIDDEN,
                f"{method} with Content-Type {content_type} refused (a browser form could send it); "
                "send application/json",
            )
        origin = headers.get("origin")
        if origin is not None and origin.split("://", 1)[-1] != headers.get("host", ""):
            return Response.error(HTTPStatus.FORBIDDEN, f"{method} from another origin refused")
        if self._token and not bearer_matches(headers.get("authorization", ""), self._token):
            response = Response.error(
                HTTPStatus.UNAUTHORIZED, f"{method} needs the cluster token (Authorization: Bearer ...)"
            )
            response.headers = (("WWW-Authenticate", "Bearer"),)
            return response
        return None

    def _role_refusal(self, method: str, writer: asyncio.StreamWriter) -> Response | None:
        """Under mutual TLS, 403 for a state change whose certificate lacks role ``ctl`` (bridge.tls)."""
        if self._ssl is None or self._ssl.verify_mode != ssl.CERT_REQUIRED:
            return None
        problem = http_role_problem(method, writer.get_extra_info("peercert"))
        return Response.error(HTTPStatus.FORBIDDEN, problem) if problem else None

    async def _dispatch(self, method: str, path: str) -> Response:
        methods = self._routes.get(path)
        if methods is None:
            endpoints = ", ".join(f"{m} {p}" for p, ms in self._routes.items() for m in ms)
            return Response.error(HTTPStatus.NOT_FOUND, f"no endpoint {path}; endpoints: {endpoints}")
        handler = methods.get("GET" if method == "HEAD" else method)
        if handler is None:
            allow = ", ".join([*methods, "HEAD"] if "GET" in methods else methods)
            return Response.error(
                HTTPStatus.METHOD_NOT_ALLOWED, f"{path} takes {', '.join(methods)}, not {method}", allow
            )
        try:
            return await handler()
        except UserError as exc:
            return Response.error(HTTPStatus.CONFLICT, str(exc))
        except BridgeError as exc:
            self._on_error()
            return Response.error(HTTPStatus.SERVICE_UNAVAILABLE, f"{type(exc).__name__}: {exc}")
        except Exception:
            self._on_error()
            log.exception("status endpoint: %s %s failed", method, path)
            return Response.error(
                HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error; see the {self._component}'s log"
            )


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]]:
    """Read the request head (and discard any body); returns (method, path without
    query, headers by lower-case name; the last of a repeated one)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise BadRequest(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large") from None
    except asyncio.IncompleteReadError:
        raise BadRequest(HTTPStatus.BAD_REQUEST, "incomplete request") from None
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(HTTPStatus.BAD_REQUEST, f"malformed request line {request_line[:100]!r}")
    method, target, _ = parts
    length = 0
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep:
            continue
        name, value = name.strip().lower(), value.strip()
        headers[name] = value
        if name == "content-length":
            # isdigit() alone passes digits such as "²" that int() refuses
            if not (value.isascii() and value.isdigit()):
                raise BadRequest(HTTPStatus.BAD_REQUEST, "malformed Content-Length")
            length = int(value)
        elif name == "transfer-encoding":
            raise BadRequest(HTTPStatus.NOT_IMPLEMENTED, "chunked request bodies are not supported")
    if length > MAX_BODY_BYTES:
        raise BadRequest(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body over {MAX_BODY_BYTES} bytes")
    if length:
        await reader.readexactly(length)
    return method, target.split("?", 1)[0], headers


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
