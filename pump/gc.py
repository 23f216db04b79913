"""Retention: delete what is older than ``gc``, and say when a drainer lost binlogs to it.

Every ``interval`` the collector computes the GC point, the TSO timestamp of
``now - gc`` (:func:`gc_point`), and asks the storage to delete what lies
before it. The storage never deletes what is still needed (the GC ts it
reaches is capped by its watermark and its oldest unpaired Prewrite).

Then it reads the drainers in the registry: a drainer that is not OFFLINE
whose ``max_commit_ts`` (its checkpoint) is below the pump's GC ts (GC
deleted everything below it) will never get the binlogs in between from
this pump. That is logged as an error
when it starts (and again each hour while it lasts) and exported as
``bridge_pump_drainer_behind_gc{drainer=...} = 1`` (the series is removed
once the drainer is past the GC ts or gone). Nothing waits for a slow
drainer: retention is the operator's promise, the warning is the alarm.
"""

from __future__ import annotations

import asyncio
import logging
import time
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


class GarbageCollector:
    """Deletes binlogs older than ``retention`` seconds every ``interval`` seconds."""

    def __init__(
        self,
        storage: CollectableStorage,
        registry: RegistryReader,
        retention: float,
        interval: float | None = None,
    ) -> None:
        if retention <= 0:
            raise ValueError("GarbageCollector needs a positive retention; gc = 0 keeps everything")
        self._storage = storage
        self._registry = registry
        self.retention = retention
        self.interval = default_interval(retention) if interval is None else interval
        self._behind: dict[str, float] = {}  # drainer -> when it was last logged

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
        """One round; returns the storage's GC ts after it."""
        target = gc_point(time.time() if now is None else now, self.retention)
        gc_ts = await self._storage.gc(target)
        metrics.GC_TS.set(gc_ts)
        await self.check_drainers(gc_ts)
        return gc_ts

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
            last = self._behind.get(node_id)
            if last is None or now - last >= REPEAT_WARNING_SECONDS:
                self._behind[node_id] = now
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
