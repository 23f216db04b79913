"""Mutual TLS roles: which certificate may make which call.

With ``ssl-ca`` in a server's ``[security]``, every client must present a
certificate signed by that CA (TLS refuses the handshake otherwise), and the
calls that change cluster membership or read the binlog also check the
certificate's *name* against the caller's role:

==================================  =============================================
call                                roles allowed
==================================  =============================================
``Meta/Heartbeat``                  the kind of the node in the request
                                    (``pump`` for a pump, ``drainer`` for a
                                    drainer), or ``ctl`` (marking a node offline)
``Meta/RemoveNode``                 ``ctl``
``Pump/WriteBinlog(s)``             ``producer``
``Pump/PullBinlogs``                ``drainer``
``Cistern/Notify`` (drainer)        ``pump``
anything else (TSO, ListNodes,      any certificate of the CA
GetStatus)
HTTP ``POST`` (``/state/...``)      ``ctl``
HTTP ``GET`` (``/status``,          any certificate of the CA
``/metrics``)
==================================  =============================================

A certificate has role R when its subject CN, or one of its DNS subject
alternative names, is R or starts with ``R.`` (``pump``,
``pump.dc1.example.com``). A node that is also a server needs its host in a
SAN as usual (``IP:10.0.0.5`` or ``DNS:pump-1.example.com``), so a pump's
certificate reads e.g. ``CN=pump, SAN=DNS:pump-1.example.com, IP:10.0.0.5``.
A refused call ends with ``PERMISSION_DENIED`` naming the role it needed.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import grpc

log = logging.getLogger(__name__)

PUMP = "pump"
DRAINER = "drainer"
CTL = "ctl"
PRODUCER = "producer"
META = "meta"
ROLES = (META, PUMP, DRAINER, CTL, PRODUCER)

# NodeKind values of meta.proto (PUMP = 1, DRAINER = 2) -> role; kept as numbers
# so this module needs no generated code.
_KIND_ROLES = {1: PUMP, 2: DRAINER}

# Roles that a request needs: a fixed tuple, or a function of the request.
Rule = tuple[str, ...] | Callable[[Any], tuple[str, ...]]


def _heartbeat_roles(request: Any) -> tuple[str, ...]:
    status = getattr(request, "status", None)
    role = _KIND_ROLES.get(getattr(status, "kind", 0))
    return (role, CTL) if role else (PUMP, DRAINER, CTL)


POLICY: dict[str, Rule] = {
    "/bridge.meta.Meta/Heartbeat": _heartbeat_roles,
    "/bridge.meta.Meta/RemoveNode": (CTL,),
    "/binlog.Pump/WriteBinlog": (PRODUCER,),
    "/binlog.Pump/WriteBinlogs": (PRODUCER,),
    "/binlog.Pump/PullBinlogs": (DRAINER,),
    "/binlog.Cistern/Notify": (PUMP,),
}


def has_role(names: Iterable[str], role: str) -> bool:
    """True when one of a certificate's ``names`` grants ``role`` (``role`` or ``role.<anything>``)."""
    return any(name == role or name.startswith(role + ".") for name in names)


def grpc_peer_names(context: Any) -> list[str]:
    """The CN and DNS names of the certificate the gRPC peer presented; empty without one."""
    auth = context.auth_context()
    names: list[str] = []
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        names += [value.decode("utf-8", "replace") for value in auth.get(key, ())]
    return names


def http_peer_names(peercert: Mapping[str, Any] | None) -> list[str]:
    """CN and DNS names of a verified peer certificate as :meth:`ssl.SSLSocket.getpeercert` gives it."""
    if not peercert:
        return []
    names = [value for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName"]
    return names + [value for kind, value in peercert.get("subjectAltName", ()) if kind == "DNS"]


def http_role_problem(method: str, peercert: Mapping[str, Any] | None) -> str | None:
    """Why an HTTP request under mutual TLS may not go on (a state change needs ``ctl``); None = it may."""
    if method in ("GET", "HEAD"):
        return None
    names = http_peer_names(peercert)
    return None if has_role(names, CTL) else refusal(method, names, (CTL,))


def refusal(method: str, names: list[str], roles: tuple[str, ...]) -> str:
    """The PERMISSION_DENIED message: what was needed, what was presented."""
    shown = ", ".join(names) if names else "no client certificate"
    return f"{method.rsplit('/', 1)[-1]} needs a certificate with role {' or '.join(roles)} (got {shown})"


def _roles_for(rule: Rule, request: Any) -> tuple[str, ...]:
    return rule(request) if callable(rule) else rule


class RoleInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Checks :data:`POLICY` on every call it covers; installed only with mutual TLS."""

    def __init__(self, policy: dict[str, Rule] | None = None) -> None:
        self._policy = POLICY if policy is None else policy

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        rule = self._policy.get(method)
        if handler is None or rule is None:
            return handler
        return _guarded(handler, method, rule)


async def _check(method: str, rule: Rule, request: Any, context: Any) -> None:
    roles = _roles_for(rule, request)
    names = grpc_peer_names(context)
    if not any(has_role(names, role) for role in roles):
        message = refusal(method, names, roles)
        log.debug("refused %s from %s: %s", method, context.peer(), message)
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, message)


def _guarded(handler: grpc.RpcMethodHandler, method: str, rule: Rule) -> grpc.RpcMethodHandler:
    """``handler`` with the role check run before its behaviour (unary requests only)."""
    if handler.unary_unary is not None:
        inner = handler.unary_unary

        async def unary_unary(request: Any, context: Any) -> Any:
            await _check(method, rule, request, context)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            unary_unary, handler.request_deserializer, handler.response_serializer
        )
    if handler.unary_stream is not None:
        stream = handler.unary_stream

        async def unary_stream(request: Any, context: Any) -> AsyncIterator[Any]:
            await _check(method, rule, request, context)
            if inspect.isasyncgenfunction(stream):
                async for reply in stream(request, context):
                    yield reply
            else:  # a coroutine that writes with context.write
                await stream(request, context)

        return grpc.unary_stream_rpc_method_handler(
            unary_stream, handler.request_deserializer, handler.response_serializer
        )
    raise TypeError(f"{method}: role checks cover unary requests only")
