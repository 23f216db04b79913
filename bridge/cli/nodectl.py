"""``binlog-bridge ctl pause|resume|close NODE_ID``: change a node's state
through the HTTP control endpoint it registered (``status_addr``).

Before any change the process answering at that address must prove it is
the node: its ``GET /status`` reply must carry the registered ``node_id`` and
the meta service's ``cluster_id`` (:func:`verify_identity`). A registered
address outlives its node; another node (of this cluster or another one)
may listen there now, and it must not be paused or closed in its place."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from bridge.auth import current_token
from bridge.errors import Unreachable, UserError
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
STATUS_TIMEOUT = 10.0  # /status answers at once; a hung address must not hold ctl for minutes


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


def _url(node: meta_pb2.NodeStatus, path: str, security: SecurityConfig) -> str:
    kind = KIND_NAMES.get(node.kind, "node")
    if not node.status_addr:
        raise UserError(f"{kind} {node.node_id} registered no status address; it cannot be controlled")
    scheme = "https" if security.enabled else "http"
    return f"{scheme}://{node.status_addr}{path}"


def fetch_status(node: meta_pb2.NodeStatus, security: SecurityConfig) -> dict[str, Any]:
    """GET /status at the node's registered address; UserError when nothing answers there."""
    request = urllib.request.Request(_url(node, "/status", security))  # noqa: S310 - http(s) only
    return _request(node, "status", request, security, STATUS_TIMEOUT)


def identity_problem(node: meta_pb2.NodeStatus, cluster_id: int, reply: dict[str, Any]) -> str:
    """Why the process that gave ``reply`` is not ``node`` of cluster ``cluster_id``; "" when it is."""
    found = (str(reply.get("node_id", "")), reply.get("cluster_id"))
    if found == (node.node_id, cluster_id):
        return ""
    return (
        f"the process answering at {node.status_addr} is node {found[0] or '?'} of cluster "
        f"{found[1] if found[1] is not None else '?'}, not {node.node_id} of cluster {cluster_id}"
    )


def verify_identity(node: meta_pb2.NodeStatus, cluster_id: int, security: SecurityConfig) -> None:
    """Raise UserError unless the process at the node's status address reports its node and cluster id."""
    problem = identity_problem(node, cluster_id, fetch_status(node, security))
    if problem:
        kind = KIND_NAMES.get(node.kind, "node")
        raise UserError(f"refused: {problem}; {kind} {node.node_id} is not running there, nothing changed")


def answers_as_itself(node: meta_pb2.NodeStatus, cluster_id: int, security: SecurityConfig) -> bool:
    """Whether the node itself answers at its status address (another process there does not count)."""
    try:
        return not identity_problem(node, cluster_id, fetch_status(node, security))
    except (UserError, Unreachable):
        return False


def post_state(
    node: meta_pb2.NodeStatus, action: str, cluster_id: int, security: SecurityConfig
) -> dict[str, Any]:
    """Verify the node's identity, then POST /state/<action> to it; returns its status JSON.

    Raises UserError when another process answers at its address, when the
    node refuses, or when nothing answers.
    """
    verify_identity(node, cluster_id, security)
    url = _url(node, f"/state/{action}", security)
    headers = {"Content-Type": "application/json"}  # a form type would be refused as browser-forgeable
    token = current_token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, method="POST", data=b"{}", headers=headers)  # noqa: S310 - http(s) only
    return _request(node, action, request, security, HTTP_TIMEOUT)


def _request(
    node: meta_pb2.NodeStatus,
    action: str,
    request: urllib.request.Request,
    security: SecurityConfig,
    timeout: float,
) -> dict[str, Any]:
    kind = KIND_NAMES.get(node.kind, "node")
    url = request.full_url
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=_ssl_context(security)) as reply:  # noqa: S310
            body = json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:
        raise UserError(f"{kind} {node.node_id} refused {action}: {_error_of(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise Unreachable(f"cannot reach {kind} {node.node_id} at {url}: {reason}") from None
    except ValueError:
        raise UserError(
            f"{url} did not answer with a node's JSON status; is {kind} {node.node_id} there?"
        ) from None
    if not isinstance(body, dict):
        raise UserError(f"{url} did not answer with a node's JSON status; is {kind} {node.node_id} there?")
    return body


def _error_of(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error", exc.reason))
    except (ValueError, AttributeError):
        return f"HTTP {exc.code} {exc.reason}"
