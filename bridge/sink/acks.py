"""Which positions the downstream has acknowledged: the bookkeeping behind ``Sink.flush``.

A sink that hands each event's writes to its downstream and hears back later
(a broker's delivery reports, a pipeline's replies, a worker's commit) opens
one :class:`Batch` per event (:meth:`AckTracker.begin`): its commit_ts and how
many of its writes await an acknowledgment. Batches are kept in the order they
began; the **acknowledged position** (:attr:`AckTracker.acked`) is the commit_ts
of the last batch of the longest prefix whose writes were all acknowledged and
whose writing finished (:meth:`AckTracker.close`). A
:class:`~bridge.sink.events.ResolvedEvent` is a batch without writes: it moves
the position once everything before it is acknowledged.

A failed write (or an event whose writing was cut short, :meth:`AckTracker.abort`)
stops the position where it is until :meth:`AckTracker.reset`, which the sink
calls when its ``flush`` fails; the driver then writes every unflushed event
again, so the position never passes a write that was not acknowledged.
Acknowledgments of batches from before a reset are ignored (their events are
being written again). The tracker is used from the sink's thread only.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(slots=True)
class Batch:
    """One event's writes: ``pending`` await an acknowledgment; ``closed`` once all were made."""

    commit_ts: int
    table: str = ""
    epoch: int = 0
    pending: int = 0
    closed: bool = False


class Failure(NamedTuple):
    """The first failed write since the last reset (``where``: e.g. the topic written to)."""

    commit_ts: int
    table: str
    where: str
    error: str
    retriable: bool


class AckTracker:
    """See the module docstring."""

    def __init__(self, position: int = 0) -> None:
        self.acked = position
        self.failure: Failure | None = None
        self._batches: deque[Batch] = deque()
        self._epoch = 0

    def begin(self, commit_ts: int, table: str = "") -> Batch:
        batch = Batch(commit_ts, table, self._epoch)
        self._batches.append(batch)
        return batch

    @staticmethod
    def sent(batch: Batch) -> None:
        batch.pending += 1

    def close(self, batch: Batch) -> None:
        """Every write of ``batch`` was made."""
        batch.closed = True
        self._advance()

    def abort(self, batch: Batch, reason: str) -> None:
        """Writing ``batch`` was cut short: its event is incomplete downstream."""
        batch.closed = True
        self.fail(Failure(batch.commit_ts, batch.table, "", reason, retriable=True))

    def acknowledged(self, batch: Batch) -> None:
        batch.pending -= 1
        if batch.pending == 0 and batch.closed:
            self._advance()

    def failed(self, batch: Batch, failure: Failure) -> None:
        """A write of ``batch`` failed (ignored for batches from before the last reset)."""
        batch.pending -= 1
        if batch.epoch == self._epoch:
            self.fail(failure)

    def fail(self, failure: Failure) -> None:
        """Record a failure; a non-retriable one outranks a retriable one recorded before."""
        if self.failure is None or (self.failure.retriable and not failure.retriable):
            self.failure = failure

    def _advance(self) -> None:
        if self.failure is not None:
            return
        batches = self._batches
        while batches and batches[0].closed and batches[0].pending == 0:
            self.acked = max(self.acked, batches.popleft().commit_ts)

    @property
    def idle(self) -> bool:
        """Nothing written is unacknowledged (and nothing failed)."""
        return self.failure is None and not self._batches

    @property
    def in_flight(self) -> int:
        return sum(b.pending for b in self._batches)

    def restart(self, position: int) -> None:
        """Start over at ``position`` (the sink is opened there): nothing written before counts."""
        self.reset()
        self.acked = position

    def reset(self) -> Failure | None:
        """Forget every batch and the failure (after a failed flush); returns the failure."""
        failure, self.failure = self.failure, None
        self._batches.clear()
        self._epoch += 1
        return failure
