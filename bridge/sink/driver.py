"""Calling a sink, on the sink's own thread, with retries: the one driver.

The drainer's syncer, ``binlog-bridge replay`` (and the relay-log recovery
behind it) and ``consume --apply`` all call their sink through a
:class:`SinkDriver`, used only from the one thread the sink runs on. It
remembers the events written since the last successful flush (bounded by
the caller's flush policy) so that it can replay them:

- ``open`` or ``write`` raised a retriable error: after a backoff, the same
  call again (``write`` with the same events);
- ``flush`` raised a retriable error: after a backoff, ``write`` every event
  since the last successful flush again, then ``flush``;

until it works, the caller's ``abort`` event is set (:class:`SinkStopped`)
or ``attempts`` calls failed (:class:`SinkFailed`). Pauses come from
:class:`bridge.retry.Backoff` (doubling from ``retry_initial`` to
``retry_max``); every retry is logged and counted (:class:`DriverMetrics`,
e.g. the drainer's ``bridge_drainer_errors_total{where="sink"}``). A
non-retriable error, or an exception outside :mod:`bridge.errors` (a sink
bug), raises :class:`SinkFailed` naming the sink; its
:attr:`SinkFailed.original` is the sink's own error, for callers that report
it as the sink raised it (:func:`as_raised`).

``flush`` returns the durable position the sink reports: the caller's
checkpoint never passes it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import Counter, Histogram

from bridge.errors import BridgeError
from bridge.retry import Backoff
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.events import DDLEvent, Event, ResolvedEvent

log = logging.getLogger(__name__)

T = TypeVar("T")


class SinkFailed(BridgeError):
    """The sink failed in a way retrying cannot mend (or ran out of attempts); the caller stops."""

    @property
    def original(self) -> BridgeError:
        """The sink's own error; this one itself when the sink raised something outside the tree."""
        cause = self.__cause__
        return cause if isinstance(cause, BridgeError) else self


@contextlib.contextmanager
def as_raised() -> Iterator[None]:
    """Turns a :class:`SinkFailed` into the sink's own error (for callers that are no drainer:
    a sink's one-line user error stays a one-line user error)."""
    try:
        yield
    except SinkFailed as exc:
        raise exc.original from exc.__cause__


class SinkStopped(BridgeError):
    """The caller stopped (its abort event) while the sink was being retried."""


@dataclass(frozen=True)
class DriverMetrics:
    """Where a driver records its calls (the caller's metrics: names say whose sink it is)."""

    write_seconds: Histogram
    flush_seconds: Histogram
    retries: Counter  # already labelled, e.g. errors_total{where="sink"}


def event_size(event: Event) -> int:
    return 0 if isinstance(event, ResolvedEvent) else len(event.payload)


class SinkDriver:
    """One sink's calls with retries; see the module docstring."""

    def __init__(
        self,
        sink: Sink,
        abort: threading.Event,
        retry_initial: float = 0.1,
        retry_max: float = 5.0,
        metrics: DriverMetrics | None = None,
        attempts: int | None = None,
    ) -> None:
        """``attempts``: how many times one call may fail retriably before :class:`SinkFailed`
        (None: until it works or ``abort`` is set)."""
        self.sink = sink
        self._abort = abort
        self._metrics = metrics
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._attempts = attempts
        self.unflushed: list[Event] = []
        self.unflushed_bytes = 0
        self.retries = 0
        self.last_error = ""

    @property
    def name(self) -> str:
        return self.sink.name

    def open(self, context: SinkContext) -> None:
        self._retry("open", lambda: self.sink.open(context))
        log.info("sink %s open; resuming after commit_ts %d", self.name, context.resume_ts)

    def write(self, events: Sequence[Event]) -> None:
        started = time.perf_counter()
        self._retry("write", lambda: self.sink.write(events))
        if self._metrics is not None:
            self._metrics.write_seconds.observe(time.perf_counter() - started)
        self.unflushed.extend(events)
        self.unflushed_bytes += sum(event_size(e) for e in events)

    def flush(self) -> int:
        """Flush; returns the durable position and forgets the events at or below it."""
        started = time.perf_counter()
        position = self._retry("flush", self.sink.flush, recover=self._rewrite)
        if self._metrics is not None:
            self._metrics.flush_seconds.observe(time.perf_counter() - started)
        kept = [e for e in self.unflushed if e.commit_ts > position]
        if len(kept) != len(self.unflushed):
            self.unflushed = kept
            self.unflushed_bytes = sum(event_size(e) for e in kept)
        return position

    def close(self) -> None:
        try:
            self.sink.close()
        except BridgeError as exc:
            log.warning("sink %s: close failed: %s", self.name, exc)

    def _rewrite(self) -> None:
        if self.unflushed:
            log.info("sink %s: writing %d unflushed events again", self.name, len(self.unflushed))
            self.sink.write(self.unflushed)

    def write_all(self, events: Sequence[Event], max_events: int) -> None:
        """``write`` ``events`` in batches of at most ``max_events`` (a DDL ends a batch)."""
        batch: list[Event] = []
        for event in events:
            batch.append(event)
            if len(batch) >= max_events or isinstance(event, DDLEvent):
                self.write(batch)
                batch = []
        if batch:
            self.write(batch)

    def _retry(self, what: str, call: Callable[[], T], recover: Callable[[], None] | None = None) -> T:
        backoff = Backoff(self._retry_initial, self._retry_max)
        while True:
            try:
                if backoff.failures and recover is not None:
                    recover()
                return call()
            except BridgeError as exc:
                if not exc.retriable:
                    raise SinkFailed(f"sink {self.name}: {what} failed: {exc}") from exc
                if self._attempts is not None and backoff.failures + 1 >= self._attempts:
                    raise SinkFailed(
                        f"sink {self.name}: {what} failed {self._attempts} times, the last: {exc}"
                    ) from exc
                delay = backoff.next_delay()
                self._note_retry(what, exc, delay)
            except Exception as exc:
                log.exception("sink %s: %s raised an unexpected error", self.name, what)
                raise SinkFailed(f"sink {self.name}: {what} failed: {exc!r}") from exc
            if self._abort.wait(delay):
                raise SinkStopped(f"sink {self.name}: stopped while retrying {what}")

    def _note_retry(self, what: str, exc: BridgeError, delay: float) -> None:
        self.retries += 1
        self.last_error = f"{what}: {exc}"
        if self._metrics is not None:
            self._metrics.retries.inc()
        log.warning("sink %s: %s failed (retrying in %.1fs): %s", self.name, what, delay, exc)
