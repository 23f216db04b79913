"""Merging the pumps' streams into one stream in strictly increasing commit_ts.

Each pump (a *source*) delivers its committed transactions in commit_ts order,
interleaved with watermarks: "no transaction at or below this ts is still to
come from me". A transaction's own commit_ts is a watermark too (a pump serves
only what is final). The merger:

- keeps one queue per source and merges the queue heads (k-way, a heap of at
  most one entry per source);
- emits a transaction only once its commit_ts is at or below the *minimum*
  watermark over the sources, so a slower pump can never deliver something
  that should have come earlier;
- drops duplicates: a transaction at or below what its source already
  delivered (a re-sent stream after a reconnect), and the second copy of a
  transaction two pumps both hold (the same commit_ts and start_ts: a
  Prewrite retried on another pump and resolved there);
- reports the *resolved* ts: every transaction at or below it has been
  emitted. It never goes down.

What the states of a pump mean here (the collector decides; see
:mod:`drainer.collect.collector`): a paused pump stays a source and holds the minimum
at its last watermark (it still writes watermarks, and Commits of Prewrites
it took are still to come); a pump that is not alive holds the minimum too
(it may hold committed transactions nobody has pulled). Only an OFFLINE pump
is let go, and only once it is *drained*: its watermark reached the final
one it registered and its queue is empty.

Memory: each source's queue is bounded by :meth:`Merger.has_room` (items and
bytes); the puller waits for room before reading the next stream message. A
chunked transaction counts with its final binlog only: its parts wait on disk
(:mod:`bridge.chunks`).

:class:`Merger` is plain and synchronous; :class:`MergeFeed` puts it on an
asyncio loop for the pullers (producers) and the syncer (the consumer).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bridge.chunks import SpilledParts
from bridge.errors import ProtocolError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PulledTxn:
    """One committed transaction as pulled: its binlog bytes, held once and decoded later.

    ``value_span`` is where ``prewrite_value`` lies in ``payload`` (``None``
    when not located: the payload is parsed again to find it); ``ddl`` says
    whether the binlog is a DDL. A transaction that travelled in chunks has
    ``parts``, its PrewriteChunk binlogs gathered on disk (``payload`` is the
    final binlog); ``size`` counts only ``payload``, what is held in memory.
    """

    start_ts: int
    commit_ts: int
    payload: bytes = field(repr=False)
    ddl: bool = False
    value_span: tuple[int, int] | None = None
    parts: SpilledParts | None = None

    @property
    def size(self) -> int:
        return len(self.payload)

    def release(self) -> None:
        """Let the parts' file go (a transaction the merge drops)."""
        if self.parts is not None:
            self.parts.close()


PulledItem = PulledTxn | int
"""What a source delivers: a transaction, or a watermark (an int ts)."""


class MergeError(ProtocolError):
    """The sources broke the merge's premises (e.g. two transactions share a commit_ts)."""


@dataclass
class SourceState:
    """One source's place in the merge (what ``/status`` shows of a pump)."""

    name: str
    watermark: int
    queue: deque[PulledTxn] = field(default_factory=deque)
    buffered_bytes: int = 0
    drain_to: int | None = None
    received: int = 0
    duplicates: int = 0


@dataclass(frozen=True)
class MergeBatch:
    """What one :meth:`Merger.pop_ready` call released."""

    txns: list[PulledTxn]
    resolved: int
    retired: list[str]


class Merger:
    """The k-way merge; see the module docstring. ``start_ts``: everything at or below it was emitted."""

    def __init__(self, start_ts: int = 0, *, max_items: int = 4096, max_bytes: int = 64 << 20) -> None:
        self._sources: dict[str, SourceState] = {}
        self._heap: list[tuple[int, int, str]] = []
        self._resolved = start_ts
        self._last: tuple[int, int] = (start_ts, 0)
        self.max_items = max_items
        self.max_bytes = max_bytes
        self.duplicates = 0

    @property
    def resolved(self) -> int:
        return self._resolved

    @property
    def sources(self) -> dict[str, SourceState]:
        return self._sources

    def add_source(self, name: str, after_ts: int | None = None, drain_to: int | None = None) -> bool:
        """Merge ``name`` from ``after_ts`` (default: the resolved ts); False if already merged."""
        if name in self._sources:
            return False
        start = self._resolved if after_ts is None else after_ts
        self._sources[name] = SourceState(name, start, drain_to=drain_to)
        return True

    def drain(self, name: str, final_ts: int | None) -> None:
        """Let ``name`` go once drained to ``final_ts`` (None: keep it after all)."""
        self._sources[name].drain_to = final_ts

    def position(self, name: str) -> int:
        """Where a stream from ``name`` resumes: nothing at or below it is still to come."""
        return self._sources[name].watermark

    def has_room(self, name: str) -> bool:
        source = self._sources.get(name)
        if source is None or not source.queue:
            return True
        return len(source.queue) < self.max_items and source.buffered_bytes < self.max_bytes

    def push(self, name: str, item: PulledItem) -> None:
        """Take one item from source ``name`` (transactions in commit_ts order)."""
        source = self._sources[name]
        if isinstance(item, int):
            source.watermark = max(source.watermark, item)
            return
        if item.commit_ts <= source.watermark or item.commit_ts <= self._resolved:
            source.duplicates += 1
            self.duplicates += 1
            log.debug("source %s: dropped commit_ts %d (already delivered)", name, item.commit_ts)
            item.release()
            return
        if not source.queue:
            heapq.heappush(self._heap, (item.commit_ts, item.start_ts, name))
        source.queue.append(item)
        source.buffered_bytes += item.size
        source.received += 1
        source.watermark = item.commit_ts

    def pop_ready(self, max_items: int = 1 << 30, max_bytes: int = 1 << 62) -> MergeBatch:
        """Release the transactions every source has passed, in commit_ts order.

        Stops early after ``max_items`` transactions or ``max_bytes`` of
        payload; ``resolved`` then is the last one released.
        """
        txns: list[PulledTxn] = []
        retired: list[str] = []
        size = 0
        while True:
            limit = self._limit()
            if limit is None:
                break
            while self._heap and self._heap[0][0] <= limit:
                if len(txns) >= max_items or size >= max_bytes:
                    self._resolved = max(self._resolved, self._last[0])
                    return MergeBatch(txns, self._resolved, retired)
                txn = self._pop_head()
                if txn is not None:
                    txns.append(txn)
                    size += txn.size
            self._resolved = max(self._resolved, limit)
            gone = self._retire_drained()
            if not gone:
                break
            retired.extend(gone)
        return MergeBatch(txns, self._resolved, retired)

    def _limit(self) -> int | None:
        if not self._sources:
            return None
        return min(source.watermark for source in self._sources.values())

    def _pop_head(self) -> PulledTxn | None:
        commit_ts, start_ts, name = heapq.heappop(self._heap)
        source = self._sources[name]
        txn = source.queue.popleft()
        source.buffered_bytes -= txn.size
        if source.queue:
            head = source.queue[0]
            heapq.heappush(self._heap, (head.commit_ts, head.start_ts, name))
        if commit_ts > self._last[0]:
            self._last = (commit_ts, start_ts)
            return txn
        if (commit_ts, start_ts) == self._last:
            source.duplicates += 1
            self.duplicates += 1
            log.debug("source %s: dropped a second copy of commit_ts %d", name, commit_ts)
            txn.release()
            return None
        raise MergeError(
            f"commit_ts {commit_ts} (start_ts {start_ts}) from pump {name} does not follow "
            f"commit_ts {self._last[0]} (start_ts {self._last[1]}): two transactions share a commit "
            "timestamp or a pump broke commit_ts order"
        )

    def _retire_drained(self) -> list[str]:
        gone = [
            s.name
            for s in self._sources.values()
            if s.drain_to is not None and s.watermark >= s.drain_to and not s.queue
        ]
        for name in gone:
            log.info(
                "pump %s drained to its final watermark %d: no longer merged",
                name,
                self._sources[name].watermark,
            )
            del self._sources[name]
        return gone


class MergeFeed:
    """The merger on an asyncio loop: pullers :meth:`feed` it, the syncer takes :meth:`next_batch`.

    ``on_retired`` is called with the name of each source let go.
    """

    def __init__(self, merger: Merger, on_retired: Callable[[str], None] | None = None) -> None:
        self.merger = merger
        self.on_retired = on_retired
        self._changed = asyncio.Event()
        self._room: dict[str, asyncio.Event] = {}

    def add_source(self, name: str, after_ts: int | None = None, drain_to: int | None = None) -> bool:
        added = self.merger.add_source(name, after_ts, drain_to)
        if added:
            self._changed.set()
        return added

    def drain(self, name: str, final_ts: int | None) -> None:
        self.merger.drain(name, final_ts)
        self._changed.set()

    def position(self, name: str) -> int:
        return self.merger.position(name)

    async def wait_room(self, name: str) -> None:
        """Return once source ``name`` may take another stream message."""
        while not self.merger.has_room(name):
            event = self._room.setdefault(name, asyncio.Event())
            event.clear()
            await event.wait()

    def feed(self, name: str, items: Sequence[PulledItem]) -> None:
        """Hand over one stream message's items from ``name`` (ignored if it is no longer merged)."""
        if name not in self.merger.sources:
            return
        for item in items:
            self.merger.push(name, item)
        self._changed.set()

    async def next_batch(
        self,
        last_resolved: int,
        timeout: float | None = None,
        max_items: int = 4096,
        max_bytes: int = 16 << 20,
    ) -> MergeBatch:
        """The next released transactions, or a resolved ts above ``last_resolved``.

        With ``timeout``, may return an empty batch once it passes.
        """
        while True:
            batch = self.merger.pop_ready(max_items, max_bytes)
            self._wake_room()
            for name in batch.retired:
                self._room.pop(name, None)
                if self.on_retired is not None:
                    self.on_retired(name)
            if batch.txns or batch.retired or batch.resolved > last_resolved:
                return batch
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                return batch

    def _wake_room(self) -> None:
        for name, event in self._room.items():
            if not event.is_set() and self.merger.has_room(name):
                event.set()
