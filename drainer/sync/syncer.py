"""The syncer: merged transactions -> events -> the sink, and the checkpoint after it.

Two tasks on the drainer's event loop and one thread for the sink::

    MergeFeed.next_batch ─▶ build (EventBuilder) ─▶ EventQueue ─▶ drive ─▶ sink thread
                                                    (bounded)            write / flush / checkpoint save

- **build** turns each released transaction into an event (schema tracking
  and filtering, :mod:`drainer.sync.builder`) and, whenever the merge's resolved
  ts advanced and ``resolved-interval`` has passed, adds a
  :class:`ResolvedEvent`, so a sink reports progress even when every
  transaction is filtered out.
- **drive** takes up to ``txn-batch`` events at a time (a DDL ends a batch)
  and writes them; it flushes after a DDL, once ``flush-events`` events or
  ``flush-bytes`` payload bytes are unflushed, ``flush-interval`` after the
  first unflushed write, and on stop. The checkpoint is saved after a DDL's
  flush and then at most every ``checkpoint-interval``, always with the
  position ``flush()`` returned and the schema snapshot valid there (the one
  left by the last DDL at or below it). A periodic save failing with a
  ``retriable`` error (a read-only or unreachable target, past the
  checkpoint's own retries) is logged and tried again an interval later.

Stopping: :meth:`Syncer.stop` ends the build task; drive writes what is
queued, flushes and saves a ``consistent`` checkpoint, and closes the sink.
A :class:`~drainer.builder.HaltError` in build ends it the same way (the
checkpoint stays below the halting transaction) and :meth:`Syncer.run`
raises it. A sink that fails for good stops everything at once; the
checkpoint keeps the last position flushed. A change the downstream refuses
(:class:`~bridge.sink.errors.SinkApplyError`) is first found by its
commit_ts (:meth:`Syncer._isolate`): skipped into the dead-letter directory
with ``on-error = "skip-and-log"``, else the drainer halts naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from bridge.errors import BridgeError, UserError
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.driver import DriverMetrics, SinkDriver, SinkFailed, SinkStopped, event_size
from bridge.sink.errors import SinkApplyError
from bridge.sink.events import DDLEvent, Event, ResolvedEvent, TxnEvent
from drainer import metrics
from drainer.checkpoint import Checkpoint, CheckpointState
from drainer.collect.merger import MergeFeed, PulledTxn
from drainer.config import DrainerConfig
from drainer.sync.builder import EventBuilder, HaltError
from drainer.sync.deadletter import DeadLetter

log = logging.getLogger(__name__)

T = TypeVar("T")

DRIVER_METRICS = DriverMetrics(
    metrics.SINK_WRITE_SECONDS, metrics.SINK_FLUSH_SECONDS, metrics.ERRORS.labels("sink")
)


@dataclass(frozen=True)
class SyncSettings:
    txn_batch: int = 256
    flush_interval: float = 1.0
    flush_events: int = 4096
    flush_bytes: int = 64 << 20
    checkpoint_interval: float = 3.0
    resolved_interval: float = 1.0
    queue_events: int = 8192
    queue_bytes: int = 64 << 20
    retry_initial: float = 0.1
    retry_max: float = 5.0

    @classmethod
    def from_config(cls, config: DrainerConfig) -> SyncSettings:
        return cls(
            txn_batch=config.txn_batch,
            flush_interval=config.flush_interval,
            flush_events=config.flush_events,
            flush_bytes=config.flush_bytes,
            checkpoint_interval=config.checkpoint_interval,
            resolved_interval=config.resolved_interval,
            queue_bytes=config.queue_bytes,
        )


class EventQueue:
    """Built events waiting for the sink thread, bounded by count and payload bytes.

    An event larger than the byte bound still goes in when the queue is empty.
    Used from one event loop: one producer (build), one consumer (drive).
    """

    def __init__(self, max_events: int, max_bytes: int) -> None:
        self._items: deque[Event] = deque()
        self._bytes = 0
        self._closed = False
        self._max_events = max_events
        self._max_bytes = max_bytes
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def _has_room(self) -> bool:
        return not self._items or (len(self._items) < self._max_events and self._bytes < self._max_bytes)

    async def put(self, event: Event) -> None:
        while not self._has_room():
            self._writable.clear()
            await self._writable.wait()
        self._append(event)

    def _append(self, event: Event) -> None:
        self._items.append(event)
        self._bytes += event_size(event)
        self._readable.set()

    def close(self, last: Event | None = None) -> None:
        """No more events after ``last`` (added whatever the bounds); :meth:`get_batch`
        reports the end once the queue is empty."""
        if last is not None and not self._closed:
            self._append(last)
        self._closed = True
        self._readable.set()

    async def get_batch(self, max_items: int, timeout: float | None) -> tuple[list[Event], bool]:
        """Up to ``max_items`` events (a DDL ends the batch) and whether the queue has ended."""
        if not self._items and not self._closed:
            self._readable.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._readable.wait(), timeout)
        batch: list[Event] = []
        while self._items and len(batch) < max_items:
            event = self._items.popleft()
            self._bytes -= event_size(event)
            batch.append(event)
            if isinstance(event, DDLEvent):
                break
        if self._has_room():
            self._writable.set()
        return batch, self._closed and not self._items


class SinkRefused(UserError):
    """The downstream refused the change at one commit_ts, and ``on-error`` is ``halt``."""


def refused(failure: SinkFailed) -> bool:
    """Whether the sink failed because the downstream refused a change (not a bug, not an outage)."""
    return isinstance(failure.original, SinkApplyError)


class Syncer:
    """Runs build and drive (see the module docstring) from the checkpoint ``start``."""

    def __init__(
        self,
        feed: MergeFeed,
        builder: EventBuilder,
        sink: Sink,
        checkpoint: Checkpoint,
        start: CheckpointState,
        settings: SyncSettings | None = None,
        context: SinkContext | None = None,
        dead_letter: DeadLetter | None = None,
    ) -> None:
        """``context``: what the sink is opened with (default: the checkpoint's position and
        schema, cluster 0); its position and schema are ``start``'s whatever it says.
        ``dead_letter``: where a transaction the builder cannot replicate goes instead of halting."""
        self.dead_letter = dead_letter
        self.settings = settings or SyncSettings()
        base = context or SinkContext()
        self.context = SinkContext.at(
            start.commit_ts,
            start.schema,
            cluster_id=base.cluster_id,
            safe_mode=base.safe_mode,
            data_dir=base.data_dir,
            metrics_registry=base.metrics_registry,
        )
        self._feed = feed
        self._builder = builder
        self._checkpoint = checkpoint
        self._abort = threading.Event()
        self.driver = SinkDriver(
            sink, self._abort, self.settings.retry_initial, self.settings.retry_max, DRIVER_METRICS
        )
        self._queue = EventQueue(self.settings.queue_events, self.settings.queue_bytes)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="drainer-sink")
        self._history: list[tuple[int, bytes]] = [(start.commit_ts, start.schema)]
        self._build_task: asyncio.Task[None] | None = None
        self._queued_ts = start.commit_ts
        self.start_ts = start.commit_ts
        self.checkpoint_ts = start.commit_ts
        self.flushed_ts = start.commit_ts
        self.resolved_ts = start.commit_ts
        self.halted: BridgeError | None = None
        self.clean_stop = False
        metrics.CHECKPOINT_TS.set(start.commit_ts)

    async def _in_sink_thread(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, call, *args)

    async def run(self) -> None:
        """Open the sink and replicate until stopped; raises what stopped it otherwise."""
        try:
            await self._in_sink_thread(self.driver.open, self.context)
            if self.clean_stop:
                self._queue.close()
            else:
                self._build_task = asyncio.create_task(self._build_loop(), name="drainer-build")
            await self._drive_loop()
            if self.halted is not None:
                raise self.halted
        except SinkStopped:
            if not self.clean_stop:
                raise
            log.warning("stopped while the sink was failing: the checkpoint stays at %d", self.checkpoint_ts)
        finally:
            self._abort.set()
            if self._build_task is not None:
                self._build_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._build_task
            await self._in_sink_thread(self.driver.close)
            self._executor.shutdown(wait=True)

    def stop(self) -> None:
        """Begin a clean stop: no more events are built; queued ones are written and flushed.
        A sink being retried is not waited for."""
        self.clean_stop = True
        self._abort.set()
        if self._build_task is not None:
            self._build_task.cancel()

    # -- build ---------------------------------------------------------------

    async def _build_loop(self) -> None:
        built = self.start_ts  # every transaction at or below it is built (and queued if replicated)
        self._queued_ts = sent = self.start_ts
        sent_at = 0.0
        interval = self.settings.resolved_interval
        try:
            # Checked as well as the task's cancellation: on Python 3.11 asyncio.wait_for
            # can swallow a cancel that lands as its inner wait completes.
            while not self._abort.is_set():
                wait = max(sent_at + interval - time.monotonic(), 0.01)
                batch = await self._feed.next_batch(self.resolved_ts, timeout=wait)
                for txn in batch.txns:
                    await self._build(txn)
                    built = txn.commit_ts
                built = self.resolved_ts = batch.resolved
                metrics.RESOLVED_TS.set(batch.resolved)
                metrics.QUEUED_EVENTS.set(len(self._queue))
                sent = max(sent, self._queued_ts)  # events go out in strictly increasing commit_ts
                if built > sent and time.monotonic() - sent_at >= interval:
                    await self._queue.put(ResolvedEvent(built))
                    metrics.EVENTS.labels("resolved").inc()
                    sent, sent_at = built, time.monotonic()
                await asyncio.sleep(0)
        except BridgeError as exc:
            metrics.ERRORS.labels("fatal").inc()
            log.error("replication halted: %s", exc)
            self.halted = exc
        finally:
            # What was built before a stop or a halt may still become the checkpoint.
            last = ResolvedEvent(built) if built > max(sent, self._queued_ts) else None
            self._queue.close(last)

    async def _build(self, txn: PulledTxn) -> None:
        try:
            built = self._builder.build(txn)
        except HaltError as exc:
            if self.dead_letter is None:
                raise
            await asyncio.to_thread(self.dead_letter.put, txn, exc)
            return
        if built.snapshot is not None:
            self._history.append((txn.commit_ts, built.snapshot))
        if built.event is not None:
            await self._queue.put(built.event)
            self._queued_ts = txn.commit_ts

    # -- drive ---------------------------------------------------------------

    async def _drive_loop(self) -> None:
        first_unflushed = saved_at = time.monotonic()
        settings = self.settings
        try:
            while True:
                timeout = self._next_deadline(first_unflushed, saved_at) - time.monotonic()
                events, ended = await self._queue.get_batch(settings.txn_batch, max(timeout, 0.0))
                if events:
                    if not self.driver.unflushed:
                        first_unflushed = time.monotonic()
                    await self._write(events)
                ddl = bool(events) and isinstance(events[-1], DDLEvent)
                if self.driver.unflushed and (ended or ddl or self._flush_due(first_unflushed)):
                    await self._flush()
                if ended:
                    await self._save(consistent=self.clean_stop and self.halted is None)
                    return
                if self.flushed_ts > self.checkpoint_ts and (
                    ddl or time.monotonic() - saved_at >= settings.checkpoint_interval
                ):
                    await self._save_or_defer()
                    saved_at = time.monotonic()
        except BaseException:
            await self._save_flushed()
            raise

    async def _write(self, events: list[Event]) -> None:
        try:
            await self._in_sink_thread(self.driver.write, events)
        except SinkFailed as exc:
            if not refused(exc):
                raise
            await self._isolate([*self.driver.unflushed, *events], exc)

    async def _flush(self) -> None:
        try:
            position = await self._in_sink_thread(self.driver.flush)
        except SinkFailed as exc:
            if not refused(exc):
                raise
            await self._isolate(list(self.driver.unflushed), exc)
            return
        self.flushed_ts = max(self.flushed_ts, position)

    async def _isolate(self, pending: list[Event], failure: SinkFailed) -> None:
        """The downstream refused one of ``pending`` (everything unflushed): reopen the sink at the
        last flushed position and apply them one at a time (write, flush), so the refused one is
        known by its commit_ts: stored in the dead-letter directory and skipped with
        ``on-error = "skip-and-log"``, else the drainer halts naming the ``[skip]`` line that skips it."""
        log.warning(
            "the downstream refused a change (%s); applying the %d unflushed events one at a time to find it",
            failure.original,
            len(pending),
        )
        await self._reopen()
        for event in pending:
            if event.commit_ts <= self.flushed_ts:
                continue
            try:
                await self._in_sink_thread(self.driver.write, [event])
                position = await self._in_sink_thread(self.driver.flush)
            except SinkFailed as exc:
                if not refused(exc) or isinstance(event, ResolvedEvent):
                    raise
                await self._skip_refused(event, exc)
                await self._reopen()
                continue
            self.flushed_ts = max(self.flushed_ts, position)

    async def _reopen(self) -> None:
        await self._in_sink_thread(self.driver.close)
        self.driver.unflushed, self.driver.unflushed_bytes = [], 0
        base, position = self.context, self.flushed_ts
        context = SinkContext.at(
            position,
            self.snapshot_at(position),
            cluster_id=base.cluster_id,
            safe_mode=True,  # what the sink applied of the unflushed events is applied again
            data_dir=base.data_dir,
            metrics_registry=base.metrics_registry,
        )
        await self._in_sink_thread(self.driver.open, context)

    async def _skip_refused(self, event: TxnEvent | DDLEvent, failure: SinkFailed) -> None:
        ts = event.commit_ts
        if self.dead_letter is None:
            raise SinkRefused(
                f"the downstream refused the {'DDL' if isinstance(event, DDLEvent) else 'transaction'} "
                f"at commit_ts {ts}: {failure.original}; to skip it, add the line "
                f"commit-ts = [[{ts}, {ts}]] under [skip] in the drainer's config and restart it "
                '(or on-error = "skip-and-log" under [skip]: every refused change is stored in the '
                "dead-letter directory and skipped)"
            ) from failure
        parts = event.parts if isinstance(event, TxnEvent) else None  # a chunked transaction's
        await self._in_sink_thread(self.dead_letter.refused, ts, event.payload, failure.original, parts)

    def _next_deadline(self, first_unflushed: float, saved_at: float) -> float:
        deadlines = [time.monotonic() + 1.0]
        if self.driver.unflushed:
            deadlines.append(first_unflushed + self.settings.flush_interval)
        if self.flushed_ts > self.checkpoint_ts:
            deadlines.append(saved_at + self.settings.checkpoint_interval)
        return min(deadlines)

    def _flush_due(self, first_unflushed: float) -> bool:
        driver, settings = self.driver, self.settings
        return (
            len(driver.unflushed) >= settings.flush_events
            or driver.unflushed_bytes >= settings.flush_bytes
            or time.monotonic() - first_unflushed >= settings.flush_interval
        )

    def snapshot_at(self, position: int) -> bytes:
        """The schema snapshot valid at ``position``; forgets older ones."""
        index = 0
        for i, (ts, _) in enumerate(self._history):
            if ts <= position:
                index = i
        del self._history[:index]
        return self._history[0][1]

    async def _save(self, consistent: bool) -> None:
        position = self.flushed_ts
        if position < self.checkpoint_ts or (position == self.checkpoint_ts and not consistent):
            return
        state = CheckpointState(position, self.snapshot_at(position), consistent)
        await self._in_sink_thread(self._checkpoint.save, state)
        self.checkpoint_ts = position
        metrics.CHECKPOINT_TS.set(position)
        log.debug("checkpoint at commit_ts %d%s", position, " (consistent)" if consistent else "")

    async def _save_or_defer(self) -> None:
        """A periodic save: one that failed in a way that may pass (``retriable``: the target
        is read-only or unreachable for longer than the checkpoint retries) is logged and tried
        again at the next interval; replication goes on, the checkpoint stays where it was."""
        try:
            await self._save(consistent=False)
        except BridgeError as exc:
            if not exc.retriable:
                raise
            metrics.ERRORS.labels("checkpoint").inc()
            log.warning(
                "checkpoint not saved at commit_ts %d (it stays at %d), trying again in %gs: %s",
                self.flushed_ts,
                self.checkpoint_ts,
                self.settings.checkpoint_interval,
                exc,
            )

    async def _save_flushed(self) -> None:
        """After a failure: keep what was flushed (never more)."""
        if self.flushed_ts <= self.checkpoint_ts:
            return
        try:
            await asyncio.shield(self._save(consistent=False))
        except BridgeError as exc:
            log.error("could not save the checkpoint at commit_ts %d: %s", self.flushed_ts, exc)

    def status(self) -> dict[str, object]:
        return {
            "sink": self.driver.name,
            "checkpoint_ts": self.checkpoint_ts,
            "flushed_ts": self.flushed_ts,
            "resolved_ts": self.resolved_ts,
            "queued_events": len(self._queue),
            "unflushed_events": len(self.driver.unflushed),
            "sink_retries": self.driver.retries,
            "sink_last_error": self.driver.last_error or None,
            "halted": str(self.halted) if self.halted else None,
        }
