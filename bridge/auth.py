"""The cluster token: who may call a node, and what every caller presents.

A cluster may have a shared secret, the *cluster token*: ``cluster-token`` in
the meta, pump and drainer configs, or the environment variable
``BINLOG_BRIDGE_CLUSTER_TOKEN`` (the config wins). With one:

- every gRPC server of the cluster (meta, pump, drainer) refuses a call
  without ``authorization: Bearer <token>`` metadata with ``UNAUTHENTICATED``
  (:class:`TokenInterceptor`); only the meta service's ``GetStatus`` (cluster
  id and leader, a health probe) stays open;
- every client channel (:func:`client_interceptors`, used by
  :func:`bridge.grpcutil.aio_channel`) sends it: the SDK, pumps, drainers,
  ``ctl``, ``capture``, ``demo``;
- the HTTP endpoints' state changes require it as a bearer token
  (:mod:`bridge.status_http`).

Tokens are compared with :func:`hmac.compare_digest` (constant time) and are
never logged. A process that serves with a token (:func:`use_cluster_token`)
also presents it on every channel it opens.

Also here, for every server: :class:`DecodeGuard`, which answers a request
body that does not parse as the method's message with ``INVALID_ARGUMENT``
naming the message (gRPC would answer ``UNKNOWN`` and log a traceback), and
logs one line per offending peer per ``PEER_LOG_INTERVAL``.
"""

from __future__ import annotations

import hmac
import inspect
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from bridge.proto import meta_pb2

log = logging.getLogger(__name__)

TOKEN_ENV = "BINLOG_BRIDGE_CLUSTER_TOKEN"  # noqa: S105 - the variable's name, not a token
METADATA_KEY = "authorization"
OPEN_METHODS = frozenset({f"/{meta_pb2.DESCRIPTOR.services_by_name['Meta'].full_name}/GetStatus"})
PEER_LOG_INTERVAL = 60.0  # seconds between log lines about one peer's bad requests
_MAX_PEERS_TRACKED = 4096

_process_token = ""


def resolve_token(configured: str = "") -> str:
    """The token from config, else from ``BINLOG_BRIDGE_CLUSTER_TOKEN``, else ""."""
    return configured or os.environ.get(TOKEN_ENV, "")


def current_token() -> str:
    """The token this process presents: the one it serves with, else the environment's."""
    return _process_token or resolve_token()


def adopt_token(configured: str) -> str:
    """Make the cluster token (config or env) the one this process presents on
    every channel opened from now on; call it before opening any. Returns it."""
    global _process_token  # one token per process, set once at start
    _process_token = resolve_token(configured)
    return _process_token


def use_cluster_token(configured: str, decode_guard: bool = True) -> list[grpc.aio.ServerInterceptor]:
    """:func:`adopt_token`, then the interceptors a node's gRPC server runs
    first: the token check when there is a token, and the decode guard unless
    the server's own deserializers are lenient already (the pump's)."""
    return server_interceptors(adopt_token(configured), decode_guard)


def server_interceptors(token: str, decode_guard: bool = True) -> list[grpc.aio.ServerInterceptor]:
    """The token check (when ``token``) outermost, then the decode guard.

    A token check that passes hands the call on unwrapped, so a server
    without the decode guard pays one interceptor call per RPC for the token.
    """
    interceptors: list[grpc.aio.ServerInterceptor] = [TokenInterceptor(token)] if token else []
    if decode_guard:
        interceptors.append(DecodeGuard())
    return interceptors


def bearer_matches(header: str, token: str) -> bool:
    """True when ``header`` is ``Bearer <token>`` (constant-time comparison)."""
    scheme, _, presented = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(presented.strip().encode(), token.encode())


class PeerLog:
    """Rate-limited warnings: one line per peer host per ``interval``, with the count since."""

    def __init__(self, interval: float = PEER_LOG_INTERVAL) -> None:
        self._interval = interval
        self._seen: dict[str, tuple[float, int]] = {}

    def warn(self, peer: str, what: str) -> None:
        host = peer.rpartition(":")[0] or peer  # ipv4:127.0.0.1:5555 -> one entry per host
        now = time.monotonic()
        last, count = self._seen.get(host, (0.0, 0))
        if last and now - last < self._interval:
            self._seen[host] = (last, count + 1)
            return
        if len(self._seen) >= _MAX_PEERS_TRACKED:
            self._seen.clear()
        self._seen[host] = (now, 0)
        more = f" (and {count} more since the last line)" if count else ""
        log.warning("refused from %s: %s%s", host, what, more)


_PEER_LOG = PeerLog()  # shared: one line per peer per interval, whatever it did wrong


class _Undecodable:
    """A request body that did not parse (the lenient deserializer's answer)."""

    def __init__(self, message: str) -> None:
        self.message = message


def _lenient(deserializer: Callable[[bytes], Any] | None, method: str) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    name = getattr(descriptor, "full_name", "request message")

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the caller's fault
            return _Undecodable(f"{method}: the request is not a valid {name}: {exc}")

    return parse


Check = Callable[[Any, Any], Awaitable[None]]


def _wrapped(
    handler: grpc.RpcMethodHandler, check: Check, deserializer: Callable[[bytes], Any] | None
) -> grpc.RpcMethodHandler:
    """``handler`` with ``check(request, context)`` run before its behaviour (unary requests)."""
    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary_unary(request: Any, context: Any) -> Any:
            await check(request, context)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, deserializer, handler.response_serializer)
    if handler.unary_stream is not None:
        stream = handler.unary_stream

        async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
            await check(request, context)
            if inspect.isasyncgenfunction(stream):
                async for reply in stream(request, context):
                    yield reply
            else:  # a coroutine that writes with context.write
                await stream(request, context)

        return grpc.unary_stream_rpc_method_handler(unary_stream, deserializer, handler.response_serializer)
    return handler  # streaming requests: none in this project's services


Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]]


class DecodeGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Undecodable request bodies end with INVALID_ARGUMENT naming the message, no traceback."""

    def __init__(self) -> None:
        self._log = _PEER_LOG

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming:
            return handler
        method = handler_call_details.method

        async def check(request: Any, context: Any) -> None:
            if isinstance(request, _Undecodable):
                self._log.warn(context.peer(), request.message)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)

        return _wrapped(handler, check, _lenient(handler.request_deserializer, method))


class TokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Calls without ``authorization: Bearer <token>`` end with UNAUTHENTICATED
    before their request is looked at (:data:`OPEN_METHODS` excepted)."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("TokenInterceptor needs a token")
        self._token = token
        self._log = _PEER_LOG

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method in OPEN_METHODS:
            return handler
        metadata = dict(handler_call_details.invocation_metadata or ())
        presented = metadata.get(METADATA_KEY, "")
        if isinstance(presented, str) and bearer_matches(presented, self._token):
            return handler
        reason = "wrong cluster token" if presented else "no cluster token"

        async def refuse(request: Any, context: Any) -> None:
            self._log.warn(context.peer(), f"{method}: {reason}")
            await context.abort(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{method} needs this cluster's token ({reason}): set cluster-token or {TOKEN_ENV}",
            )

        return _wrapped(handler, refuse, _lenient(handler.request_deserializer, method))


class _TokenMetadata:
    """Adds ``authorization: Bearer <token>`` to every call (unary and streaming responses)."""

    def __init__(self, token: str) -> None:
        self._entry = (METADATA_KEY, f"Bearer {token}")

    def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        metadata = grpc.aio.Metadata(*(details.metadata or ()))
        metadata.add(*self._entry)
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )


class _UnaryUnaryToken(_TokenMetadata, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


class _UnaryStreamToken(_TokenMetadata, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(self._details(details), request)


def client_interceptors(token: str | None = None) -> list[grpc.aio.ClientInterceptor]:
    """Interceptors that present ``token`` (default: :func:`current_token`); none without one."""
    token = current_token() if token is None else token
    if not token:
        return []
    return [_UnaryUnaryToken(token), _UnaryStreamToken(token)]
