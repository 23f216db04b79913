"""Which positions the brokers have acknowledged: the ``kafka`` sink's delivery bookkeeping.

Every event the sink writes becomes a :class:`Batch` (its commit_ts and how
many of its messages await a delivery report). Batches are kept in the
order they were produced; the **acked position** is the commit_ts of the
last batch of the longest prefix whose messages were all acknowledged, and
whose producing finished. A :class:`~bridge.sink.events.ResolvedEvent` is a
batch without messages: it moves the position once everything before it is
acknowledged.

A failed delivery (or an event whose producing was cut short) stops the
position where it is until :meth:`DeliveryTracker.reset`, which the sink
calls when its ``flush`` fails; the drainer then writes every unflushed
event again, so the position never passes a message that was not
acknowledged. Delivery callbacks run on the thread that polls the producer,
which is the sink's thread: no locking is needed.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(slots=True)
class Batch:
    """One event's messages: ``pending`` await a report; ``closed`` once all were produced."""

    commit_ts: int
    table: str = ""
    epoch: int = 0
    pending: int = 0
    closed: bool = False


@dataclass(frozen=True, slots=True)
class Failure:
    """The first delivery failure since the last reset."""

    commit_ts: int
    table: str
    topic: str
    error: str
    retriable: bool


class DeliveryTracker:
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
        """Every message of ``batch`` was produced."""
        batch.closed = True
        self._advance()

    def abort(self, batch: Batch, reason: str) -> None:
        """Producing ``batch`` was cut short: its event is incomplete in the topics."""
        batch.closed = True
        self.fail(Failure(batch.commit_ts, batch.table, "", reason, retriable=True))

    def delivered(self, batch: Batch) -> None:
        batch.pending -= 1
        if batch.pending == 0 and batch.closed:
            self._advance()

    def failed(self, batch: Batch, failure: Failure) -> None:
        """A message of ``batch`` failed (ignored for batches from before the last reset:
        their events are being written again)."""
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
        """Nothing produced is unacknowledged (and nothing failed)."""
        return self.failure is None and not self._batches

    @property
    def in_flight(self) -> int:
        return sum(b.pending for b in self._batches)

    def restart(self, position: int) -> None:
        """Start over at ``position`` (the sink is opened there): nothing produced before counts."""
        self.reset()
        self.acked = position

    def reset(self) -> Failure | None:
        """Forget every batch and the failure (after a failed flush); returns the failure."""
        failure, self.failure = self.failure, None
        self._batches.clear()
        self._epoch += 1
        return failure
