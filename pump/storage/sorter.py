"""The sorter: pairs Prewrites with Commits and Rollbacks and keeps the watermark.

It is a pure state machine fed with the value log's records in log order, by
one thread (the chaser). Everything it decides follows from that sequence, so
replaying the log after a crash rebuilds the same state; the index persists
the state as of an applied position (see :mod:`pump.storage.chaser`).

Rules:

- A Prewrite waits, unpaired, for its Commit or Rollback (same start_ts).
- A Commit pairs with it: the transaction is committed at commit_ts.
- A Rollback drops the Prewrite; nothing is emitted.
- A fake binlog (Rollback with start_ts = commit_ts = a fresh TSO ts) only
  moves time forward.
- **Watermark**: the highest ts at which every transaction at or below it is
  final: ``min(unpaired start_ts) - 1`` while Prewrites are unpaired, else
  the highest commit_ts or fake ts seen; also below every orphan Commit; it
  never goes down. (A Prewrite arriving with start_ts below the watermark
  cannot lower it: its commit_ts is allocated after the Prewrite was
  acknowledged, so it is above every ts this pump had seen.)
- **Orphan Commit** (no Prewrite known): if its commit_ts is at or below the
  watermark it can no longer be emitted in order and is dropped (silently
  when the index already holds that commit: a duplicate). Otherwise it is
  kept pending and holds the watermark below its commit_ts, so a Prewrite
  arriving later (a replayed or retried write) is still emitted in order. It
  expires once the log's time (the highest ts seen) passes its commit_ts by
  the orphan timeout; expiring logs an error and drops it.
- A chunked transaction's parts (PrewriteChunk) are handed to the index as
  they come. The Prewrite that becomes the transaction's (the first one, or
  the one an orphan Commit waited for) also hands the index the number of
  parts it announces (``chunks``, 0 when it came whole), so parts above it,
  left by an earlier attempt of the producer, are removed.
- A Commit whose commit_ts is at or below the watermark is dropped with an
  error (a producer broke the two-phase protocol); it never moves back in time.
  :meth:`Sorter.would_drop_commit` answers, before a Commit is written,
  whether this rule (and no duplicate) applies to it, so the pump can refuse
  it instead of acknowledging a Commit it will not deliver
  (:mod:`pump.storage.late_commits`).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from bridge.tso import PHYSICAL_SHIFT
from pump.storage.segment import Pointer

log = logging.getLogger(__name__)

PREWRITE, COMMIT, ROLLBACK, PREWRITE_CHUNK = 0, 1, 2, 5  # binlog.BinlogType
HEAP_SLACK = 1024
DEFAULT_ORPHAN_TIMEOUT_TS = 10_000 << PHYSICAL_SHIFT  # 10 s


def seconds_to_ts(seconds: float) -> int:
    """A duration in TSO units (milliseconds << 18)."""
    return int(seconds * 1000) << PHYSICAL_SHIFT


class Part(NamedTuple):
    """A stored PrewriteChunk: part ``chunk`` of the transaction ``start_ts``."""

    start_ts: int
    chunk: int
    pointer: Pointer


class Committed(NamedTuple):
    commit_ts: int
    start_ts: int
    prewrite: Pointer


@dataclass
class SorterState:
    """What the index persists of the sorter."""

    watermark: int = 0
    max_seen: int = 0  # highest commit_ts or fake ts
    latest_ts: int = 0  # highest ts of any record: the log's clock for orphan expiry
    unpaired: dict[int, Pointer] = field(default_factory=dict)
    orphans: dict[int, int] = field(default_factory=dict)  # start_ts -> commit_ts


@dataclass
class Changes:
    """Net changes since the last :meth:`Sorter.take_changes`; None = removed."""

    committed: list[Committed] = field(default_factory=list)
    unpaired: dict[int, Pointer | None] = field(default_factory=dict)
    orphans: dict[int, int | None] = field(default_factory=dict)
    parts: list[Part] = field(default_factory=list)  # PrewriteChunks seen, in log order
    # (start_ts, chunks) of each Prewrite kept: the parts it announces; any above are stale
    announced: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class SorterCounters:
    paired: int = 0
    rolled_back: int = 0
    fake: int = 0
    duplicate_commits: int = 0
    late_commits: int = 0
    orphans_expired: int = 0
    ignored: int = 0


class Sorter:
    """See the module docstring. ``is_committed(commit_ts)`` tells whether the
    index already holds a commit at that ts (for recognising duplicates)."""

    def __init__(
        self,
        state: SorterState | None = None,
        *,
        orphan_timeout_ts: int = DEFAULT_ORPHAN_TIMEOUT_TS,
        is_committed: Callable[[int], bool] = lambda commit_ts: False,
    ) -> None:
        self._state = state or SorterState()
        self._orphan_timeout_ts = orphan_timeout_ts
        self._is_committed = is_committed
        self._changes = Changes()
        self._round_commits: set[int] = set()
        self._unpaired_heap = list(self._state.unpaired)
        heapq.heapify(self._unpaired_heap)
        self._orphan_heap = [(c, s) for s, c in self._state.orphans.items()]
        heapq.heapify(self._orphan_heap)
        self.counters = SorterCounters()

    @property
    def watermark(self) -> int:
        return self._state.watermark

    @property
    def latest_ts(self) -> int:
        return self._state.latest_ts

    @property
    def max_seen(self) -> int:
        return self._state.max_seen

    @property
    def unpaired_count(self) -> int:
        return len(self._state.unpaired)

    @property
    def orphan_count(self) -> int:
        return len(self._state.orphans)

    def min_unpaired(self) -> int | None:
        self._clean_heaps()
        return self._unpaired_heap[0] if self._unpaired_heap else None

    def unpaired_before(self, ts: int) -> list[tuple[int, Pointer]]:
        """Unpaired Prewrites with start_ts < ``ts``, oldest first."""
        return sorted((s, p) for s, p in self._state.unpaired.items() if s < ts)

    def is_unpaired(self, start_ts: int) -> bool:
        return start_ts in self._state.unpaired

    def holds_commit(self, commit_ts: int) -> bool:
        """True when a commit at ``commit_ts`` is paired (this round or indexed):
        a Commit arriving again at that ts is a duplicate."""
        return commit_ts in self._round_commits or self._is_committed(commit_ts)

    def would_drop_commit(self, commit_ts: int) -> bool:
        """True when a Commit at ``commit_ts`` fed now or later would be dropped
        as late: its commit_ts is at or below the watermark (which never goes
        down) and it is no duplicate of a commit already paired. Its Prewrite
        being unpaired cannot save it: while a Prewrite is unpaired the
        watermark stays below its start_ts, hence below its commit_ts."""
        return commit_ts <= self._state.watermark and not self.holds_commit(commit_ts)

    def add(self, tp: int, start_ts: int, commit_ts: int, pointer: Pointer) -> None:
        """Feed one record, in log order. Checks against the watermark use its
        value before this record: a Commit must not be judged late because
        its own pairing let the watermark jump past it. For a PrewriteChunk
        ``commit_ts`` is its chunk index (it has no commit_ts), always below
        its start_ts, so the log's clock moves as for a Prewrite; for a Prewrite, which has no
        commit_ts either, it is the number of parts it announces (``chunks``, 0 when whole)."""
        state = self._state
        state.latest_ts = max(state.latest_ts, start_ts, commit_ts)
        if tp == PREWRITE:
            self._prewrite(start_ts, commit_ts, pointer)
        elif tp == COMMIT:
            self._commit(start_ts, commit_ts)
        elif tp == ROLLBACK and commit_ts != 0 and commit_ts == start_ts:
            self.counters.fake += 1
            state.max_seen = max(state.max_seen, commit_ts)
        elif tp == ROLLBACK:
            self._rollback(start_ts)
        elif tp == PREWRITE_CHUNK:
            # A part never pairs nor holds the watermark: it is only handed to the index.
            # Its record carries the chunk index where other records carry commit_ts.
            self._changes.parts.append(Part(start_ts, commit_ts, pointer))
        else:
            self.counters.ignored += 1
        self._expire_orphans()
        self._advance()

    def take_changes(self) -> Changes:
        changes, self._changes = self._changes, Changes()
        self._round_commits.clear()
        return changes

    def _prewrite(self, start_ts: int, chunks: int, pointer: Pointer) -> None:
        state = self._state
        commit_ts = state.orphans.pop(start_ts, None)
        if commit_ts is not None:
            self._changes.orphans[start_ts] = None
            self._changes.announced.append((start_ts, chunks))
            self._pair(start_ts, commit_ts, pointer)
        elif start_ts not in state.unpaired:
            state.unpaired[start_ts] = pointer
            self._changes.unpaired[start_ts] = pointer
            # Only the Prewrite kept says which parts are its own: a second copy (ignored here)
            # must not remove parts the first one announces.
            self._changes.announced.append((start_ts, chunks))
            heapq.heappush(self._unpaired_heap, start_ts)

    def _commit(self, start_ts: int, commit_ts: int) -> None:
        state = self._state
        pointer = state.unpaired.pop(start_ts, None)
        if pointer is not None:
            self._changes.unpaired[start_ts] = None
            self._pair(start_ts, commit_ts, pointer)
        elif commit_ts in self._round_commits or self._is_committed(commit_ts):
            self.counters.duplicate_commits += 1
        elif commit_ts <= state.watermark:
            self.counters.late_commits += 1
            log.error(
                "dropped a Commit (start_ts %d, commit_ts %d) with no known Prewrite: commit_ts is at or "
                "below the watermark %d",
                start_ts,
                commit_ts,
                state.watermark,
            )
        elif start_ts not in state.orphans:
            state.orphans[start_ts] = commit_ts
            self._changes.orphans[start_ts] = commit_ts
            heapq.heappush(self._orphan_heap, (commit_ts, start_ts))

    def _pair(self, start_ts: int, commit_ts: int, pointer: Pointer) -> None:
        state = self._state
        if commit_ts <= state.watermark:
            self.counters.late_commits += 1
            log.error(
                "dropped transaction start_ts %d: its commit_ts %d is at or below the watermark %d "
                "(the producer broke the two-phase protocol)",
                start_ts,
                commit_ts,
                state.watermark,
            )
            return
        self.counters.paired += 1
        state.max_seen = max(state.max_seen, commit_ts)
        self._changes.committed.append(Committed(commit_ts, start_ts, pointer))
        self._round_commits.add(commit_ts)

    def _rollback(self, start_ts: int) -> None:
        state = self._state
        if state.unpaired.pop(start_ts, None) is not None:
            self._changes.unpaired[start_ts] = None
            self.counters.rolled_back += 1
        elif state.orphans.pop(start_ts, None) is not None:
            self._changes.orphans[start_ts] = None
            self.counters.rolled_back += 1

    def _expire_orphans(self) -> None:
        if not self._orphan_heap:
            return
        state = self._state
        horizon = state.latest_ts - self._orphan_timeout_ts
        self._clean_heaps()
        while self._orphan_heap and self._orphan_heap[0][0] <= horizon:
            commit_ts, start_ts = heapq.heappop(self._orphan_heap)
            del state.orphans[start_ts]
            self._changes.orphans[start_ts] = None
            self.counters.orphans_expired += 1
            log.error(
                "dropped a Commit (start_ts %d, commit_ts %d) whose Prewrite never arrived",
                start_ts,
                commit_ts,
            )
            self._clean_heaps()

    def _clean_heaps(self) -> None:
        """Drop heap tops that are no longer pending; rebuild a heap mostly made of stale entries."""
        state = self._state
        heap = self._unpaired_heap
        while heap and heap[0] not in state.unpaired:
            heapq.heappop(heap)
        if len(heap) > 2 * len(state.unpaired) + HEAP_SLACK:
            self._unpaired_heap = list(state.unpaired)
            heapq.heapify(self._unpaired_heap)
        orphans = self._orphan_heap
        if not orphans:
            return
        while orphans and state.orphans.get(orphans[0][1]) != orphans[0][0]:
            heapq.heappop(orphans)
        if len(orphans) > 2 * len(state.orphans) + HEAP_SLACK:
            self._orphan_heap = [(c, s) for s, c in state.orphans.items()]
            heapq.heapify(self._orphan_heap)

    def _advance(self) -> int:
        """Raise the watermark as far as the pending Prewrites and orphans allow."""
        state = self._state
        self._clean_heaps()
        candidate = self._unpaired_heap[0] - 1 if self._unpaired_heap else state.max_seen
        if self._orphan_heap:
            candidate = min(candidate, self._orphan_heap[0][0] - 1)
        if candidate > state.watermark:
            state.watermark = candidate
        return state.watermark
