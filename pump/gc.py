"""Retention bounded by the drainers: delete what is older than ``gc`` and every
registered drainer has checkpointed; with ``max-retention``, delete by age past it anyway.

Every ``interval`` the collector computes the GC point, the TSO timestamp of
``now - gc`` (:func:`gc_point`), and reads the drainers in the registry. Every
drainer that is not OFFLINE (online, paused, failed, ...: it will resume from
its checkpoint) holds the GC point at its checkpoint: GC never deletes a
commit above ``max_commit_ts`` of such a drainer, as the original system's
GC is bounded by the drainers' checkpoints (:func:`gc_target`). A drainer
that holds GC back is logged as a warning when that starts (and each hour
while it lasts).

``max-retention`` (0 = unset) is the operator's bound on disk use: what is
older than it is deleted even when a drainer has not read it; each drainer
that then falls behind is named in a warning before the deletion. The
storage itself never deletes what is still needed by the pump (the GC ts it
reaches is capped by its watermark and its oldest unpaired Prewrite).

After the round, a drainer whose checkpoint is below the pump's GC ts (GC
deleted everything below it) will never get the binlogs in between from this
pump: that is logged as an error when it starts (and again each hour while it
lasts) and exported as ``bridge_pump_drainer_behind_gc{drainer=...} = 1``
(the series is removed once the drainer is past the GC ts or gone). Without
``max-retention`` this only happens to a drainer that registers after GC
passed its checkpoint.

When the registry cannot be read, the round deletes nothing (retried next
interval): a drainer the pump cannot see may still need the binlogs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Protocol

from bridge.errors import BridgeError
from bridge.proto import meta_pb2
from bridge.tso import compose
from pump import metrics
from pump.join import RegistryReader

log = logging.getLogger(__name__)

REPEAT_WARNING_SECONDS = 3600.0


class CollectableStorage(Protocol):
    """What GC needs from :class:`pump.storage.Storage`."""

    @property
    def gc_ts(self) -> int: ...

    async def gc(self, before_ts: int) -> int: ...


def gc_point(now: float, retention: float) -> int:
    """The TSO timestamp ``retention`` seconds before ``now`` (Unix seconds)."""
    return compose(max(int((now - retention) * 1000), 0), 0)


def default_interval(retention: float) -> float:
    """How often to collect: a hundredth of the retention, between 10 s and 10 min."""
    return min(max(retention / 100, 10.0), 600.0)


def drainer_lost_binlogs(checkpoint: int, gc_ts: int) -> bool:
    """True when commits after ``checkpoint`` may have been deleted: GC removed
    everything below ``gc_ts`` and the drainer still needs (checkpoint, ...)."""
    return checkpoint + 1 < gc_ts


def gc_target(age_point: int, checkpoints: Mapping[str, int], floor: int = 0) -> int:
    """What GC may delete below: the age point ``age_point``, capped so that no drainer of
    ``checkpoints`` (id -> checkpoint commit_ts) loses a commit after its checkpoint, then raised
    to ``floor`` (the ``max-retention`` point; 0 = none), which no drainer holds back."""
    target = age_point
    if checkpoints:
        target = min(target, min(checkpoints.values()) + 1)
    return max(target, floor)


class GarbageCollector:
    """Deletes binlogs older than ``retention`` seconds that every drainer has checkpointed,
    every ``interval`` seconds; with ``max_retention`` (seconds, 0 = unset) deletes what is
    older than that whatever the drainers."""

    def __init__(
        self,
        storage: CollectableStorage,
        registry: RegistryReader,
        retention: float,
        interval: float | None = None,
        max_retention: float = 0.0,
    ) -> None:
        if retention <= 0:
            raise ValueError("GarbageCollector needs a positive retention; gc = 0 keeps everything")
        if max_retention and max_retention < retention:
            raise ValueError("max_retention must be 0 (unset) or at least the retention")
        self._storage = storage
        self._registry = registry
        self.retention = retention
        self.max_retention = max_retention
        self.interval = default_interval(retention) if interval is None else interval
        self._behind: dict[str, float] = {}  # drainer -> when it was last logged
        self._holding: dict[str, float] = {}  # drainer holding GC back -> when it was last logged
        self._overridden: dict[str, float] = {}  # drainer max-retention deletes past -> likewise

    async def run(self) -> None:
        """Collect until cancelled; a failed round is logged and retried next interval."""
        while True:
            try:
                await self.collect_once()
            except BridgeError as exc:
                metrics.ERRORS.labels("gc").inc()
                log.warning("GC: %s; retrying in %gs", exc, self.interval)
            await asyncio.sleep(self.interval)

    async def collect_once(self, now: float | None = None) -> int:
        """One round; returns the storage's GC ts after it. Raises the registry's
        :class:`BridgeError` (deleting nothing) when the drainers cannot be read."""
        now = time.time() if now is None else now
        response = await self._registry.list_nodes(meta_pb2.DRAINER)
        checkpoints = {d.node_id: d.max_commit_ts for d in response.nodes if d.state != meta_pb2.OFFLINE}
        age_point = gc_point(now, self.retention)
        floor = gc_point(now, self.max_retention) if self.max_retention else 0
        overridden = {d: c for d, c in checkpoints.items() if c + 1 < floor}
        self._warn_overridden(overridden, floor)
        gc_ts = await self._storage.gc(gc_target(age_point, checkpoints, floor))
        metrics.GC_TS.set(gc_ts)
        # Holding GC back: the drainer's checkpoint is where this round stopped, short of the age point.
        holding = {d: c for d, c in checkpoints.items() if c + 1 == gc_ts < age_point}
        self._warn_holding(holding)
        await self.check_drainers(gc_ts)
        return gc_ts

    def _warn_overridden(self, drainers: Mapping[str, int], floor: int) -> None:
        """max-retention deletes what these drainers have not read: say so before it does."""
        now = time.monotonic()
        for node_id, checkpoint in drainers.items():
            if _due(self._overridden, node_id, now):
                log.warning(
                    "drainer %s falls behind max-retention: its checkpoint %d is older than %gs; "
                    "deleting binlogs it has not read (up to ts %d)",
                    node_id,
                    checkpoint,
                    self.max_retention,
                    floor,
                )
        _forget(self._overridden, drainers)

    def _warn_holding(self, drainers: Mapping[str, int]) -> None:
        now = time.monotonic()
        bound = (
            f"or they are older than max-retention {self.max_retention:g}s"
            if self.max_retention
            else "(set max-retention to bound this)"
        )
        for node_id, checkpoint in drainers.items():
            if _due(self._holding, node_id, now):
                log.warning(
                    "drainer %s holds GC back: its checkpoint %d is older than the gc retention of %gs; "
                    "binlogs after it are kept until it reads them %s",
                    node_id,
                    checkpoint,
                    self.retention,
                    bound,
                )
        _forget(self._holding, drainers)

    async def check_drainers(self, gc_ts: int) -> list[str]:
        """Log and export the drainers whose checkpoint is below ``gc_ts``; returns their ids."""
        response = await self._registry.list_nodes(meta_pb2.DRAINER)
        behind = {
            d.node_id: d.max_commit_ts
            for d in response.nodes
            if d.state != meta_pb2.OFFLINE and drainer_lost_binlogs(d.max_commit_ts, gc_ts)
        }
        now = time.monotonic()
        for node_id, checkpoint in behind.items():
            metrics.DRAINER_BEHIND_GC.labels(node_id).set(1)
            if _due(self._behind, node_id, now):
                log.error(
                    "drainer %s is behind the GC point: its checkpoint %d is below this pump's gc ts %d; "
                    "the binlogs in between are deleted and that drainer will miss them",
                    node_id,
                    checkpoint,
                    gc_ts,
                )
        for node_id in [n for n in self._behind if n not in behind]:
            del self._behind[node_id]
            metrics.DRAINER_BEHIND_GC.remove(node_id)
            log.info("drainer %s is no longer behind the GC point", node_id)
        return sorted(behind)


def _due(last_logged: dict[str, float], node_id: str, now: float) -> bool:
    """Whether a repeated warning about ``node_id`` is due (first time, or an hour since)."""
    last = last_logged.get(node_id)
    if last is None or now - last >= REPEAT_WARNING_SECONDS:
        last_logged[node_id] = now
        return True
    return False


def _forget(last_logged: dict[str, float], current: Mapping[str, int]) -> None:
    """Drop the drainers no longer in ``current``: a new episode is logged again at once."""
    for node_id in [n for n in last_logged if n not in current]:
        del last_logged[node_id]
