"""The chaser: the one thread that feeds the value log, in log order, through the
sorter into the index.

The write path never waits for it. After each group commit's fsync the
writer *offers* the batch: it always publishes the new durable head, and it
queues the batch's records in memory only while fewer than ``queue_limit``
batches are waiting. The chaser applies queued batches when they continue
exactly where it stands (the fast path); when batches were not queued
because it fell behind, it reads the missing stretch back from the value log
(the slow path, the seeds' ``slowChaser``). On open it starts at the index's
applied position and catches up with the log the same way.

Each round (a run of contiguous queued batches, or a bounded stretch read
from the log) is applied to the index in one transaction together with the
position after it; then ``on_applied(position, watermark)`` is called, from
this thread.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from pump.storage.index import Index, Marks
from pump.storage.segment import Pointer
from pump.storage.sorter import Sorter
from pump.storage.vlog import ValueLog

log = logging.getLogger(__name__)

ROUND_RECORDS = 8192
ROUND_BYTES = 64 << 20


class Entry(NamedTuple):
    """What the sorter needs of one record."""

    tp: int
    start_ts: int
    commit_ts: int
    pointer: Pointer


@dataclass
class WrittenBatch:
    prev_end: Pointer  # the log head before the batch
    end: Pointer  # the log head after it
    entries: list[Entry]


Parse = Callable[[bytes], tuple[int, int, int]]
OnApplied = Callable[[Pointer, int], None]


class Chaser:
    """See the module docstring. ``lock`` guards the sorter for readers in other threads."""

    def __init__(
        self,
        vlog: ValueLog,
        index: Index,
        sorter: Sorter,
        applied: Pointer,
        *,
        parse: Parse,
        on_applied: OnApplied,
        on_failed: Callable[[BaseException], None],
        queue_limit: int,
    ) -> None:
        self.vlog, self.index, self.sorter = vlog, index, sorter
        self.lock = threading.Lock()
        self._parse = parse
        self._on_applied = on_applied
        self._on_failed = on_failed
        self._queue_limit = queue_limit
        self._cond = threading.Condition()
        self._queue: deque[WrittenBatch] = deque()
        self._commands: deque[tuple[Callable[[], object], concurrent.futures.Future[object]]] = deque()
        self._applied = applied
        self._durable = vlog.head
        self._stopping = False
        self.read_back = 0  # records the slow path read from the log
        self._thread = threading.Thread(target=self._run, name="pump-chaser", daemon=True)

    @property
    def applied(self) -> Pointer:
        return self._applied

    def start(self) -> None:
        self._thread.start()

    def offer(self, batch: WrittenBatch) -> None:
        """Called by the writer after the batch is durable, in log order."""
        with self._cond:
            self._durable = batch.end
            if len(self._queue) < self._queue_limit:
                self._queue.append(batch)
            self._cond.notify()

    def call(self, fn: Callable[[], object]) -> concurrent.futures.Future[object]:
        """Run ``fn`` in the chaser thread between rounds (for GC)."""
        future: concurrent.futures.Future[object] = concurrent.futures.Future()
        with self._cond:
            if self._stopping:
                raise RuntimeError("the chaser is stopped")
            self._commands.append((fn, future))
            self._cond.notify()
        return future

    def stop(self) -> None:
        """Apply everything durable, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join()

    def _behind(self) -> bool:
        return self._pos(self._applied) < self._pos(self._durable)

    def _pos(self, position: Pointer) -> Pointer:
        return self.vlog.next_position(position)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not (self._commands or self._queue or self._behind() or self._stopping):
                        self._cond.wait()
                    if self._stopping and not self._commands and not self._queue and not self._behind():
                        return
                    commands = list(self._commands)
                    self._commands.clear()
                for fn, future in commands:
                    _run_command(fn, future)
                self._round()
        except BaseException as exc:
            log.critical("the index chaser stopped: %s", exc, exc_info=True)
            self._fail_commands(exc)
            self._on_failed(exc)

    def _fail_commands(self, exc: BaseException) -> None:
        with self._cond:
            self._stopping = True
            commands = list(self._commands)
            self._commands.clear()
        for _, future in commands:
            future.set_exception(exc)

    def _round(self) -> None:
        entries, end = self._take_queued()
        if end is None:
            entries, end = self._read_back()
        if end is None:
            return
        with self.lock:
            for entry in entries:
                self.sorter.add(*entry)
            changes = self.sorter.take_changes()
            marks = Marks(self.sorter.watermark, self.sorter.max_seen, self.sorter.latest_ts)
        self.index.apply(changes, marks, end)
        self._applied = end
        self._on_applied(end, marks.watermark)

    def _take_queued(self) -> tuple[list[Entry], Pointer | None]:
        """Queued batches that continue at the applied position (fast path)."""
        entries: list[Entry] = []
        end: Pointer | None = None
        position = self._pos(self._applied)
        with self._cond:
            while self._queue and self._pos(self._queue[0].prev_end) < position:
                self._queue.popleft()  # already read back from the log
            while self._queue and self._pos(self._queue[0].prev_end) == position:
                batch = self._queue.popleft()
                entries += batch.entries
                end = batch.end
                position = self._pos(batch.end)
                if len(entries) >= ROUND_RECORDS:
                    break
        return entries, end

    def _read_back(self) -> tuple[list[Entry], Pointer | None]:
        """Read the stretch no queued batch covers from the log (slow path)."""
        with self._cond:
            target = self._queue[0].prev_end if self._queue else self._durable
        entries: list[Entry] = []
        end: Pointer | None = None
        size = 0
        with contextlib.closing(self.vlog.scan(self._applied, target)) as records:
            for pointer, record_end, payload in records:
                tp, start_ts, commit_ts = self._parse(payload)
                entries.append(Entry(tp, start_ts, commit_ts, pointer))
                end = record_end
                size += len(payload)
                if len(entries) >= ROUND_RECORDS or size >= ROUND_BYTES:
                    break
        if end is None and self._pos(self._applied) < self._pos(target):
            end = target  # only empty segment ends lay between
        self.read_back += len(entries)
        return entries, end


def _run_command(fn: Callable[[], object], future: concurrent.futures.Future[object]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(fn())
    except Exception as exc:  # noqa: BLE001 - handed to the caller through the future
        future.set_exception(exc)
