"""Group commit: many concurrent writers, one append and one fsync per batch.

Callers :meth:`GroupCommitter.submit` records and wait. A task on the event
loop takes *everything* pending (up to ``max_batch_bytes``, at least one
submission), and a dedicated thread appends it to the value log and fsyncs
once, while the loop keeps accepting the next batch. The batch is then
offered to the chaser, and its callers are acknowledged once the index has
applied it, or ``ack_wait`` seconds after the fsync, whichever comes first:
a durable binlog is never held back by a slow index.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import deque

from pump import metrics
from pump.storage.chaser import Chaser, Entry, WrittenBatch
from pump.storage.errors import StorageClosed, StorageError, StorageFailed, StorageFull
from pump.storage.segment import Pointer
from pump.storage.vlog import ValueLog

log = logging.getLogger(__name__)

_new_tuple = tuple.__new__

LAG_WARNING_INTERVAL = 10.0

_FSYNCS = metrics.FSYNCS
_BATCH_SIZE = metrics.WRITE_BATCH_SIZE


# (payload, tp, start_ts, commit_ts) of one binlog to store. Plain tuples, not
# NamedTuples, on this path: it runs per binlog, and a NamedTuple costs ~0.3 us
# more to build.
Record = tuple[bytes, int, int, int]


_Submission = tuple[list[Record], "asyncio.Future[None]"]


class GroupCommitter:
    """See the module docstring. Runs on the event loop that created it."""

    def __init__(self, vlog: ValueLog, chaser: Chaser, *, max_batch_bytes: int, ack_wait: float) -> None:
        self._vlog = vlog
        self._chaser = chaser
        self._max_batch_bytes = max_batch_bytes
        self._ack_wait = ack_wait
        self._loop = asyncio.get_running_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pump-vlog")
        self._pending: deque[_Submission] = deque()
        self._wakeup = asyncio.Event()
        self._awaiting: deque[tuple[Pointer, list[asyncio.Future[None]]]] = deque()
        self._applied = chaser.applied
        self._failed: StorageError | None = None
        self._closing = False
        self._last_lag_warning = 0.0
        self.batches = 0
        self.records = 0
        self._task = asyncio.create_task(self._run(), name="pump-group-commit")

    async def submit(self, records: list[Record]) -> None:
        """Return once ``records`` are durable (and indexed, within ``ack_wait``)."""
        if self._failed is not None:
            raise StorageFailed(f"the storage refuses writes after an earlier failure: {self._failed}")
        if self._closing:
            raise StorageClosed("the storage is closing")
        future: asyncio.Future[None] = self._loop.create_future()
        self._pending.append((records, future))
        self._wakeup.set()
        await future

    def on_applied(self, applied: Pointer) -> None:
        """The chaser indexed the log up to ``applied`` (called on the loop)."""
        self._applied = applied
        self._ack_through(applied, lagging=False)

    async def close(self) -> None:
        """Write what is pending, then stop; callers still waiting for the index are acknowledged."""
        self._closing = True
        self._wakeup.set()
        await self._task
        while self._awaiting:
            _, futures = self._awaiting.popleft()
            _resolve(futures, None)
        self._executor.shutdown(wait=True)

    async def _run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                await self._commit_one_batch()
            if self._closing:
                return

    def _take_batch(self) -> tuple[list[Record], list[asyncio.Future[None]]]:
        records: list[Record] = []
        futures: list[asyncio.Future[None]] = []
        size = 0
        while self._pending and (not records or size < self._max_batch_bytes):
            submitted, future = self._pending.popleft()
            records += submitted
            futures.append(future)
            size += sum(len(record[0]) for record in submitted)
        return records, futures

    async def _commit_one_batch(self) -> None:
        records, futures = self._take_batch()
        if self._failed is not None:
            _resolve(
                futures, StorageFailed(f"the storage refuses writes after an earlier failure: {self._failed}")
            )
            return
        try:
            end = await self._loop.run_in_executor(self._executor, self._append_and_sync, records)
        except StorageFull as exc:  # cut back whole: refuse this batch, take the next one
            log.error("value log write refused, the disk is full: %s", exc)
            _resolve(futures, exc)
            return
        except Exception as exc:
            error = (
                exc if isinstance(exc, StorageError) else StorageFailed(f"value log write failed: {exc!r}")
            )
            self._failed = error
            log.critical("value log write failed; refusing writes until reopened: %s", exc, exc_info=True)
            _resolve(futures, error)
            return
        self.batches += 1
        self.records += len(records)
        _BATCH_SIZE.observe(len(records))
        self._awaiting.append((end, futures))
        if self._covers(self._applied, end):
            self._ack_through(end, lagging=False)
        elif self._ack_wait <= 0:
            self._ack_through(end, lagging=False)  # configured to acknowledge at fsync
        else:
            self._loop.call_later(self._ack_wait, self._ack_through, end, True)

    def _append_and_sync(self, records: list[Record]) -> Pointer:
        """In the vlog thread: append, fsync once, hand the batch to the chaser."""
        prev_end = self._vlog.head
        pointers = self._vlog.append([(payload, max(start, commit)) for payload, _, start, commit in records])
        if self._vlog.sync_enabled:
            self._vlog.sync()
            _FSYNCS.inc()
        end = self._vlog.head
        entries = [
            _new_tuple(Entry, (tp, start, commit, pointer))  # an Entry without NamedTuple.__new__'s cost
            for (_, tp, start, commit), pointer in zip(records, pointers, strict=True)
        ]
        self._chaser.offer(WrittenBatch(prev_end, end, entries))
        return end

    def _covers(self, applied: Pointer, end: Pointer) -> bool:
        return self._vlog.next_position(end) <= self._vlog.next_position(applied)

    def _ack_through(self, position: Pointer, lagging: bool) -> None:
        while self._awaiting and self._covers(position, self._awaiting[0][0]):
            _, futures = self._awaiting.popleft()
            _resolve(futures, None)
            if lagging:
                self._warn_lag()

    def _warn_lag(self) -> None:
        now = time.monotonic()
        if now - self._last_lag_warning >= LAG_WARNING_INTERVAL:
            self._last_lag_warning = now
            log.warning(
                "the index lags behind the value log by more than %.3gs: acknowledging durable writes "
                "before they are indexed",
                self._ack_wait,
            )


def _resolve(futures: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for future in futures:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
