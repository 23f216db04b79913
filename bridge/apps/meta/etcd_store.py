"""The etcd backend: members share a key prefix and elect a leader by lease.

Keys (``P`` = ``etcd-prefix``, default ``/binlog-bridge/v1``)::

    P/cluster-id          decimal; created once by the first member (txn: only if absent)
    P/meta/leader         {"member", "addr", "session"} on the leader's lease
    P/meta/tso            decimal physical ms: the saved TSO limit
    P/pumps/<node id>     node records, JSON in the original's shape (see bridge.apps.meta.store)
    P/drainers/<node id>

**Election.** A member becomes leader by creating ``P/meta/leader`` only if it
is absent, attached to a lease of ``election-ttl``. The leader refreshes the
lease every third of the TTL and checks that the key still holds its value;
when a refresh fails or the key vanished or changed it steps down at once.
Followers poll the key and campaign when it is gone.

**Endpoints.** The store talks to one etcd member at a time, the first of
``urls`` that answers at :meth:`EtcdStore.open`. A call that fails or times out
there moves the store to the next URL (round robin) for the calls after it: a
member that was partitioned away, killed or lost its quorum does not hold the
meta service while the other members serve. The failed call still raises
:class:`StoreError`, so a leader whose lease refresh failed steps down and
campaigns again through the next member.

**Fencing.** Every write a leader makes (the TSO limit, node records) is a
transaction that compares ``P/meta/leader`` with this member's value, which
carries a per-process session id: a deposed leader can never move the TSO
window or overwrite the registry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
from collections.abc import Awaitable
from typing import Any, TypeVar

import aetcd
import grpc
from aetcd import rpc as etcd_rpc
from aetcd import watcher as etcd_watcher

from bridge.apps.meta.store import KIND_DIRS, BadEntry, LoadedNodes, node_from_json, node_to_json
from bridge.errors import NotLeader, ProtocolError, StoreError, StoreUnavailable
from bridge.proto import meta_pb2

log = logging.getLogger(__name__)

T = TypeVar("T")

_ETCD_ERRORS = (aetcd.ClientError, grpc.aio.AioRpcError, TimeoutError, OSError)


class _TlsEtcdClient(aetcd.Client):  # type: ignore[misc]
    """aetcd 1.0 dials plaintext only: this client opens the same service stubs
    over a TLS channel. Everything else (calls, errors, watches) is aetcd's."""

    def __init__(self, host: str, port: int, timeout: float, tls: grpc.ChannelCredentials) -> None:
        super().__init__(host=host, port=port, timeout=timeout)
        self._tls = tls

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        self.channel = grpc.aio.secure_channel(f"{self._host}:{self._port}", self._tls)
        self.kvstub = etcd_rpc.KVStub(self.channel)
        self.clusterstub = etcd_rpc.ClusterStub(self.channel)
        self.leasestub = etcd_rpc.LeaseStub(self.channel)
        self.maintenancestub = etcd_rpc.MaintenanceStub(self.channel)
        self._watcher = etcd_watcher.Watcher(etcd_rpc.WatchStub(self.channel), timeout=self._timeout)
        self._connected.set()


def _etcd_client(host: str, port: int, timeout: float, tls: grpc.ChannelCredentials | None) -> Any:
    if tls is None:
        return aetcd.Client(host=host, port=port, timeout=timeout)
    return _TlsEtcdClient(host, port, timeout, tls)


class EtcdStore:
    """Meta state under ``prefix`` in the etcd at one of ``urls`` (``(host, port)`` pairs)."""

    backend = "etcd"

    def __init__(
        self,
        urls: list[tuple[str, int]],
        prefix: str,
        member: str,
        advertise_addr: str,
        ttl_seconds: float = 3.0,
        rpc_timeout: float = 2.0,
        tls: grpc.ChannelCredentials | None = None,
    ) -> None:
        """``tls``: credentials for https:// endpoints (:meth:`MetaConfig.etcd_credentials`); None = http."""
        self._urls = urls
        self._tls = tls
        self._scheme = "https" if tls is not None else "http"
        self._prefix = prefix
        self._ttl = max(1, math.ceil(ttl_seconds))
        self._rpc_timeout = rpc_timeout
        self._value = json.dumps(
            {"member": member, "addr": advertise_addr, "session": secrets.token_hex(8)}, sort_keys=True
        ).encode()
        self._advertise = advertise_addr
        self._client: Any = None
        self._url = ""
        self._index = 0  # of the URL in use
        self._lease: Any = None
        self._keepalive: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self._leading = False
        self._leader_addr = ""
        self._etcd_ok = True
        self._opened = False
        self._retiring: dict[asyncio.Task[None], Any] = {}  # old channels, closed a little later

    @property
    def url(self) -> str:
        return self._url

    def key(self, *parts: str) -> bytes:
        return "/".join((self._prefix, *parts)).encode()

    async def _call(self, what: str, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        """Await an etcd call; failures become StoreError naming the URL, and move the
        store to the next URL (:meth:`_next_endpoint`) once it is open."""
        client, url = self._client, self._url
        try:
            return await asyncio.wait_for(awaitable, timeout or self._rpc_timeout + 1)
        except _ETCD_ERRORS as exc:
            detail = str(exc) or type(exc).__name__
            if self._opened and client is self._client:  # not already moved by a concurrent call
                await self._next_endpoint()
            raise StoreError(f"etcd {url}: {what} failed: {detail}") from exc

    async def _next_endpoint(self) -> None:
        """Switch to the next URL of ``urls``. The old channel is closed once the calls still
        in flight on it have timed out (closing it at once would cancel them, and a cancelled
        call is not an error the callers expect); they do not move the store again."""
        if len(self._urls) < 2:
            return
        old = self._client
        self._index = (self._index + 1) % len(self._urls)
        host, port = self._urls[self._index]
        self._url = f"{self._scheme}://{host}:{port}"
        self._client = _etcd_client(host, port, self._rpc_timeout, self._tls)
        log.warning("etcd: the next calls go to %s", self._url)
        task = asyncio.create_task(self._retire(old), name="etcd-close-old-channel")
        self._retiring[task] = old

    async def _retire(self, client: Any) -> None:
        await asyncio.sleep(self._rpc_timeout + 2)
        try:
            await client.close()
        except _ETCD_ERRORS as exc:  # the channel is gone either way
            log.debug("closing the old etcd channel: %s", exc)
        finally:
            self._retiring.pop(asyncio.current_task(), None)  # type: ignore[arg-type]

    async def open(self) -> int:
        errors: list[str] = []
        for index, (host, port) in enumerate(self._urls):
            self._index, self._url = index, f"{self._scheme}://{host}:{port}"
            client = _etcd_client(host, port, self._rpc_timeout, self._tls)
            self._client = client
            try:
                await self._call("reading the cluster id", client.get(self.key("cluster-id")))
            except StoreError as exc:
                errors.append(str(exc))
                await client.close()
                continue
            cluster_id = await self._cluster_id()
            self._opened = True
            return cluster_id
        self._client = None
        urls = ", ".join(f"{self._scheme}://{h}:{p}" for h, p in self._urls)
        raise StoreUnavailable(f"cannot reach etcd at {urls}: {'; '.join(errors)}")

    async def _cluster_id(self) -> int:
        key = self.key("cluster-id")
        txn = self._client.transactions
        candidate = secrets.randbits(63) or 1
        await self._call(
            "creating the cluster id",
            self._client.transaction(
                compare=[txn.version(key) == 0], success=[txn.put(key, str(candidate).encode())], failure=[]
            ),
        )
        got = await self._call("reading the cluster id", self._client.get(key))
        text = got.value.decode(errors="replace") if got is not None else ""
        if not text.isdigit() or int(text) == 0:
            raise StoreError(f"etcd {self._url}: key {key.decode()} holds {text[:40]!r}, not a cluster id")
        return int(text)

    async def close(self) -> None:
        if self._client is None:
            return
        try:
            await self.resign()
        except StoreError as exc:
            log.warning("giving up leadership on close: %s", exc)
        await self._client.close()
        self._client = None
        self._opened = False
        for task, client in list(self._retiring.items()):
            task.cancel()
            await client.close()
        self._retiring.clear()

    # -- leadership ---------------------------------------------------------------

    def leader_addr(self) -> str:
        return self._advertise if self._leading else self._leader_addr

    def _note_leader(self, raw: bytes | None) -> None:
        try:
            self._leader_addr = str(json.loads(raw)["addr"]) if raw else ""
        except (ValueError, KeyError, TypeError):
            self._leader_addr = ""

    async def try_acquire(self) -> bool:
        if self._leading:
            return True
        try:
            acquired = await self._campaign()
        except StoreError as exc:
            if self._etcd_ok:
                log.warning("cannot campaign for leadership: %s", exc)
            self._etcd_ok = False
            return False
        if not self._etcd_ok:
            log.info("etcd %s answers again", self._url)
        self._etcd_ok = True
        return acquired

    async def _campaign(self) -> bool:
        key = self.key("meta", "leader")
        current = await self._call("reading the leader key", self._client.get(key))
        if current is not None and current.value == self._value:
            # An earlier attempt won, but its answer was lost: lead on that lease.
            self._start_leading(aetcd.Lease(current.lease, self._ttl, self._client))
            return True
        if current is not None:
            self._note_leader(current.value)
            return False
        lease = await self._call("granting a lease", self._client.lease(self._ttl))
        txn = self._client.transactions
        won, responses = await self._call(
            "creating the leader key",
            self._client.transaction(
                compare=[txn.version(key) == 0],
                success=[txn.put(key, self._value, lease)],
                failure=[txn.get(key)],
            ),
        )
        if not won:
            await self._revoke(lease)
            self._note_leader(responses[0][0][0] if responses and responses[0] else None)
            return False
        self._start_leading(lease)
        return True

    def _start_leading(self, lease: Any) -> None:
        self._lease, self._leading, self._lost = lease, True, asyncio.Event()
        self._keepalive = asyncio.create_task(self._keep_alive(lease), name="meta-lease-keepalive")

    async def leadership_lost(self) -> None:
        await self._lost.wait()

    def _lose(self, reason: str, expected: bool = False) -> None:
        if not self._leading:
            return
        log.log(logging.INFO if expected else logging.WARNING, "leadership ends: %s", reason)
        self._leading = False
        self._leader_addr = ""
        self._lost.set()
        keepalive, self._keepalive = self._keepalive, None
        if keepalive is not None and keepalive is not asyncio.current_task():
            keepalive.cancel()
        lease, self._lease = self._lease, None
        if lease is not None:
            task = asyncio.create_task(self._revoke(lease), name="meta-lease-revoke")
            task.add_done_callback(lambda t: None if t.cancelled() else t.exception())

    async def _keep_alive(self, lease: Any) -> None:
        # Each round must finish well inside the TTL, or the lease could lapse
        # while this member still believes it leads.
        interval = max(lease.ttl or self._ttl, 1) / 3
        key = self.key("meta", "leader")
        while self._leading:
            await asyncio.sleep(interval)
            try:
                reply = await self._call(
                    "refreshing the lease", self._client.refresh_lease(lease.id), interval
                )
                current = await self._call("reading the leader key", self._client.get(key), interval)
            except StoreError as exc:
                self._lose(str(exc))
                return
            if reply is None or reply.TTL <= 0:
                self._lose("the leader lease expired")
            elif current is None or current.value != self._value:
                self._lose("the leader key was deleted or taken over")

    async def _revoke(self, lease: Any) -> None:
        try:
            await self._call("revoking the lease", self._client.revoke_lease(lease.id))
        except StoreError as exc:
            log.debug("lease revoke: %s", exc)

    async def resign(self) -> None:
        if not self._leading:
            return
        key = self.key("meta", "leader")
        txn = self._client.transactions
        lease, self._lease = self._lease, None
        self._lose("resigned", expected=True)
        await self._call(
            "deleting the leader key",
            self._client.transaction(
                compare=[txn.value(key) == self._value], success=[txn.delete(key)], failure=[]
            ),
        )
        if lease is not None:
            await self._revoke(lease)

    async def _guarded_put(self, what: str, key: bytes, value: bytes) -> None:
        """Put ``key`` only while this member still holds the leader key."""
        await self._guarded(what, self._client.transactions.put(key, value))

    async def _guarded(self, what: str, operation: Any) -> None:
        """Run one etcd operation (a put, a delete) only while this member still holds the leader key."""
        if not self._leading:
            raise NotLeader(f"{what}: this member is not the leader", self._leader_addr)
        leader_key = self.key("meta", "leader")
        txn = self._client.transactions
        won, _ = await self._call(
            what,
            self._client.transaction(
                compare=[txn.value(leader_key) == self._value], success=[operation], failure=[]
            ),
        )
        if not won:
            self._lose(f"{what}: the leader key no longer holds this member's value")
            raise NotLeader(f"{what}: this member was deposed", self._leader_addr)

    # -- data ---------------------------------------------------------------------

    async def load_tso_limit(self) -> int:
        key = self.key("meta", "tso")
        got = await self._call("reading the TSO limit", self._client.get(key))
        if got is None:
            return 0
        text = got.value.decode(errors="replace")
        if not text.isdigit():
            raise StoreError(f"etcd {self._url}: key {key.decode()} holds {text[:40]!r}, not a TSO limit")
        return int(text)

    async def save_tso_limit(self, limit_ms: int) -> None:
        await self._guarded_put("saving the TSO limit", self.key("meta", "tso"), str(limit_ms).encode())

    async def load_nodes(self) -> LoadedNodes:
        loaded = LoadedNodes()
        for kind, dirname in KIND_DIRS.items():
            dir_key = self.key(dirname) + b"/"
            result = await self._call(f"reading {dir_key.decode()}", self._client.get_prefix(dir_key))
            for kv in result.kvs:
                key = bytes(kv.key)
                node_id = key[len(dir_key) :].decode(errors="replace")
                try:
                    node = node_from_json(kind, bytes(kv.value))
                    if node.node_id != node_id:
                        raise ProtocolError(f"nodeId {node.node_id!r} does not match the key")
                except ProtocolError as exc:
                    message = f"etcd key {key.decode(errors='replace')}: unreadable node record: {exc}"
                    loaded.errors.append(BadEntry(kind, node_id, message))
                    continue
                loaded.nodes.append(node)
        return loaded

    async def save_node(self, status: meta_pb2.NodeStatus) -> None:
        key = self.key(KIND_DIRS[status.kind], status.node_id)
        await self._guarded_put(f"saving node {status.node_id}", key, node_to_json(status))

    async def delete_node(self, kind: meta_pb2.NodeKind, node_id: str) -> None:
        key = self.key(KIND_DIRS[kind], node_id)
        await self._guarded(f"deleting node {node_id}", self._client.transactions.delete(key))
