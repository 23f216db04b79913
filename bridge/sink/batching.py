"""The base of sinks that batch their writes and learn later what the downstream kept.

:class:`BatchingSink` keeps the bookkeeping such a sink would otherwise write
for itself, so that a subclass says only how events become writes:

- the **failure latch** (:class:`FailureLatch`): the first retriable failure
  since the last flush. While it is set, ``write`` drops events (the flush
  fails, and the driver writes every unflushed event again); ``flush`` raises
  it as :class:`~bridge.sink.errors.SinkUnavailable` after the subclass rolled
  back (:meth:`BatchingSink.recover`). A non-retriable failure is raised at once.
- **rate-limited warnings** (:class:`Warnings`): an outage repeats the same
  warning; each kind is logged at most every ``LOG_EVERY`` seconds.
- **per-sink metrics** from the context's registry (:func:`metrics_for`): a
  sink's metrics object (a :class:`SinkMetrics`) is made once per registry, so
  a sink opened again, or several in one process, share it.
- the **acknowledged position** lives in :class:`bridge.sink.acks.AckTracker`
  for sinks that hear back per write (the kafka sink's delivery reports).

A subclass implements :meth:`BatchingSink.write_batch` (may latch failures with
:meth:`BatchingSink.note_failure` instead of raising) and
:meth:`BatchingSink.flush_batch`; the contract methods ``write`` and ``flush``
are the base's.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from bridge.sink.contract import Sink
from bridge.sink.errors import SinkError, SinkUnavailable
from bridge.sink.events import Event

LOG_EVERY = 10.0  # seconds between repeated warnings of one kind

M = TypeVar("M")


class Warnings:
    """Warnings to ``logger``, each kind at most every :data:`LOG_EVERY` seconds."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self._warned: dict[str, float] = {}

    def __call__(self, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._warned.get(kind, -LOG_EVERY) >= LOG_EVERY:
            self._warned[kind] = now
            self.logger.warning(message, *args)


class FailureLatch:
    """The first retriable failure since it was last taken."""

    def __init__(self) -> None:
        self.failure: SinkError | None = None

    @property
    def set(self) -> bool:
        return self.failure is not None

    def note(self, error: SinkError) -> None:
        """Keep ``error`` if it is the first; a non-retriable one is raised (and clears the latch)."""
        if not error.retriable:
            self.failure = None
            raise error
        if self.failure is None:
            self.failure = error

    def take(self) -> SinkError | None:
        failure, self.failure = self.failure, None
        return failure


class SinkMetrics:
    """The base of a sink's metrics class: what it declares goes into the one registry it is given."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def counter(self, name: str, documentation: str, *labels: str) -> Counter:
        return Counter(name, documentation, labels, registry=self.registry)

    def gauge(self, name: str, documentation: str) -> Gauge:
        return Gauge(name, documentation, registry=self.registry)

    def histogram(self, name: str, documentation: str, buckets: Sequence[float]) -> Histogram:
        return Histogram(name, documentation, buckets=buckets, registry=self.registry)


_METRICS: weakref.WeakKeyDictionary[CollectorRegistry, dict[Any, Any]] = weakref.WeakKeyDictionary()
_METRICS_LOCK = threading.Lock()


def metrics_for(registry: CollectorRegistry, make: Callable[[CollectorRegistry], M]) -> M:
    """``make(registry)``, made once per registry and per ``make`` (a sink's metrics class)."""
    with _METRICS_LOCK:
        made = _METRICS.setdefault(registry, {})
        found = made.get(make)
        if found is None:
            found = made[make] = make(registry)
        return found


class BatchingSink(Sink):
    """See the module docstring."""

    def __init__(self, logger: logging.Logger) -> None:
        self.latch = FailureLatch()
        self.warn = Warnings(logger)

    def note_failure(self, error: SinkError) -> None:
        """Latch a retriable ``error`` (the next flush raises it); raise a non-retriable one."""
        self.latch.note(error)

    @property
    def failed(self) -> bool:
        """A failure is latched: the rest of this write is dropped."""
        return self.latch.set

    def write(self, events: Sequence[Event]) -> None:
        """See :meth:`bridge.sink.contract.Sink.write`. Dropped while a failure is latched (the
        flush raises it and the driver writes every unflushed event again); a
        :class:`SinkUnavailable` from :meth:`write_batch` is latched, not raised."""
        if self.latch.set:
            return
        try:
            self.write_batch(events)
        except SinkUnavailable as exc:
            self.latch.note(exc)
            self.latched(exc)

    def flush(self) -> int:
        """See :meth:`bridge.sink.contract.Sink.flush`: :meth:`flush_batch`, unless a failure is
        latched (before or during it); then :meth:`recover` and raise."""
        position = 0
        if not self.latch.set:
            try:
                position = self.flush_batch()
            except SinkUnavailable as exc:
                self.latch.note(exc)
        failure = self.latch.take()
        if failure is not None:
            error = self.recover(failure)
            if error is failure:
                raise error
            raise error from failure
        return position

    @abstractmethod
    def write_batch(self, events: Sequence[Event]) -> None:
        """Turn ``events`` into writes (buffered or sent); latch or raise what fails."""

    @abstractmethod
    def flush_batch(self) -> int:
        """Make every write so far durable; the position every event at or below is durable."""

    def latched(self, failure: SinkError) -> None:
        """Called when ``write_batch`` raised the retriable ``failure`` (default: nothing)."""
        return None

    def recover(self, failure: SinkError) -> SinkError:
        """Roll back to the last durable position after ``failure``; returns the error ``flush``
        raises (default: ``failure`` as :class:`SinkUnavailable`)."""
        return failure if isinstance(failure, SinkUnavailable) else SinkUnavailable(str(failure))
