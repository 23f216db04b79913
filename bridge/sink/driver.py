"""Calling a sink, on the sink's own thread, with retries.

:class:`SinkDriver` is used only from the one thread a sink runs on (the
drainer's sink thread, ``replay``, ``consume --apply``). It remembers the
events written since the last successful flush (bounded by the caller's
flush policy) so that it can replay them:

- ``write`` raised a retriable error: after a backoff, ``write`` again with
  the same events;
- ``flush`` raised a retriable error: after a backoff, ``write`` every event
  since the last successful flush again, then ``flush``;

until it works or the caller stops it (:class:`SinkStopped`). Backoff doubles
from ``retry_initial`` to ``retry_max``; every retry is logged and counted
(:class:`DriverMetrics`, e.g. the drainer's
``bridge_drainer_errors_total{where="sink"}``). A non-retriable error, or
an exception outside :mod:`bridge.errors` (a sink bug), raises
:class:`SinkFailed` with the sink's message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from prometheus_client import Counter, Histogram

from bridge.errors import BridgeError
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.events import Event, ResolvedEvent

log = logging.getLogger(__name__)

T = TypeVar("T")


class SinkFailed(BridgeError):
    """The sink failed in a way retrying cannot mend; the drainer stops."""


class SinkStopped(BridgeError):
    """The drainer stopped while the sink was being retried."""


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
    ) -> None:
        self.sink = sink
        self._abort = abort
        self._metrics = metrics
        self._retry_initial = retry_initial
        self._retry_max = retry_max
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

    def _retry(self, what: str, call: Callable[[], T], recover: Callable[[], None] | None = None) -> T:
        delay = self._retry_initial
        failed = False
        while True:
            try:
                if failed and recover is not None:
                    recover()
                return call()
            except BridgeError as exc:
                if not exc.retriable:
                    raise SinkFailed(f"sink {self.name}: {what} failed: {exc}") from exc
                self._note_retry(what, exc, delay)
            except Exception as exc:
                log.exception("sink %s: %s raised an unexpected error", self.name, what)
                raise SinkFailed(f"sink {self.name}: {what} failed: {exc!r}") from exc
            failed = True
            if self._abort.wait(delay):
                raise SinkStopped(f"sink {self.name}: stopped while retrying {what}")
            delay = min(delay * 2, self._retry_max)

    def _note_retry(self, what: str, exc: BridgeError, delay: float) -> None:
        self.retries += 1
        self.last_error = f"{what}: {exc}"
        if self._metrics is not None:
            self._metrics.retries.inc()
        log.warning("sink %s: %s failed (retrying in %.1fs): %s", self.name, what, delay, exc)
