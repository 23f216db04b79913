"""``PumpsClient``: the pump client for synchronous and threaded producers.

It runs an :class:`AsyncPumpsClient` on an event loop in a background thread
and hands each call to it, so both APIs share one routing, retry and batching
path; binlogs from many threads coalesce into the same batched calls.

Writes reach the loop through an inbox: a calling thread appends its binlog
and wakes the loop only when no wake-up is already pending, and the loop
takes everything in the inbox at once. Under load one wake-up carries many
threads' binlogs (a wake-up per call cost more CPU than the write itself);
an idle client still sends a lone binlog at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections import deque
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from bridge.proto import binlog_pb2
from bridge.pumpclient.client import AsyncPumpsClient
from bridge.pumpclient.config import PumpClientConfig

T = TypeVar("T")


class PumpsClient:
    """Blocking facade of :class:`AsyncPumpsClient`; safe to share between threads.

    Use ``with PumpsClient(meta_addrs, config) as client`` or call
    :meth:`start` and :meth:`close`. Methods raise what the asynchronous
    client raises.
    """

    def __init__(self, meta_addrs: str | Sequence[str], config: PumpClientConfig | None = None) -> None:
        self._client = AsyncPumpsClient(meta_addrs, config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pump-client-loop", daemon=True)
        self._lock = threading.Lock()
        self._state = "new"
        self._inbox: deque[tuple[binlog_pb2.Binlog, concurrent.futures.Future[None]]] = deque()
        self._inbox_lock = threading.Lock()
        self._wake_pending = False
        self._writes: set[asyncio.Task[None]] = set()

    def __enter__(self) -> PumpsClient:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def config(self) -> PumpClientConfig:
        return self._client.config

    @property
    def cluster_id(self) -> int:
        return self._client.cluster_id

    @property
    def available(self) -> list[str]:
        return self._client.available

    @property
    def unavailable(self) -> list[str]:
        return self._client.unavailable

    def start(self) -> None:
        """Start the loop thread and the client; raises MetaError if the meta service cannot answer."""
        with self._lock:
            if self._state != "new":
                raise RuntimeError(f"the pump client is {self._state}")
            self._thread.start()
            self._state = "started"
        try:
            self._run(self._client.start())
        except BaseException:
            self.close()
            raise

    def get_timestamps(self, count: int = 1) -> int:
        """Allocate ``count`` consecutive timestamps from the meta service's TSO; returns the first."""
        return self._run(self._client.get_timestamps(count))

    def get_timestamp(self) -> int:
        """One fresh timestamp (a start_ts or commit_ts) from the meta service's TSO."""
        return self._run(self._client.get_timestamps(1))

    def write_binlog(self, binlog: binlog_pb2.Binlog) -> None:
        """Write one binlog; blocks until it is durable on a pump (see AsyncPumpsClient)."""
        self._check_caller()
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._inbox_lock:
            self._inbox.append((binlog, done))
            wake, self._wake_pending = not self._wake_pending, True
        if wake:
            self._loop.call_soon_threadsafe(self._take_inbox)
        done.result()

    def _take_inbox(self) -> None:
        """On the loop: start a write for every binlog in the inbox."""
        with self._inbox_lock:
            items = list(self._inbox)
            self._inbox.clear()
            self._wake_pending = False
        for binlog, done in items:
            if not done.set_running_or_notify_cancel():
                continue
            task = self._loop.create_task(self._client.write_binlog(binlog))
            self._writes.add(task)
            task.add_done_callback(functools.partial(self._settle, done))

    def _settle(self, done: concurrent.futures.Future[None], task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if task.cancelled():
            done.set_exception(RuntimeError("the pump client closed before the binlog was written"))
        elif (exc := task.exception()) is not None:
            done.set_exception(exc)
        else:
            done.set_result(None)

    def close(self) -> None:
        """Close the client and stop the loop thread. Idempotent."""
        with self._lock:
            if self._state != "started":
                self._state = "closed"
                return
            self._state = "closed"
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
            with self._inbox_lock:
                stranded = list(self._inbox)
                self._inbox.clear()
            for _, done in stranded:  # arrived after the loop stopped taking the inbox
                if done.set_running_or_notify_cancel():
                    done.set_exception(RuntimeError("the pump client is closed"))

    async def _shutdown(self) -> None:
        """Close the client, then end what is still running so that no caller waits forever."""
        await self._client.close()
        current = asyncio.current_task()
        leftovers = [task for task in asyncio.all_tasks() if task is not current]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    def _check_caller(self) -> None:
        if self._state != "started":
            raise RuntimeError(f"the pump client is {self._state}")
        if threading.current_thread() is self._thread:
            raise RuntimeError("PumpsClient called from its own event loop; use AsyncPumpsClient there")

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            self._check_caller()
        except RuntimeError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
