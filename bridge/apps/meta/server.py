"""The Meta gRPC service and the server process around one member.

Only the leader answers GetTimestamps, Heartbeat and ListNodes. A follower
fails them with ``UNAVAILABLE`` and the leader's advertise address (empty
when unknown) in the ``x-bridge-leader`` trailing metadata; GetStatus answers
everywhere. Errors map to status codes at this one boundary:

- :class:`NotLeader` → ``UNAVAILABLE`` + ``x-bridge-leader``
- :class:`ClusterMismatch` → ``FAILED_PRECONDITION``
- :class:`ProtocolError` → ``INVALID_ARGUMENT``
- other :class:`MetaError` (a failing store) → ``UNAVAILABLE`` without leader metadata
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

import grpc

from bridge.apps.meta.config import MetaConfig
from bridge.apps.meta.etcd_store import EtcdStore
from bridge.apps.meta.local_store import LocalStore
from bridge.apps.meta.member import MetaMember
from bridge.apps.meta.metrics import member_registry, node_labels
from bridge.apps.meta.store import MetaStore
from bridge.auth import resolve_token, use_cluster_token
from bridge.errors import BridgeError, ClusterMismatch, NodeIdTaken, NotLeader, ProtocolError
from bridge.grpcutil import add_port, channel_options, server_interceptors, use_keepalive
from bridge.meta.client import LEADER_METADATA_KEY
from bridge.proto import meta_pb2, meta_pb2_grpc
from bridge.status_http import StatusServer, server_ssl_context
from bridge.tso import MAX_LOGICAL

log = logging.getLogger(__name__)

MAX_WAIT_MS = 60_000  # longest ListNodes long poll
MAX_DETAILS = 1024  # characters of an error message sent back (it travels in a metadata header)


def _details(exc: BaseException) -> str:
    """The error message for the caller, cut short: one quoting a huge field would
    not fit gRPC's metadata limit and reach the caller as RESOURCE_EXHAUSTED."""
    text = str(exc)
    return text if len(text) <= MAX_DETAILS else f"{text[:MAX_DETAILS]}... (cut at {MAX_DETAILS} characters)"


class MetaService(meta_pb2_grpc.MetaServicer):
    """gRPC methods of one member."""

    def __init__(self, member: MetaMember) -> None:
        self._member = member

    async def _abort(self, context: Any, exc: BridgeError) -> NoReturn:
        if isinstance(exc, NotLeader):
            leader = self._member.leader_addr() if not self._member.is_leader else ""
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"not the meta leader; leader is {leader or 'unknown'}",
                trailing_metadata=((LEADER_METADATA_KEY, leader),),
            )
        if isinstance(exc, NodeIdTaken):
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, _details(exc))
        if isinstance(exc, ClusterMismatch):
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, _details(exc))
        if isinstance(exc, ProtocolError):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _details(exc))
        log.warning("meta request failed: %s", exc)
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"meta store failed: {exc}")
        raise AssertionError("context.abort returned")  # grpc raises; keeps NoReturn honest

    async def GetTimestamps(self, request: meta_pb2.TsoRequest, context: Any) -> meta_pb2.TsoResponse:
        count = request.count or 1
        try:
            if count > MAX_LOGICAL:
                raise ProtocolError(f"count must be 1..{MAX_LOGICAL}, got {count}")
            first = await self._member.oracle.allocate(count)
        except BridgeError as exc:
            await self._abort(context, exc)
        return meta_pb2.TsoResponse(first=first, count=count)

    def _check_leader_of(self, cluster_id: int, node_id: str) -> None:
        """NotLeader unless this member leads; ClusterMismatch for another ``cluster_id`` (0: unchecked)."""
        member = self._member
        if not member.is_leader:
            raise NotLeader("not the leader")
        if cluster_id and cluster_id != member.cluster_id:
            raise ClusterMismatch(
                f"node {node_id!r} sent cluster id {cluster_id}, "
                f"but this meta service serves cluster {member.cluster_id}"
            )

    async def Heartbeat(self, request: meta_pb2.HeartbeatRequest, context: Any) -> meta_pb2.HeartbeatResponse:
        try:
            self._check_leader_of(request.cluster_id, request.status.node_id)
            update_ts = await self._member.registry.heartbeat(request.status)
        except BridgeError as exc:
            await self._abort(context, exc)
        return meta_pb2.HeartbeatResponse(update_ts=update_ts)

    async def RemoveNode(
        self, request: meta_pb2.RemoveNodeRequest, context: Any
    ) -> meta_pb2.RemoveNodeResponse:
        try:
            self._check_leader_of(request.cluster_id, request.node_id)
            removed = await self._member.registry.remove(request.kind, request.node_id)
        except BridgeError as exc:
            await self._abort(context, exc)
        return meta_pb2.RemoveNodeResponse(removed=removed)

    async def ListNodes(self, request: meta_pb2.ListNodesRequest, context: Any) -> meta_pb2.ListNodesResponse:
        registry = self._member.registry
        try:
            if request.kind not in (meta_pb2.NODE_KIND_UNSPECIFIED, meta_pb2.PUMP, meta_pb2.DRAINER):
                raise ProtocolError(f"unknown node kind {request.kind}")
            if request.wait_revision and request.wait_ms:
                wait_s = min(request.wait_ms, MAX_WAIT_MS) / 1000
                await registry.wait_for_change(request.wait_revision, wait_s)
            return registry.list_nodes(request.kind)
        except BridgeError as exc:
            await self._abort(context, exc)

    async def GetStatus(self, request: meta_pb2.StatusRequest, context: Any) -> meta_pb2.StatusResponse:
        member = self._member
        return meta_pb2.StatusResponse(
            cluster_id=member.cluster_id,
            member_id=member.member_id,
            is_leader=member.is_leader,
            leader_addr=member.leader_addr(),
            backend=member.backend,
        )


def make_store(config: MetaConfig, member_id: str, advertise: str) -> MetaStore:
    if config.etcd:
        return EtcdStore(
            config.etcd_urls(),
            config.etcd_prefix,
            member_id,
            advertise,
            config.election_ttl,
            tls=config.etcd_credentials(),
        )
    return LocalStore(config.data_dir, advertise)


class MetaServer:
    """A meta member behind its gRPC server and, on ``status-addr``, the HTTP status
    endpoint every node serves (:mod:`bridge.status_http`: ``/status``, ``/metrics``)."""

    def __init__(self, config: MetaConfig) -> None:
        self.config = config
        self.member: MetaMember | None = None
        self.advertise = ""
        self._server: Any = None
        self._http: StatusServer | None = None

    async def start(self) -> None:
        """Bind, open the store, make a first leadership attempt, then serve."""
        config = self.config
        use_keepalive(config.keepalive)
        # No SO_REUSEPORT: a second meta on the same address must fail, not share it.
        server = grpc.aio.server(
            options=[*channel_options(keepalive=config.keepalive), ("grpc.so_reuseport", 0)],
            interceptors=[*use_cluster_token(config.cluster_token), *server_interceptors(config.security)],
        )
        port = add_port(server, config.addr, config.security)
        self.advertise = config.advertise(port)
        member = MetaMember(
            make_store(config, config.member_name(port), self.advertise),
            config.member_name(port),
            save_interval_ms=max(1, round(config.tso.save_interval * 1000)),
        )
        try:
            await member.start()
        except BaseException:
            await server.stop(None)
            raise
        meta_pb2_grpc.add_MetaServicer_to_server(MetaService(member), server)  # type: ignore[no-untyped-call]
        await server.start()
        self._server, self.member = server, member
        if config.status_addr:
            # Same TLS as the gRPC port (client certificates when ssl-ca is set); the cluster
            # token guards what is not GET or HEAD, of which the meta endpoint has none.
            self._http = StatusServer(
                "meta",
                self.status,
                *config.status_listen(),
                ssl_context=server_ssl_context(config.security),
                token=resolve_token(config.cluster_token),
                registry=member_registry(member),
            )
            await self._http.start()

    def status(self) -> dict[str, object]:
        """``GET /status``: this member, its leadership, the TSO window and (on the leader) the
        registered nodes."""
        member = self.member
        assert member is not None
        oracle, registry = member.oracle, member.registry
        return {
            "member_id": member.member_id,
            "addr": self.advertise,
            "backend": member.backend,
            "cluster_id": member.cluster_id,
            "is_leader": member.is_leader,
            "leader_addr": member.leader_addr(),
            "tso": {"serving": oracle.serving, "allocated": oracle.allocated, "limit_ms": oracle.limit},
            "registry": {
                "serving": registry.serving,
                "revision": registry.revision,
                "nodes": [
                    {"node_id": node_id, "kind": kind, "state": state, "alive": alive}
                    for node_id, kind, state, alive in node_labels(member)
                ],
            },
        }

    def ready_line(self) -> str:
        member = self.member
        assert member is not None
        return (
            f"meta ready: addr={self.advertise} backend={member.backend} "
            f"cluster_id={member.cluster_id} leader={'yes' if member.is_leader else 'no'}"
        )

    async def stop(self, grace: float = 1.0) -> None:
        if self._http is not None:
            await self._http.stop()
            self._http = None
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        if self.member is not None:
            await self.member.stop()
            self.member = None
