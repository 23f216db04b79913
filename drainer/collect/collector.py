"""The collector: which pumps the drainer merges, and one pull stream for each.

It follows the registry (a long poll on the pump list) and answers Notify.
Per pump, by registry state:

- **not OFFLINE** (online, pausing, paused, closing — alive or not): merged.
  A pump seen for the first time is pulled from the merge's resolved ts (at
  start: the checkpoint), so nothing at or below what was emitted comes
  again. A pump that is down holds the merge where it is: it may hold
  committed transactions nobody has pulled, and the puller keeps
  reconnecting until it is back.
- **OFFLINE**: let go once drained. A pump goes OFFLINE only after its
  close waited for every registered drainer's ``max_commit_ts`` (this
  drainer's checkpoint, :mod:`drainer.server`) to pass its final
  watermark; so the pump is drained once its position reaches the lower of
  the ``max_commit_ts`` it registered and the highest checkpoint this
  drainer has reported. Until then it stays in the merge. A pump already
  OFFLINE when the drainer starts is not merged: its close waited for the
  drainers registered then (this one, if it has a checkpoint).

Notify (:meth:`Collector.notify`): re-read the registry, merge every pump
that is not OFFLINE, then answer — the joining pump takes writes only after
that, so the merge cannot pass its first binlogs (the seeds' Pump3 example).
Responses older than one already applied (by registry revision) are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

from bridge.errors import BridgeError, MetaError
from bridge.meta.nodes import STATE_NAMES
from bridge.proto import meta_pb2
from drainer import metrics
from drainer.collect.merger import MergeFeed
from drainer.collect.pull import PumpPuller

log = logging.getLogger(__name__)

POLL_MS = 1000
RETRY_SECONDS = 1.0
WARN_EVERY = 10.0


class PumpRegistry(Protocol):
    """The part of :class:`bridge.meta.client.MetaClient` the collector uses."""

    async def list_nodes(
        self, kind: meta_pb2.NodeKind = ..., wait_revision: int = ..., wait_ms: int = ...
    ) -> meta_pb2.ListNodesResponse: ...


PullerFactory = Callable[[str, str], PumpPuller]
"""Builds the puller of pump ``node_id`` at ``addr``."""


class Collector:
    """Keeps the merge's sources in step with the registry; see the module docstring.

    ``reported_ts`` returns the highest checkpoint this drainer has reported
    to the registry. ``failed`` is set with the error of a puller that
    cannot go on (a malformed stream).
    """

    def __init__(
        self,
        registry: PumpRegistry,
        feed: MergeFeed,
        make_puller: PullerFactory,
        reported_ts: Callable[[], int],
        poll_ms: int = POLL_MS,
    ) -> None:
        self._registry = registry
        self._feed = feed
        self._make_puller = make_puller
        self._reported_ts = reported_ts
        self._poll_ms = poll_ms
        self._pullers: dict[str, tuple[PumpPuller, asyncio.Task[None]]] = {}
        self._view: dict[str, meta_pb2.NodeStatus] = {}
        self._revision = 0
        self._ready = asyncio.Event()
        self._watch: asyncio.Task[None] | None = None
        self._last_warning = 0.0
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        feed.on_retired = self._retired

    async def start(self) -> None:
        """Read the registry, merge its pumps, then follow it. Raises MetaError if unreadable."""
        response = await self._registry.list_nodes(meta_pb2.PUMP)
        self._apply(response, starting=True)
        self._ready.set()
        self._watch = asyncio.create_task(self._follow(), name="drainer-registry-watch")

    async def notify(self) -> None:
        """A pump is joining: merge every pump the registry lists now (not OFFLINE), then return."""
        await self._ready.wait()
        response = await self._registry.list_nodes(meta_pb2.PUMP)
        self._apply(response)
        log.info("Notify answered: merging %s", ", ".join(sorted(self._feed.merger.sources)) or "no pump")

    async def stop(self) -> None:
        tasks = [task for _, task in self._pullers.values()]
        if self._watch is not None:
            tasks.append(self._watch)
        self._pullers.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _follow(self) -> None:
        while True:
            try:
                response = await self._registry.list_nodes(meta_pb2.PUMP, self._revision, self._poll_ms)
            except MetaError as exc:
                metrics.ERRORS.labels("registry").inc()
                self._warn("cannot read the pump registry (retrying): %s", exc)
                await asyncio.sleep(RETRY_SECONDS)
                continue
            self._apply(response)

    def _apply(self, response: meta_pb2.ListNodesResponse, starting: bool = False) -> None:
        if response.revision and response.revision < self._revision:
            return
        self._revision = max(self._revision, response.revision)
        for error in response.errors:
            self._warn("pump registry entry unreadable: %s", error)
        for node in response.nodes:
            if node.kind == meta_pb2.PUMP:
                self._view[node.node_id] = node
                self._reconcile(node, starting)

    def _reconcile(self, node: meta_pb2.NodeStatus, starting: bool) -> None:
        name = node.node_id
        merged = name in self._feed.merger.sources
        if node.state == meta_pb2.OFFLINE:
            if merged:
                self._let_go(node)
            elif starting:
                log.info(
                    "pump %s is offline (registered max_commit_ts %d): not merged; its close waited "
                    "for the drainers registered then",
                    name,
                    node.max_commit_ts,
                )
            return
        if not merged:
            self._feed.add_source(name)
            log.info(
                "merging pump %s at %s (%s) from commit_ts %d",
                name,
                node.addr,
                STATE_NAMES.get(node.state, "?"),
                self._feed.position(name),
            )
        elif self._feed.merger.sources[name].drain_to is not None:
            log.info("pump %s is back (%s): merged again", name, STATE_NAMES.get(node.state, "?"))
            self._feed.drain(name, None)
        self._ensure_puller(name, node.addr)

    def _let_go(self, node: meta_pb2.NodeStatus) -> None:
        source = self._feed.merger.sources[node.node_id]
        target = min(node.max_commit_ts, self._reported_ts())
        if source.drain_to != target:
            log.info(
                "pump %s is offline: letting it go once drained to commit_ts %d (now at %d)",
                node.node_id,
                target,
                source.watermark,
            )
            self._feed.drain(node.node_id, target)

    def _ensure_puller(self, name: str, addr: str) -> None:
        current = self._pullers.get(name)
        if current is not None:
            if current[0].addr == addr and not current[1].done():
                return
            log.info("pump %s moved to %s: pulling from there", name, addr)
            current[1].cancel()
        puller = self._make_puller(name, addr)
        task = asyncio.create_task(puller.run(), name=f"drainer-pull-{name}")
        task.add_done_callback(self._puller_ended)
        self._pullers[name] = (puller, task)

    def _puller_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not self.failed.done():
            metrics.ERRORS.labels("fatal").inc()
            log.error("%s stopped: %s", task.get_name(), exc)
            error = exc if isinstance(exc, BridgeError) else BridgeError(f"{task.get_name()}: {exc!r}")
            self.failed.set_exception(error)

    def _retired(self, name: str) -> None:
        entry = self._pullers.pop(name, None)
        if entry is not None:
            entry[1].cancel()
        for gauge in (metrics.PUMP_WATERMARK, metrics.PUMP_BUFFERED_BYTES):
            with contextlib.suppress(KeyError):
                gauge.remove(name)
        node = self._view.get(name)
        if node is not None and node.state != meta_pb2.OFFLINE:
            self._reconcile(node, starting=False)

    def _warn(self, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY:
            self._last_warning = now
            log.warning(message, *args)

    def refresh_metrics(self) -> None:
        for name, source in self._feed.merger.sources.items():
            metrics.PUMP_WATERMARK.labels(name).set(source.watermark)
            metrics.PUMP_BUFFERED_BYTES.labels(name).set(source.buffered_bytes)

    def status(self) -> list[dict[str, object]]:
        """One entry per merged pump: registry view, merge position, stream state."""
        out: list[dict[str, object]] = []
        for name, source in sorted(self._feed.merger.sources.items()):
            node = self._view.get(name)
            puller = self._pullers.get(name)
            entry: dict[str, object] = {
                "node_id": name,
                "addr": node.addr if node else None,
                "state": STATE_NAMES.get(node.state, "?") if node else None,
                "alive": node.is_alive if node else None,
                "position": source.watermark,
                "buffered_txns": len(source.queue),
                "buffered_bytes": source.buffered_bytes,
                "received_txns": source.received,
                "duplicates": source.duplicates,
                "draining_to": source.drain_to,
            }
            if puller is not None:
                entry.update(
                    connected=puller[0].status.connected,
                    connects=puller[0].status.connects,
                    last_error=puller[0].status.last_error or None,
                    unreachable=puller[0].status.unreachable,
                    pending_parts=puller[0].status.pending_parts,
                )
            out.append(entry)
        return out
