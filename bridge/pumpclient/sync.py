"""``PumpsClient``: the pump client for synchronous and threaded producers.

It runs an :class:`AsyncPumpsClient` on an event loop in a background thread
and hands each call to it, so both APIs share one routing, retry and batching
path; binlogs from many threads coalesce into the same batched calls.
"""

from __future__ import annotations

import asyncio
import threading
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
        self._run(self._client.write_binlog(binlog))

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

    async def _shutdown(self) -> None:
        """Close the client, then end what is still running so that no caller waits forever."""
        await self._client.close()
        current = asyncio.current_task()
        leftovers = [task for task in asyncio.all_tasks() if task is not current]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._state != "started" or threading.current_thread() is self._thread:
            coro.close()
            if self._state != "started":
                raise RuntimeError(f"the pump client is {self._state}")
            raise RuntimeError("PumpsClient called from its own event loop; use AsyncPumpsClient there")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
