"""The HTTP status endpoint a node serves: ``/status``, ``/metrics`` and the node's own routes.

Pumps and drainers each add their routes (``/state/...``) in a thin module of
their own (:mod:`pump.http`, :mod:`drainer.http`); this module is the server
they share with ``capture`` and the meta server:

=====================  =====================================================
``GET /status``        the node's status as JSON (what ``status()`` returns)
``GET /metrics``       Prometheus text format (every registered metric);
                       ``before_metrics`` refreshes gauges computed on demand
=====================  =====================================================

The server is aiohttp's (its low-level :class:`aiohttp.web.Server`, run in the
node's event loop); this module routes and answers. Behaviour of every route:
one request per connection (``Connection: close``); a request line or header
field over 16 KiB answers 431, more than 64 headers or a malformed request 400;
bodies are limited to 64 KiB (413; read and ignored), chunked bodies are
refused (501); a connection that sends no complete request head within 10 s is
closed, a body not received within 10 s answers 408. Unknown paths answer 404
naming the endpoints, a known path with another method 405 with ``Allow``;
HEAD is answered like GET without a body.
A handler's :class:`~bridge.errors.UserError` answers 409, another
:class:`~bridge.errors.BridgeError` 503, anything else 500 (logged, counted
by ``on_error``); errors, the server's own 400s included, are ``{"error": ...}``
JSON. TLS when ``[security]``
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
answers 400 (aiohttp's parser refuses it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadStatusLine, LineTooLong
from aiohttp.web_protocol import RequestHandler
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.registry import CollectorRegistry

from bridge.auth import bearer_matches, current_token
from bridge.errors import BridgeError, ConfigError, UserError
from bridge.grpcutil import SecurityConfig
from bridge.tls import http_role_problem

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 16 * 1024  # the request line and each header field
MAX_HEADERS = 64
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

    def to_web(self) -> web.Response:
        """The aiohttp response; the connection closes after it (one request per connection)."""
        answer = web.Response(
            status=self.status.value,
            body=self.body,
            headers={"Content-Type": self.content_type, **dict(self.headers)},
        )
        answer.force_close()
        return answer


Handler = Callable[[], Awaitable[Response]]
Routes = Mapping[str, Mapping[str, Handler]]  # path -> method -> handler


class _Protocol(RequestHandler):
    """aiohttp's connection handler, answering the requests its parser refuses as JSON errors."""

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # Reached for a request aiohttp cannot parse (400: the client's mistake, logged
        # quietly) or a failure past StatusServer._dispatch (a bug: logged in full).
        # aiohttp's messages go on to draw the offending bytes: the first line says it.
        text = (message or HTTPStatus(status).phrase).splitlines()[0].rstrip(":")
        if status >= HTTPStatus.INTERNAL_SERVER_ERROR:
            log.error("status endpoint: %s %s failed", request.method, request.path, exc_info=exc)
        else:
            log.debug("status endpoint: request refused (%s): %s", status, text)
        if isinstance(exc, LineTooLong):
            return Response.error(
                HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request head too large"
            ).to_web()
        if isinstance(exc, BadStatusLine):
            text = f"malformed request line: {text}"
        return Response.error(HTTPStatus(status), text).to_web()


class _Server(web.Server):
    """aiohttp's low-level server with :class:`_Protocol` for each connection."""

    def __call__(self) -> RequestHandler:
        return _Protocol(self, loop=self._loop, **self._kwargs)


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
        self._runner: web.ServerRunner | None = None

    @property
    def port(self) -> int:
        """The port bound once started (the one asked for before)."""
        return self._port

    def status_response(self) -> Response:
        """200 with the node's status: what a route that changes state answers when it is done."""
        return Response.json(HTTPStatus.OK, self._status())

    async def start(self) -> int:
        """Listen; returns the port bound. A port not free is a ConfigError naming ``status-addr``."""
        server = _Server(
            self._handle,
            access_log=None,
            keepalive_timeout=READ_TIMEOUT,
            max_line_size=MAX_LINE_BYTES,
            max_field_size=MAX_LINE_BYTES,
            max_headers=MAX_HEADERS,
        )
        runner = web.ServerRunner(server, shutdown_timeout=READ_TIMEOUT)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port, ssl_context=self._ssl).start()
        except OSError as exc:
            await runner.cleanup()
            raise ConfigError(
                f"status-addr: cannot listen on {self._host}:{self._port}: {exc.strerror}"
            ) from exc
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        log.info(
            "%s status endpoint on %s://%s:%d",
            self._component,
            "https" if self._ssl else "http",
            self._host,
            self._port,
        )
        return self._port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _get_status(self) -> Response:
        return self.status_response()

    async def _get_metrics(self) -> Response:
        self._before_metrics()
        return Response(HTTPStatus.OK, generate_latest(self._registry), CONTENT_TYPE_LATEST)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        method = request.method
        if "Transfer-Encoding" in request.headers:
            response = Response.error(HTTPStatus.NOT_IMPLEMENTED, "chunked request bodies are not supported")
        elif (request.content_length or 0) > MAX_BODY_BYTES:
            response = Response.error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"request body over {MAX_BODY_BYTES} bytes"
            )
        else:
            try:
                await asyncio.wait_for(request.read(), READ_TIMEOUT)  # at most MAX_BODY_BYTES, ignored
            except TimeoutError:
                return Response.error(HTTPStatus.REQUEST_TIMEOUT, "request not received in time").to_web()
            response = (
                self._refusal(method, request.headers)
                or self._role_refusal(method, request.get_extra_info("peercert"))
                or await self._dispatch(method, request.path)
            )
        return response.to_web()

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

    def _role_refusal(self, method: str, peercert: Any) -> Response | None:
        """Under mutual TLS, 403 for a state change whose certificate lacks role ``ctl`` (bridge.tls)."""
        if self._ssl is None or self._ssl.verify_mode != ssl.CERT_REQUIRED:
            return None
        problem = http_role_problem(method, peercert)
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
