"""Joining the cluster: every online drainer acknowledges before the pump takes writes.

A drainer merges the pumps it knows of and moves its position forward. If a
pump started taking writes before a drainer knew of it, the drainer could
move past the first binlogs the new pump stores and never emit them (the
seeds' Pump3 example, where binlog 8 is lost). So a pump that was not online
calls ``binlog.Cistern/Notify`` on every drainer that is ONLINE and alive in
the registry, and only when all of them have answered does it go online.

Contract for the drainer's Notify handler: re-read the registry, add every
pump that is not OFFLINE (the joining pump is registered as PAUSED while it
waits) to the merge, then answer. An error or no answer means "not yet".
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

import grpc

from bridge.errors import BridgeError, MetaUnavailable
from bridge.grpcutil import SecurityConfig, aio_channel
from bridge.proto import drainer_pb2, drainer_pb2_grpc, meta_pb2
from pump import metrics

log = logging.getLogger(__name__)


class JoinFailed(BridgeError):
    """Some drainers did not acknowledge Notify within join-timeout; the message names them."""


class RegistryReader(Protocol):
    """The part of :class:`bridge.meta.client.MetaClient` that joining needs."""

    async def list_nodes(
        self, kind: meta_pb2.NodeKind = ..., wait_revision: int = ..., wait_ms: int = ...
    ) -> meta_pb2.ListNodesResponse: ...


class DrainerNotifier:
    """Calls Notify on one drainer; ``call_timeout`` bounds each call."""

    def __init__(self, security: SecurityConfig | None = None, call_timeout: float = 5.0) -> None:
        self._security = security
        self.call_timeout = call_timeout

    async def notify(self, addr: str, timeout: float | None = None) -> str:
        """Notify the drainer at ``addr``; returns "" when it acknowledged, else why not."""
        limit = self.call_timeout if timeout is None else timeout
        channel = aio_channel(addr, self._security)
        try:
            stub = drainer_pb2_grpc.CisternStub(channel)  # type: ignore[no-untyped-call]
            await stub.Notify(drainer_pb2.NotifyReq(), timeout=limit)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return f"no answer within {limit:g}s"
            return f"{exc.code().name}: {exc.details() or 'no details'}"
        finally:
            await channel.close()
        return ""


def online_drainers(response: meta_pb2.ListNodesResponse) -> list[meta_pb2.NodeStatus]:
    """The drainers that must acknowledge: ONLINE and alive."""
    return [
        n for n in response.nodes if n.kind == meta_pb2.DRAINER and n.state == meta_pb2.ONLINE and n.is_alive
    ]


async def notify_drainers(
    registry: RegistryReader, notifier: DrainerNotifier, timeout: float, retry_interval: float = 0.5
) -> list[str]:
    """Notify every online drainer until all have acknowledged; returns their node ids.

    Each round re-reads the registry: a drainer that went away is no longer
    waited for, one that came online is notified too. Raises
    :class:`JoinFailed` naming each drainer still missing, and why, once
    ``timeout`` seconds have passed.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    acknowledged: set[tuple[str, str]] = set()
    while True:
        failures: dict[str, str] = {}
        drainers: list[meta_pb2.NodeStatus] = []
        try:
            drainers = online_drainers(await registry.list_nodes(meta_pb2.DRAINER))
        except MetaUnavailable as exc:
            failures["meta service"] = str(exc)
        pending = [d for d in drainers if (d.node_id, d.addr) not in acknowledged]
        remaining = max(deadline - loop.time(), 0.05)
        answers = await asyncio.gather(
            *(notifier.notify(d.addr, min(notifier.call_timeout, remaining)) for d in pending)
        )
        for drainer, error in zip(pending, answers, strict=True):
            if error:
                failures[f"drainer {drainer.node_id} at {drainer.addr}"] = error
            else:
                acknowledged.add((drainer.node_id, drainer.addr))
                log.info("join: drainer %s at %s acknowledged Notify", drainer.node_id, drainer.addr)
        if not failures:
            return sorted(d.node_id for d in drainers)
        metrics.ERRORS.labels("notify").inc()
        missing = "; ".join(f"{who}: {why}" for who, why in failures.items())
        if loop.time() + retry_interval >= deadline:
            raise JoinFailed(f"not acknowledged within join-timeout = {timeout:g}s: {missing}")
        log.warning("join: waiting to go online until Notify is acknowledged by %s", missing)
        await asyncio.sleep(retry_interval)
