"""``PumpsClient``: the pump client for synchronous and threaded producers.

It runs an :class:`AsyncPumpsClient` on an event loop in a background thread
and hands each call to it, so both APIs share one routing, retry and batching
path; binlogs from many threads coalesce into the same batched calls.

Writes and timestamp requests reach the loop through an inbox: a calling
thread appends its call and wakes the loop only when no wake-up is already
pending, and the loop takes everything in the inbox at once. Under load one
wake-up carries many threads' calls (a wake-up per call cost more CPU than
the write itself); an idle client still sends a lone binlog at once. Each
caller then blocks on a lock of its own that the loop releases with the
result (a ``concurrent.futures.Future`` per call cost more).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from bridge.proto import binlog_pb2
from bridge.pumpclient.client import AsyncPumpsClient
from bridge.pumpclient.config import PumpClientConfig

T = TypeVar("T")


class _Handoff:
    """One call's outcome, handed from the loop thread to the thread that waits for it."""

    __slots__ = ("_ready", "error", "result")

    def __init__(self) -> None:
        self._ready = threading.Lock()
        self._ready.acquire()  # held until settle(): the caller's acquire blocks until then
        self.result: Any = None
        self.error: BaseException | None = None

    def settle(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error = result, error
        self._ready.release()

    def wait(self) -> Any:
        self._ready.acquire()
        if self.error is not None:
            raise self.error
        return self.result


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
        self._inbox: deque[tuple[Coroutine[Any, Any, Any], _Handoff]] = deque()
        self._inbox_lock = threading.Lock()
        self._wake_pending = False
        self._calls: dict[asyncio.Task[Any], _Handoff] = {}

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
        return int(self._call(self._client.get_timestamps(count)))

    def get_timestamp(self) -> int:
        """One fresh timestamp (a start_ts or commit_ts) from the meta service's TSO."""
        return int(self._call(self._client.get_timestamps(1)))

    def write_binlog(self, binlog: binlog_pb2.Binlog) -> None:
        """Write one binlog; blocks until it is durable on a pump (see AsyncPumpsClient)."""
        self._call(self._client.write_binlog(binlog))

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the loop through the inbox; its result or exception."""
        try:
            self._check_caller()
        except RuntimeError:
            coro.close()
            raise
        handoff = _Handoff()
        with self._inbox_lock:
            self._inbox.append((coro, handoff))
            wake, self._wake_pending = not self._wake_pending, True
        if wake:
            try:
                self._loop.call_soon_threadsafe(self._take_inbox)
            except RuntimeError:  # the loop closed meanwhile: nobody will take the inbox
                self._fail_inbox()
        return handoff.wait()

    def _fail_inbox(self) -> None:
        """Settle every call still in the inbox with the closed client's error."""
        with self._inbox_lock:
            stranded = list(self._inbox)
            self._inbox.clear()
            self._wake_pending = False
        for coro, handoff in stranded:
            coro.close()
            handoff.settle(None, RuntimeError("the pump client is closed"))

    def _take_inbox(self) -> None:
        """On the loop: start every call in the inbox."""
        with self._inbox_lock:
            items = list(self._inbox)
            self._inbox.clear()
            self._wake_pending = False
        for coro, handoff in items:
            task = self._loop.create_task(coro)
            self._calls[task] = handoff
            task.add_done_callback(self._settle)

    def _settle(self, task: asyncio.Task[Any]) -> None:
        handoff = self._calls.pop(task)
        if task.cancelled():
            handoff.settle(None, concurrent.futures.CancelledError())
        elif (exc := task.exception()) is not None:
            handoff.settle(None, exc)
        else:
            handoff.settle(task.result(), None)

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
            self._fail_inbox()  # calls that arrived after the loop stopped taking the inbox
            unsettled, self._calls = list(self._calls.values()), {}
            for handoff in unsettled:  # cancelled at shutdown, their callbacks never ran
                handoff.settle(None, concurrent.futures.CancelledError())

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
