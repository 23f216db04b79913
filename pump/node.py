"""The pump's life in the cluster: registration, joining, heartbeats and state changes.

States (the registry shows the NodeState in brackets)::

    joining [PAUSED] --all drainers acknowledged Notify--> online [ONLINE]
    online  --pause--> pausing [PAUSING] --in-flight Prewrites done--> paused [PAUSED]
    pausing/paused --resume--> online
    online/pausing/paused --close--> closing [CLOSING] --> offline [OFFLINE]

What each state admits is in :mod:`pump.admission`; the service asks
:meth:`PumpNode.write_refusal` or wraps each write in :meth:`PumpNode.admit`.

Start: a pump whose registry entry says ONLINE (it crashed or was stopped
while online) goes online at once: the drainers already merge it. Any other
pump (new, or OFFLINE after a close) joins: it registers as PAUSED, notifies
every online drainer (:mod:`pump.join`) and goes online only when all of them
acknowledged; otherwise start fails naming the drainers and the pump
registers as OFFLINE. Pause and close are not remembered across restarts.

Close: stop taking Prewrites; wait until no Prewrite is unpaired (Commits
keep arriving; the lost-commit sweeper decides the rest after
max-txn-timeout); write a final fake binlog; wait until every drainer that is
not OFFLINE reports a ``max_commit_ts`` at or above the pump's watermark at
that point; register OFFLINE. A paused drainer is waited for too: when it
resumes it still needs this pump's last binlogs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from bridge.errors import MetaError, NodeIdTaken, UserError
from bridge.meta.register import register_owned
from bridge.proto import meta_pb2
from pump import metrics
from pump.admission import REGISTRY_STATE, PumpState, WriteGate, WriteRefused
from pump.config import PumpConfig
from pump.health import DiskGuard, RateMeter
from pump.join import DrainerNotifier, JoinFailed, RegistryReader, notify_drainers

__all__ = [
    "FinalFakeWriter",
    "JoinFailed",
    "NodeRegistry",
    "NodeSettings",
    "NodeStorage",
    "PumpNode",
    "PumpState",
    "StateError",
    "WriteRefused",
]

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.1  # how often closing re-checks storage's unpaired count
_WAIT_LOG_SECONDS = 10.0  # how often a long wait says what it waits for
_DRAINER_POLL_MS = 1000


class StateError(UserError):
    """A state change the pump's current state does not allow."""


class NodeStorage(Protocol):
    """What the node reads from the storage engine."""

    @property
    def watermark(self) -> int:
        """Highest ts at which every transaction stored here is final."""
        ...

    @property
    def max_commit_ts(self) -> int:
        """Highest commit ts stored here."""
        ...

    @property
    def unpaired_count(self) -> int:
        """Prewrites still waiting for their Commit or Rollback."""
        ...


class NodeRegistry(RegistryReader, Protocol):
    """The part of :class:`bridge.meta.client.MetaClient` the node uses."""

    async def heartbeat(self, status: meta_pb2.NodeStatus, cluster_id: int = ...) -> int: ...


FinalFakeWriter = Callable[[], Awaitable[int]]
"""Writes one fake binlog durably and returns its ts (closing's last write)."""


@dataclass(frozen=True)
class NodeSettings:
    node_id: str
    addr: str
    cluster_id: int = 0
    label: str = ""
    heartbeat_interval: float = 2.0
    ttl_ms: int = 6000
    join_timeout: float = 60.0
    max_txn_timeout: float = 600.0
    status_addr: str = ""  # the HTTP endpoint `binlog-bridge ctl pause|resume|close` calls

    @classmethod
    def from_config(cls, config: PumpConfig, cluster_id: int, bound_port: int | None = None) -> NodeSettings:
        return cls(
            node_id=config.node_name(bound_port),
            addr=config.advertise(bound_port),
            cluster_id=cluster_id,
            label=config.label,
            heartbeat_interval=config.heartbeat_interval,
            ttl_ms=config.heartbeat_ttl_ms,
            join_timeout=config.join_timeout,
            max_txn_timeout=config.max_txn_timeout,
            status_addr=config.status_advertise(),
        )


class PumpNode:
    """One pump's registration and state machine.

    ``final_fake`` writes the last fake binlog when closing. ``status_extras``
    adds storage figures (e.g. ``storage_bytes``, ``gc_ts``) to :meth:`status`.
    Runs on one event loop; the write-admission calls are cheap and synchronous
    so the service can call them per binlog.
    """

    def __init__(
        self,
        settings: NodeSettings,
        registry: NodeRegistry,
        storage: NodeStorage,
        final_fake: FinalFakeWriter,
        *,
        disk_guard: DiskGuard,
        notifier: DrainerNotifier | None = None,
        status_extras: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        self.settings = settings
        self._registry = registry
        self._storage = storage
        self._final_fake = final_fake
        self.disk = disk_guard
        self._notifier = notifier or DrainerNotifier()
        self._extras = status_extras
        self.writes = WriteGate(settings.node_id, disk_guard)
        self._rate = RateMeter()
        self._score = 0
        self._heartbeat_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing: asyncio.Task[None] | None = None
        self._close_started = asyncio.Event()
        self._set_state(PumpState.JOINING)

    @property
    def node_id(self) -> str:
        return self.settings.node_id

    # -- write admission (see pump.admission) ---------------------------

    def write_refusal(self, prewrite: bool) -> str:
        """Why a write of this kind would be refused now; "" when it is accepted."""
        return self.writes.refusal(prewrite)

    def accepts_prewrite(self) -> bool:
        return not self.writes.refusal(True)

    def accepts_commit(self) -> bool:
        return not self.writes.refusal(False)

    def enter_write(self, prewrite: bool) -> str:
        """Admit one write: "" when admitted (call :meth:`exit_write` when done), else the refusal."""
        return self.writes.enter(prewrite)

    def exit_write(self, prewrite: bool) -> None:
        self.writes.exit(prewrite)

    def enter_writes(self, prewrites: int, others: int) -> None:
        """Count writes :meth:`write_refusal` admitted just now (nothing awaited since)."""
        self.writes.enter_many(prewrites, others)

    def exit_writes(self, prewrites: int, others: int) -> None:
        self.writes.exit_many(prewrites, others)

    def admit(self, prewrite: bool) -> contextlib.AbstractContextManager[None]:
        """``with node.admit(prewrite):`` around one write; raises :class:`WriteRefused`."""
        return self.writes.admit(prewrite)

    @property
    def state(self) -> PumpState:
        return self.writes.state

    # -- start and stop --------------------------------------------------

    async def start(self) -> None:
        """Register, join if needed, go online and keep heartbeating.

        Raises :class:`JoinFailed` (the pump is then registered OFFLINE),
        :class:`bridge.errors.MetaError` when the registry cannot be read, or
        :class:`bridge.errors.NodeIdTaken` when another live pump holds the node id.
        """
        previous = await self._previous_state()
        self.disk.check()
        # a pump that was online registers online again (no join phase), before it goes online here
        state = meta_pb2.ONLINE if previous == meta_pb2.ONLINE else None
        await register_owned(
            lambda: self._register_once(state),
            self.node_id,
            self.settings.ttl_ms / 1000,
            self.settings.heartbeat_interval,
        )
        self._tasks = [asyncio.create_task(self._heartbeat_loop()), asyncio.create_task(self._disk_loop())]
        if previous == meta_pb2.ONLINE:
            log.info("pump %s was online before: going online without a new Notify", self.node_id)
        else:
            await self._join()
        self._set_state(PumpState.ONLINE)
        await self._heartbeat_now()
        log.info("pump %s is online at %s", self.node_id, self.settings.addr)

    async def _join(self) -> None:
        await self._heartbeat_now()
        try:
            acknowledged = await notify_drainers(self._registry, self._notifier, self.settings.join_timeout)
        except JoinFailed:
            self._set_state(PumpState.OFFLINE)
            await self._heartbeat_now()
            await self.stop()
            raise
        log.info(
            "pump %s: Notify acknowledged by %s",
            self.node_id,
            ", ".join(acknowledged) or "no drainer (none online)",
        )

    async def _previous_state(self) -> meta_pb2.NodeState | None:
        response = await self._registry.list_nodes(meta_pb2.PUMP)
        for node in response.nodes:
            if node.node_id == self.node_id:
                return node.state
        return None

    async def stop(self) -> None:
        """Stop heartbeating and any close in progress; the registry entry stays as it was."""
        tasks = [*self._tasks, *([self._closing] if self._closing else [])]
        self._tasks = []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def wait_offline(self) -> None:
        """Return once a close (begun now or later) has registered the pump OFFLINE.

        Raises whatever stopped the close; cancelling this wait does not cancel the close.
        """
        await self._close_started.wait()
        assert self._closing is not None
        await asyncio.shield(self._closing)

    # -- state changes ---------------------------------------------------

    def _set_state(self, state: PumpState) -> None:
        if state is not self.state:
            log.info("pump %s: %s -> %s", self.node_id, self.state.value, state.value)
        self.writes.state = state
        for each in PumpState:
            metrics.STATE.labels(each.value).set(1 if each is state else 0)

    async def pause(self) -> None:
        """online -> pausing -> paused; returns once paused (in-flight Prewrites done).

        Commits and Rollbacks keep being taken (:mod:`pump.admission`), so there is
        no waiting for them.
        """
        if self.state is PumpState.ONLINE:
            self._set_state(PumpState.PAUSING)
            await self._heartbeat_now()
        elif self.state not in (PumpState.PAUSING, PumpState.PAUSED):
            raise StateError(f"cannot pause pump {self.node_id}: it is {self.state.value}")
        await self.writes.wait_idle(True)
        if self.state is PumpState.PAUSING:
            self._set_state(PumpState.PAUSED)
            await self._heartbeat_now()

    async def resume(self) -> None:
        """paused/pausing -> online."""
        if self.state in (PumpState.PAUSING, PumpState.PAUSED):
            self._set_state(PumpState.ONLINE)
            await self._heartbeat_now()
        elif self.state is not PumpState.ONLINE:
            raise StateError(f"cannot resume pump {self.node_id}: it is {self.state.value}")

    async def close(self) -> None:
        """Begin closing (see the module docstring); returns once CLOSING is registered.

        :meth:`wait_offline` waits for the end. Calling it again is harmless.
        """
        if self.state in (PumpState.CLOSING, PumpState.OFFLINE):
            return
        if self.state is PumpState.JOINING:
            raise StateError(f"cannot close pump {self.node_id}: it is still joining")
        self._set_state(PumpState.CLOSING)
        await self._heartbeat_now()
        self._closing = asyncio.create_task(self._run_close())
        self._close_started.set()

    async def _run_close(self) -> None:
        try:
            await self.writes.wait_idle(True)
            await self._wait_unpaired()
            final_ts = max(await self._final_fake(), self._storage.watermark)
            log.info(
                "pump %s closing: final watermark %d written; waiting for drainers", self.node_id, final_ts
            )
            await self._wait_drainers(final_ts)
            self._set_state(PumpState.OFFLINE)
            await self._heartbeat_until_registered()
        except Exception:
            metrics.ERRORS.labels("close").inc()
            log.exception("pump %s: closing failed; the pump stays closing", self.node_id)
            raise
        log.info("pump %s is offline", self.node_id)

    async def _wait_unpaired(self) -> None:
        last_log = time.monotonic()
        while (count := self._storage.unpaired_count) > 0:
            if time.monotonic() - last_log >= _WAIT_LOG_SECONDS:
                last_log = time.monotonic()
                log.info(
                    "pump %s closing: %d Prewrites still unpaired (max-txn-timeout = %gs resolves them)",
                    self.node_id,
                    count,
                    self.settings.max_txn_timeout,
                )
            await asyncio.sleep(_POLL_SECONDS)

    async def _wait_drainers(self, target: int) -> None:
        revision, last_log = 0, time.monotonic()
        while True:
            try:
                response = await self._registry.list_nodes(meta_pb2.DRAINER, revision, _DRAINER_POLL_MS)
            except MetaError as exc:
                log.warning("pump %s closing: cannot read drainers: %s", self.node_id, exc)
                await asyncio.sleep(self.settings.heartbeat_interval)
                continue
            behind = [d for d in response.nodes if d.state != meta_pb2.OFFLINE and d.max_commit_ts < target]
            if not behind:
                return
            if time.monotonic() - last_log >= _WAIT_LOG_SECONDS:
                last_log = time.monotonic()
                log.info(
                    "pump %s closing: waiting for drainers to pass %d: %s",
                    self.node_id,
                    target,
                    ", ".join(f"{d.node_id} at {d.max_commit_ts}" for d in behind),
                )
            revision = response.revision

    # -- heartbeats ------------------------------------------------------

    def _status(self) -> meta_pb2.NodeStatus:
        self._score = (
            self.disk.score(self._rate.rate, self.writes.in_flight) if self.accepts_prewrite() else 0
        )
        return meta_pb2.NodeStatus(
            node_id=self.node_id,
            kind=meta_pb2.PUMP,
            addr=self.settings.addr,
            state=REGISTRY_STATE[self.state],
            score=self._score,
            label=self.settings.label,
            max_commit_ts=self._storage.watermark,
            ttl_ms=self.settings.ttl_ms,
            status_addr=self.settings.status_addr,
        )

    async def _heartbeat_now(self) -> None:
        """Send the current status; a failure is logged, the next beat retries."""
        async with self._heartbeat_lock:
            status = self._status()
            try:
                await self._registry.heartbeat(status, self.settings.cluster_id)
            except MetaError as exc:
                metrics.ERRORS.labels("heartbeat").inc()
                log.warning("pump %s: heartbeat failed: %s", self.node_id, exc)
                return
        metrics.SCORE.set(status.score)
        metrics.WATERMARK.set(status.max_commit_ts)
        metrics.UNPAIRED_PREWRITES.set(self._storage.unpaired_count)
        metrics.MAX_COMMIT_TS.set(self._storage.max_commit_ts)

    async def _register_once(self, state: meta_pb2.NodeState | None) -> bool:
        """One try of the first registration (in ``state``, default the current one): False
        (logged) when the registry did not answer."""
        async with self._heartbeat_lock:
            status = self._status()
            if state is not None:
                status.state = state
            try:
                await self._registry.heartbeat(status, self.settings.cluster_id)
            except NodeIdTaken:
                raise
            except MetaError as exc:
                log.warning("pump %s: registering failed, retrying: %s", self.node_id, exc)
                return False
        return True

    async def _heartbeat_until_registered(self) -> None:
        while True:
            async with self._heartbeat_lock:
                try:
                    await self._registry.heartbeat(self._status(), self.settings.cluster_id)
                    return
                except MetaError as exc:
                    log.warning(
                        "pump %s: registering %s failed, retrying: %s", self.node_id, self.state.value, exc
                    )
            await asyncio.sleep(self.settings.heartbeat_interval)

    async def _heartbeat_loop(self) -> None:
        while self.state is not PumpState.OFFLINE:
            self._rate.sample(self.writes.admitted, time.monotonic())
            await self._heartbeat_now()
            await asyncio.sleep(self.settings.heartbeat_interval)

    async def _disk_loop(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.settings.heartbeat_interval))
            self.disk.check()

    # -- status ----------------------------------------------------------

    def status(self) -> dict[str, object]:
        """What ``GET /status`` shows."""
        out: dict[str, object] = {
            "node_id": self.node_id,
            "addr": self.settings.addr,
            "cluster_id": self.settings.cluster_id,
            "label": self.settings.label,
            "state": self.state.value,
            "registry_state": meta_pb2.NodeState.Name(REGISTRY_STATE[self.state]),
            "watermark": self._storage.watermark,
            "max_commit_ts": self._storage.max_commit_ts,
            "unpaired_prewrites": self._storage.unpaired_count,
            "writes_in_flight": self.writes.in_flight,
            "write_rate": round(self._rate.rate, 1),
            "score": self._score,
            "disk_available_bytes": self.disk.available,
            "stop_write_at_available_space": self.disk.threshold,
            "prewrite_refusal": self.write_refusal(True) or None,
        }
        if self._extras is not None:
            out.update(self._extras())
        return out
