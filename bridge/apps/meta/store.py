"""What the meta service keeps durably, behind one interface for every backend.

A store holds the cluster id, the saved TSO limit, the node records and
leadership among the members sharing it. Two backends implement it:
:class:`bridge.apps.meta.local_store.LocalStore` (a data dir; always leader) and
:class:`bridge.apps.meta.etcd_store.EtcdStore` (a key prefix in etcd; leader by lease).

Node records are JSON in the original registry's shape, so tools that read
``/tidb-binlog/v1/pumps/<id>`` style entries can read ours::

    {"nodeId": "pump-1", "host": "10.0.0.5:8250", "state": "online", "isAlive": true,
     "score": 100, "label": "", "maxCommitTS": 4425..., "updateTS": 4425..., "ttlMs": 10000,
     "statusAddr": "10.0.0.5:8251"}

``isAlive`` is as of the last heartbeat; readers judge liveness from
``updateTS`` + ``ttlMs``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from bridge.errors import ProtocolError
from bridge.meta.nodes import KIND_NAMES, STATE_NAMES
from bridge.proto import meta_pb2

KIND_DIRS: dict[meta_pb2.NodeKind, str] = {kind: f"{name}s" for kind, name in KIND_NAMES.items()}
STATES_BY_NAME = {name: value for value, name in STATE_NAMES.items()}


@dataclass(frozen=True)
class BadEntry:
    """A node record that could not be read; ``message`` names where it is stored."""

    kind: meta_pb2.NodeKind
    node_id: str
    message: str


@dataclass
class LoadedNodes:
    """Node records read from a store, and the entries that could not be read."""

    nodes: list[meta_pb2.NodeStatus] = field(default_factory=list)
    errors: list[BadEntry] = field(default_factory=list)


class MetaStore(Protocol):
    """Durable state of the meta service. Methods raise :class:`StoreError` when the
    backend fails, and the writes raise :class:`NotLeader` once this member lost
    leadership (a deposed leader can never move the TSO window)."""

    backend: str

    async def open(self) -> int:
        """Connect (or lock the data dir) and return the cluster id, creating it once."""

    async def close(self) -> None:
        """Give up leadership if held and release every resource."""

    async def try_acquire(self) -> bool:
        """One attempt to become leader; True when this member now leads."""

    async def resign(self) -> None:
        """Give up leadership now (no-op when not leading) so another member can take over."""

    async def leadership_lost(self) -> None:
        """Return once leadership acquired by :meth:`try_acquire` is lost."""

    def leader_addr(self) -> str:
        """The leader's advertise address as last seen; "" while unknown."""

    async def load_tso_limit(self) -> int:
        """The last saved TSO limit (physical ms); 0 when none was saved."""

    async def save_tso_limit(self, limit_ms: int) -> None:
        """Durably save a new TSO limit; leader only."""

    async def load_nodes(self) -> LoadedNodes:
        """Every node record, skipping (and naming) unreadable ones."""

    async def save_node(self, status: meta_pb2.NodeStatus) -> None:
        """Durably save one node's record; leader only."""

    async def delete_node(self, kind: meta_pb2.NodeKind, node_id: str) -> None:
        """Delete one node's record (none: nothing to do); leader only."""


def node_to_json(status: meta_pb2.NodeStatus) -> bytes:
    record = {
        "nodeId": status.node_id,
        "host": status.addr,
        "state": STATE_NAMES.get(status.state, "unknown"),
        "isAlive": status.is_alive,
        "score": status.score,
        "label": status.label,
        "maxCommitTS": status.max_commit_ts,
        "updateTS": status.update_ts,
        "ttlMs": status.ttl_ms,
        "statusAddr": status.status_addr,
    }
    if status.error or status.error_ms:
        record.update(error=status.error, errorMs=status.error_ms)
    return json.dumps(record, separators=(",", ":")).encode()


def _field(record: dict[str, Any], key: str, kind: type, default: Any = None) -> Any:
    value = record.get(key, default)
    if value is None or not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ProtocolError(f"field {key!r} must be {kind.__name__}, got {value!r}")
    return value


def node_from_json(kind: meta_pb2.NodeKind, raw: bytes) -> meta_pb2.NodeStatus:
    """Decode a node record; :class:`ProtocolError` says what is wrong with it."""
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise ProtocolError(f"expected a JSON object, got {type(record).__name__}")
    state = _field(record, "state", str)
    if state not in STATES_BY_NAME:
        raise ProtocolError(f"unknown state {state!r}")
    return meta_pb2.NodeStatus(
        node_id=_field(record, "nodeId", str),
        kind=kind,
        addr=_field(record, "host", str, ""),
        state=STATES_BY_NAME[state],
        is_alive=_field(record, "isAlive", bool, False),
        score=_field(record, "score", int, 0),
        label=_field(record, "label", str, ""),
        max_commit_ts=_field(record, "maxCommitTS", int, 0),
        update_ts=_field(record, "updateTS", int, 0),
        ttl_ms=_field(record, "ttlMs", int, 0),
        status_addr=_field(record, "statusAddr", str, ""),
        error=_field(record, "error", str, ""),
        error_ms=_field(record, "errorMs", int, 0),
    )
