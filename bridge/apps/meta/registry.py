"""The node registry, held in memory by the leader and persisted through the store.

Every heartbeat is stamped with a fresh timestamp (``update_ts``) and saved
through the store before it is acknowledged. A node is alive while its last
heartbeat is younger than its ``ttl_ms``: measured on the leader's wall clock
from when the heartbeat arrived, or, for records loaded after a leader
change, from the physical part of ``update_ts``.

A node id is owned: while a node is alive, a heartbeat for its id from
another address is refused (:class:`NodeIdTaken`, naming the holder's
address). Once the holder has been silent for longer than its ttl (its
lease), the id goes to whoever registers it next.

``revision`` identifies the registry's content. It changes whenever a node
appears, or its addr, state, score, label, max_commit_ts, ttl or liveness
changes; a heartbeat that only refreshes ``update_ts`` keeps it. It starts
at a fresh timestamp on each leader, so revisions do not repeat across
leader changes. :meth:`wait_for_change` is the long poll behind ListNodes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bridge.apps.meta.oracle import Clock, wall_clock_ms
from bridge.apps.meta.store import KIND_DIRS, BadEntry, LoadedNodes
from bridge.errors import NodeIdTaken, NotLeader, ProtocolError
from bridge.meta.nodes import KIND_NAMES, STATE_NAMES
from bridge.proto import meta_pb2
from bridge.tso import physical_ms

log = logging.getLogger(__name__)

DEFAULT_TTL_MS = 10_000
MAX_TTL_MS = 3_600_000
MAX_NODE_ID_LEN = 128
TICK_SECONDS = 0.1

NodeKey = tuple[meta_pb2.NodeKind, str]


@dataclass
class _Entry:
    status: meta_pb2.NodeStatus
    expires_ms: int


def check_status(status: meta_pb2.NodeStatus) -> None:
    """Reject a heartbeat the registry cannot store; the message says which field."""
    node_id = status.node_id
    if not node_id or len(node_id) > MAX_NODE_ID_LEN or "/" in node_id or not node_id.isprintable():
        raise ProtocolError(
            f"node_id must be 1..{MAX_NODE_ID_LEN} printable characters without '/', got {node_id!r}"
        )
    if status.kind not in KIND_DIRS:
        raise ProtocolError(f"node {node_id}: kind must be PUMP or DRAINER, got {status.kind}")
    if status.state not in STATE_NAMES:
        raise ProtocolError(f"node {node_id}: state must be ONLINE..OFFLINE, got {status.state}")
    if status.ttl_ms > MAX_TTL_MS:
        raise ProtocolError(f"node {node_id}: ttl_ms must be at most {MAX_TTL_MS}, got {status.ttl_ms}")


def _same_except_update_ts(a: meta_pb2.NodeStatus, b: meta_pb2.NodeStatus) -> bool:
    a2, b2 = meta_pb2.NodeStatus(), meta_pb2.NodeStatus()
    a2.CopyFrom(a)
    b2.CopyFrom(b)
    a2.update_ts = b2.update_ts = 0
    return a2 == b2


class Registry:
    """Node status on the leader. ``stamp`` allocates a timestamp; ``save`` persists a record;
    ``delete`` deletes one (:meth:`remove`)."""

    def __init__(
        self,
        stamp: Callable[[], Awaitable[int]],
        save: Callable[[meta_pb2.NodeStatus], Awaitable[None]],
        clock: Clock = wall_clock_ms,
        delete: Callable[[meta_pb2.NodeKind, str], Awaitable[None]] | None = None,
    ) -> None:
        self._stamp = stamp
        self._save = save
        self._delete = delete
        self._clock = clock
        self._entries: dict[NodeKey, _Entry] = {}
        self._bad: dict[NodeKey, BadEntry] = {}
        self._locks: dict[NodeKey, asyncio.Lock] = {}
        self._revision = 0
        self._changed = asyncio.Event()
        self._serving = False

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def serving(self) -> bool:
        return self._serving

    def start(self, loaded: LoadedNodes, revision: int) -> None:
        """Serve the records loaded from the store, from ``revision`` on."""
        self._entries = {
            (n.kind, n.node_id): _Entry(n, physical_ms(n.update_ts) + (n.ttl_ms or DEFAULT_TTL_MS))
            for n in loaded.nodes
        }
        self._bad = {(b.kind, b.node_id): b for b in loaded.errors}
        for bad in loaded.errors:
            log.warning("registry: skipped %s", bad.message)
        self._revision = revision
        self._serving = True
        self.refresh_liveness()
        self._wake()

    def stop(self) -> None:
        """Stop serving; long polls wake and fail with NotLeader."""
        self._serving = False
        self._entries.clear()
        self._bad.clear()
        self._wake()

    def _check_serving(self) -> None:
        if not self._serving:
            raise NotLeader("the registry is not serving (not the leader)")

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _bump(self) -> None:
        self._revision += 1
        self._wake()

    async def heartbeat(self, status: meta_pb2.NodeStatus) -> int:
        """Record ``status`` durably; returns its update_ts."""
        self._check_serving()
        check_status(status)
        key: NodeKey = (status.kind, status.node_id)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:  # one node's heartbeats are saved in the order they are stamped
            old = self._entries.get(key)
            if old is not None:
                self._check_owner(old, status)
            record = meta_pb2.NodeStatus()
            record.CopyFrom(status)
            record.ttl_ms = status.ttl_ms or DEFAULT_TTL_MS
            record.is_alive = True
            record.update_ts = await self._stamp()
            await self._save(record)
            self._check_serving()
            self._entries[key] = _Entry(record, self._clock() + record.ttl_ms)
            self._bad.pop(key, None)
            if old is None or not _same_except_update_ts(old.status, record):
                self._bump()
            return int(record.update_ts)

    def _check_owner(self, held: _Entry, status: meta_pb2.NodeStatus) -> None:
        """NodeIdTaken when ``held`` is alive at an address other than ``status``'s."""
        now = self._clock()
        if held.status.addr == status.addr or held.expires_ms <= now:
            return
        holder = held.status
        lease_ms = holder.ttl_ms or DEFAULT_TTL_MS
        silent_ms = max(0, now - (held.expires_ms - lease_ms))
        kind = KIND_NAMES.get(holder.kind, "node")
        raise NodeIdTaken(
            f"node id {holder.node_id!r} is held by the {kind} at {holder.addr} "
            f"(status {holder.status_addr or 'none'}), heard from {silent_ms / 1000:.1f}s ago, lease "
            f"{lease_ms / 1000:g}s; refused for {status.addr}: node ids must be unique (stop the other "
            f"node or give this one another node-id)"
        )

    async def remove(self, kind: meta_pb2.NodeKind, node_id: str) -> meta_pb2.NodeStatus:
        """Delete the record of an OFFLINE node that is not alive; returns it as it was.

        Any other node is refused (ProtocolError): a live node, or one others
        may still wait for, must not vanish from the registry.
        """
        self._check_serving()
        self.refresh_liveness()
        key: NodeKey = (kind, node_id)
        async with self._locks.setdefault(key, asyncio.Lock()):
            entry = self._entries.get(key)
            if entry is None:
                raise ProtocolError(f"no node {node_id!r} of kind {kind} in the registry")
            if entry.status.state != meta_pb2.OFFLINE or entry.status.is_alive:
                raise ProtocolError(f"node {node_id} is alive or not offline; only a gone node is removed")
            if self._delete is None:
                raise ProtocolError("this registry cannot delete records")
            await self._delete(kind, node_id)
            self._check_serving()
            del self._entries[key]
            self._bump()
            log.info("registry: node %s removed", node_id)
            return entry.status

    def refresh_liveness(self) -> bool:
        """Turn is_alive off for nodes whose TTL passed; True when any flipped."""
        now = self._clock()
        flipped = False
        for entry in self._entries.values():
            alive = entry.expires_ms > now
            if entry.status.is_alive != alive:
                entry.status.is_alive = alive
                flipped = True
                log.info("registry: node %s is %s", entry.status.node_id, "alive" if alive else "not alive")
        if flipped:
            self._bump()
        return flipped

    def list_nodes(
        self, kind: meta_pb2.NodeKind = meta_pb2.NODE_KIND_UNSPECIFIED
    ) -> meta_pb2.ListNodesResponse:
        self._check_serving()
        self.refresh_liveness()
        response = meta_pb2.ListNodesResponse(revision=self._revision)
        for (node_kind, _), entry in sorted(self._entries.items()):
            if kind in (meta_pb2.NODE_KIND_UNSPECIFIED, node_kind):
                response.nodes.append(entry.status)
        for (bad_kind, _), bad in sorted(self._bad.items()):
            if kind in (meta_pb2.NODE_KIND_UNSPECIFIED, bad_kind):
                response.errors.append(bad.message)
        return response

    async def wait_for_change(self, revision: int, timeout: float) -> None:
        """Return once the revision differs from ``revision``, or after ``timeout`` seconds."""
        self._check_serving()
        if revision != self._revision:
            return
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            return

    def snapshot(self) -> list[meta_pb2.NodeStatus]:
        """Every node as last seen (for metrics); empty when not serving."""
        return [entry.status for entry in self._entries.values()]

    async def run_ticker(self) -> None:
        """Notice expired TTLs without waiting for a reader (wakes long polls)."""
        while True:
            await asyncio.sleep(TICK_SECONDS)
            if self._serving:
                self.refresh_liveness()
