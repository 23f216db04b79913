"""Asyncio client of the meta service: timestamps, heartbeats, node lists.

The client is given every member's address. It remembers which member led
last and asks it first; a follower answers ``UNAVAILABLE`` with the leader's
address in the ``x-bridge-leader`` trailing metadata, and the client follows
it. Unreachable members and followers are retried with a short backoff until
``timeout`` seconds have passed, then :class:`MetaUnavailable` names every
address tried and the last error.

gRPC errors are translated into :mod:`bridge.errors` here and nowhere else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar, cast

import grpc

from bridge.errors import (
    BridgeError,
    ClusterMismatch,
    MetaError,
    MetaUnavailable,
    NodeIdTaken,
    NotLeader,
    ProtocolError,
)
from bridge.grpcutil import KeepaliveConfig, SecurityConfig, aio_channel
from bridge.proto import meta_pb2, meta_pb2_grpc
from bridge.retry import Backoff
from bridge.tso import MAX_LOGICAL

log = logging.getLogger(__name__)

LEADER_METADATA_KEY = "x-bridge-leader"
DEFAULT_ADDR = "127.0.0.1:8248"  # where `binlog-bridge meta` listens unless told otherwise

_INITIAL_BACKOFF = 0.05
_MAX_BACKOFF = 0.5

R = TypeVar("R")


def split_addrs(addrs: str | Sequence[str]) -> list[str]:
    """``"h:p,h:p"`` or a list of such strings -> unique ``host:port`` strings in order."""
    parts = addrs.split(",") if isinstance(addrs, str) else [p for a in addrs for p in a.split(",")]
    out: list[str] = []
    for part in (p.strip() for p in parts):
        if part and part not in out:
            out.append(part)
    return out


def leader_hint(exc: grpc.aio.AioRpcError) -> str | None:
    """The leader address a follower named, "" if it knows none, None if not a follower's answer."""
    for key, value in exc.trailing_metadata() or ():
        if key == LEADER_METADATA_KEY:
            return str(value)
    return None


def translate(exc: grpc.aio.AioRpcError, addr: str) -> BridgeError:
    """The bridge error for a failed call to ``addr``."""
    code = exc.code()
    details = exc.details() or code.name
    hint = leader_hint(exc)
    if code == grpc.StatusCode.UNAVAILABLE and hint is not None:
        return NotLeader(f"{addr} is not the meta leader", leader_addr=hint)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return MetaUnavailable(f"{addr}: {details}")
    if code == grpc.StatusCode.ALREADY_EXISTS:
        return NodeIdTaken(details)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return ClusterMismatch(details)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return ProtocolError(details)
    return MetaError(f"{addr}: {code.name}: {details}")


class MetaClient:
    """Talks to the meta service's leader, wherever it is.

    ``addrs`` lists members as ``"host:port,host:port"`` or a sequence.
    ``timeout`` bounds each method, leader search and retries included.
    Safe for many concurrent calls from one event loop.
    """

    def __init__(
        self,
        addrs: str | Sequence[str],
        security: SecurityConfig | None = None,
        timeout: float = 5.0,
        token: str | None = None,
        keepalive: KeepaliveConfig | None = None,
    ) -> None:
        """``token``: the cluster token to present (default: this process's, if any);
        ``keepalive``: of its channels (default: this process's, bridge.grpcutil)."""
        self._token = token
        self._keepalive = keepalive
        self._addrs = split_addrs(addrs)
        if not self._addrs:
            raise ValueError("MetaClient needs at least one meta address")
        self._security = security
        self._timeout = timeout
        self._stubs: dict[str, tuple[grpc.aio.Channel, Any]] = {}
        self._leader: str | None = None
        self._cluster_id: int | None = None

    @property
    def addrs(self) -> list[str]:
        return list(self._addrs)

    async def __aenter__(self) -> MetaClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        stubs, self._stubs = self._stubs, {}
        for channel, _ in stubs.values():
            await channel.close()

    async def get_timestamps(self, count: int = 1) -> int:
        """Allocate ``count`` timestamps; returns the first, the rest follow consecutively."""
        if not 1 <= count <= MAX_LOGICAL:
            raise ValueError(f"count must be 1..{MAX_LOGICAL}, got {count}")
        request = meta_pb2.TsoRequest(count=count)
        response = await self._call(lambda stub, t: stub.GetTimestamps(request, timeout=t))
        tso = cast(meta_pb2.TsoResponse, response)
        if tso.count != count or tso.first <= 0:
            raise ProtocolError(f"meta answered {tso.count} timestamps from {tso.first}, asked for {count}")
        return int(tso.first)

    async def get_timestamp(self) -> int:
        return await self.get_timestamps(1)

    async def heartbeat(self, status: meta_pb2.NodeStatus, cluster_id: int = 0) -> int:
        """Register or refresh ``status``; returns the update_ts the service stamped on it."""
        request = meta_pb2.HeartbeatRequest(cluster_id=cluster_id, status=status)
        response = await self._call(lambda stub, t: stub.Heartbeat(request, timeout=t))
        return int(cast(meta_pb2.HeartbeatResponse, response).update_ts)

    async def list_nodes(
        self,
        kind: meta_pb2.NodeKind = meta_pb2.NODE_KIND_UNSPECIFIED,
        wait_revision: int = 0,
        wait_ms: int = 0,
    ) -> meta_pb2.ListNodesResponse:
        """The registered nodes of ``kind`` (all kinds by default).

        With ``wait_revision`` = the revision of an earlier answer, the call
        returns when the registry changes or after ``wait_ms``, whichever is first.
        """
        request = meta_pb2.ListNodesRequest(kind=kind, wait_revision=wait_revision, wait_ms=wait_ms)
        response = await self._call(
            lambda stub, t: stub.ListNodes(request, timeout=t),
            extra_time=wait_ms / 1000 if wait_revision else 0,
        )
        return cast(meta_pb2.ListNodesResponse, response)

    async def remove_node(self, kind: meta_pb2.NodeKind, node_id: str) -> meta_pb2.NodeStatus:
        """Delete the record of an OFFLINE node that is not alive; returns it as it was.

        The leader refuses any other node, and an unknown one, with
        :class:`~bridge.errors.ProtocolError`.
        """
        request = meta_pb2.RemoveNodeRequest(cluster_id=await self.cluster_id(), kind=kind, node_id=node_id)
        response = await self._call(lambda stub, t: stub.RemoveNode(request, timeout=t))
        return cast(meta_pb2.RemoveNodeResponse, response).removed

    async def status(self) -> meta_pb2.StatusResponse:
        """The status of the first member that answers (leader or not)."""
        request = meta_pb2.StatusRequest()
        # Any member answers GetStatus, so an answer says nothing about who leads.
        response = await self._call(lambda stub, t: stub.GetStatus(request, timeout=t), leader_only=False)
        return cast(meta_pb2.StatusResponse, response)

    async def cluster_id(self) -> int:
        """The cluster id (asked once, then cached)."""
        if self._cluster_id is None:
            self._cluster_id = int((await self.status()).cluster_id)
        return self._cluster_id

    def _stub(self, addr: str) -> Any:
        entry = self._stubs.get(addr)
        if entry is None:
            channel = aio_channel(addr, self._security, token=self._token, keepalive=self._keepalive)
            entry = (channel, meta_pb2_grpc.MetaStub(channel))  # type: ignore[no-untyped-call]
            self._stubs[addr] = entry
        return entry[1]

    def _candidates(self) -> list[str]:
        first = [self._leader] if self._leader else []
        return first + [a for a in self._addrs if a != self._leader]

    async def _call(
        self, invoke: Callable[[Any, float], Awaitable[R]], extra_time: float = 0.0, leader_only: bool = True
    ) -> R:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        per_attempt = max(self._timeout / 3, 0.5)
        backoff = Backoff(_INITIAL_BACKOFF, _MAX_BACKOFF)
        tried: list[str] = []
        last_error = "no attempt"
        while True:
            queue = self._candidates()
            asked: set[str] = set()
            while queue:
                addr = queue.pop(0)
                asked.add(addr)
                if addr not in tried:
                    tried.append(addr)
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    result = await invoke(self._stub(addr), min(remaining, per_attempt) + extra_time)
                except grpc.aio.AioRpcError as exc:
                    error = translate(exc, addr)
                    if not error.retriable:
                        raise error from exc
                    last_error = str(error)
                    self._follow(addr, error, queue, asked)
                    continue
                if leader_only:
                    self._leader = addr
                return result
            delay = backoff.next_delay()
            if loop.time() + delay >= deadline:
                raise MetaUnavailable(
                    f"no meta leader answered within {self._timeout:g}s "
                    f"(tried {', '.join(tried)}); last error: {last_error}"
                )
            await asyncio.sleep(delay)

    def _follow(self, addr: str, error: BaseException, queue: list[str], asked: set[str]) -> None:
        """After ``addr`` failed: ask the leader it named next (once per round), or forget it as leader."""
        if self._leader == addr:
            self._leader = None
        if isinstance(error, NotLeader) and error.leader_addr and error.leader_addr not in asked:
            log.debug("meta %s is a follower; leader is %s", addr, error.leader_addr)
            self._leader = error.leader_addr
            if error.leader_addr in queue:
                queue.remove(error.leader_addr)
            queue.insert(0, error.leader_addr)
