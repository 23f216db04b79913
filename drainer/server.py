"""The drainer in the cluster: its Notify service and its registry entry.

- :class:`CisternService` serves ``binlog.Cistern/Notify``: a joining pump
  calls it and goes online only once it is answered. The answer comes after
  :meth:`drainer.collector.Collector.notify` merged every pump the registry
  lists as not OFFLINE; when the registry cannot be read the call fails
  ``UNAVAILABLE`` and the pump asks again.
- :class:`DrainerNode` registers the drainer as a DRAINER node and
  heartbeats every ``heartbeat-interval`` with ``max_commit_ts`` = its
  checkpoint (what a closing pump waits for). ONLINE while running; PAUSED
  once stopped, so a closing pump still waits for it (it will need the
  pump's last binlogs when it resumes) while a joining pump does not (it
  notifies only ONLINE, alive drainers); FAILED instead of PAUSED when it
  halted on an error, with the error text and its time (``ctl drainers``
  shows them; pumps wait for it as for a PAUSED one); OFFLINE once closed
  for good (``POST /state/close``), when no pump waits for it any more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from bridge.errors import MetaError
from bridge.meta.register import register_owned
from bridge.proto import drainer_pb2, drainer_pb2_grpc, meta_pb2
from drainer import metrics

log = logging.getLogger(__name__)

STOP_ATTEMPTS = 3  # heartbeats tried when registering the final state at stop


class Notified(Protocol):
    async def notify(self) -> None: ...


class CisternService(drainer_pb2_grpc.CisternServicer):
    """``Notify``: answered once every registered pump that is not OFFLINE is merged."""

    def __init__(self, collector: Notified) -> None:
        self._collector = collector

    async def Notify(
        self, request: drainer_pb2.NotifyReq, context: grpc.aio.ServicerContext[Any, Any]
    ) -> drainer_pb2.NotifyResp:
        try:
            await self._collector.notify()
        except MetaError as exc:
            metrics.ERRORS.labels("registry").inc()
            log.warning("Notify from %s not answered: cannot read the registry: %s", context.peer(), exc)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"drainer cannot read the pump registry: {exc}")
        return drainer_pb2.NotifyResp()


class NodeRegistry(Protocol):
    async def heartbeat(self, status: meta_pb2.NodeStatus, cluster_id: int = ...) -> int: ...


@dataclass(frozen=True)
class NodeSettings:
    node_id: str
    addr: str
    status_addr: str = ""
    cluster_id: int = 0
    heartbeat_interval: float = 2.0
    ttl_ms: int = 6000


class DrainerNode:
    """Registration and heartbeats; ``position`` returns the checkpoint ts to report."""

    def __init__(self, settings: NodeSettings, registry: NodeRegistry, position: Callable[[], int]) -> None:
        self.settings = settings
        self._registry = registry
        self._position = position
        self._state: meta_pb2.NodeState = meta_pb2.ONLINE
        self._final_state: meta_pb2.NodeState = meta_pb2.PAUSED
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.reported_ts = position()
        self.last_error = ""
        self.error = ""  # what halted the drainer: registered with FAILED
        self.error_ms = 0

    @property
    def node_id(self) -> str:
        return self.settings.node_id

    @property
    def state(self) -> str:
        """The registered state; FAILED from :meth:`fail` on, while stopping."""
        return (
            "FAILED"
            if self.error and self._final_state == meta_pb2.FAILED
            else meta_pb2.NodeState.Name(self._state)
        )

    async def start(self) -> None:
        """Register ONLINE (raises MetaError if the registry refuses, NodeIdTaken when another
        live drainer holds the node id) and keep heartbeating."""
        await register_owned(
            lambda: self._beat(raise_errors=True),
            self.node_id,
            self.settings.ttl_ms / 1000,
            self.settings.heartbeat_interval,
        )
        self._task = asyncio.create_task(self._loop(), name="drainer-heartbeat")
        log.info("drainer %s registered online at %s", self.node_id, self.settings.addr)

    async def stop(self) -> None:
        """Stop heartbeating and register the final state (PAUSED, FAILED after
        :meth:`fail`, OFFLINE after :meth:`close_for_good`) with the final
        checkpoint (best effort)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._state = self._final_state
        final = meta_pb2.NodeState.Name(self._final_state).lower()
        for attempt in range(STOP_ATTEMPTS):
            if await self._beat():
                log.info("drainer %s registered %s at commit_ts %d", self.node_id, final, self.reported_ts)
                return
            await asyncio.sleep(0.2 * (attempt + 1))
        log.warning("drainer %s: could not register as %s: %s", self.node_id, final, self.last_error)

    def close_for_good(self) -> None:
        """Register OFFLINE when stopped: closing pumps stop waiting for this drainer."""
        self._final_state = meta_pb2.OFFLINE

    def fail(self, error: str) -> None:
        """Register FAILED with ``error`` and the time now when stopped (unless closed for good)."""
        self.error, self.error_ms = error, int(time.time() * 1000)
        if self._final_state != meta_pb2.OFFLINE:
            self._final_state = meta_pb2.FAILED

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.heartbeat_interval)
            await self._beat()

    async def _beat(self, raise_errors: bool = False) -> bool:
        async with self._lock:
            position = self._position()
            status = meta_pb2.NodeStatus(
                node_id=self.node_id,
                kind=meta_pb2.DRAINER,
                addr=self.settings.addr,
                status_addr=self.settings.status_addr,
                state=self._state,
                max_commit_ts=position,
                ttl_ms=self.settings.ttl_ms,
                error=self.error if self._state == meta_pb2.FAILED else "",
                error_ms=self.error_ms if self._state == meta_pb2.FAILED else 0,
            )
            try:
                await self._registry.heartbeat(status, self.settings.cluster_id)
            except MetaError as exc:
                if raise_errors:
                    raise
                self.last_error = str(exc)
                metrics.ERRORS.labels("heartbeat").inc()
                log.warning("drainer %s: heartbeat failed: %s", self.node_id, exc)
                return False
            self.reported_ts = max(self.reported_ts, position)
            self.last_error = ""
            return True
