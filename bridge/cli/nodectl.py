"""``binlog-bridge ctl pause|resume|close NODE_ID``: change a node's state
through the HTTP control endpoint it registered (``status_addr``)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from bridge.errors import UserError
from bridge.grpcutil import SecurityConfig
from bridge.meta.client import MetaClient
from bridge.meta.nodes import KIND_NAMES
from bridge.proto import meta_pb2

STATE_ACTIONS = {
    "pause": "stop taking writes; keep serving pulls (a pump)",
    "resume": "take writes again after a pause",
    "close": "drain and go offline for good (a pump: finishes its Commits, waits for drainers)",
}
HTTP_TIMEOUT = 120.0  # close answers once closing is registered; pause once paused


async def find_node(client: MetaClient, node_id: str) -> meta_pb2.NodeStatus:
    response = await client.list_nodes(meta_pb2.NODE_KIND_UNSPECIFIED)
    for node in response.nodes:
        if node.node_id == node_id:
            return node
    known = ", ".join(sorted(n.node_id for n in response.nodes)) or "none"
    raise UserError(f"no node {node_id!r} in the registry (registered: {known})")


def _ssl_context(security: SecurityConfig) -> ssl.SSLContext | None:
    if not security.enabled:
        return None
    context = ssl.create_default_context(cafile=security.ssl_ca or None)
    if security.ssl_cert:
        context.load_cert_chain(security.ssl_cert, security.ssl_key)
    return context


def post_state(node: meta_pb2.NodeStatus, action: str, security: SecurityConfig) -> dict[str, Any]:
    """POST /state/<action> to the node; returns its status JSON or raises UserError."""
    kind = KIND_NAMES.get(node.kind, "node")
    if not node.status_addr:
        raise UserError(f"{kind} {node.node_id} registered no status address; it cannot be controlled")
    scheme = "https" if security.enabled else "http"
    url = f"{scheme}://{node.status_addr}/state/{action}"
    request = urllib.request.Request(url, method="POST", data=b"")  # noqa: S310 - http(s) only, built above
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT, context=_ssl_context(security)) as reply:  # noqa: S310
            body: dict[str, Any] = json.loads(reply.read() or b"{}")
            return body
    except urllib.error.HTTPError as exc:
        raise UserError(f"{kind} {node.node_id} refused {action}: {_error_of(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(f"cannot reach {kind} {node.node_id} at {url}: {reason}") from None


def _error_of(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error", exc.reason))
    except (ValueError, AttributeError):
        return f"HTTP {exc.code} {exc.reason}"
