"""Timestamps for many concurrent callers from one GetTimestamps call at a time.

A producer asks the TSO twice per transaction (start_ts, then commit_ts
after its Prewrite is durable). One gRPC call per ask costs a round trip
and more CPU than the binlog write it precedes, so concurrent asks coalesce:
callers that ask while no call is in flight start one for themselves; those
that ask while a call is in flight wait, and the next call allocates for all
of them at once (the sum of their counts, consecutive), each caller getting
its own stretch.

While other calls of the client are in progress, a call first waits for
more asks, up to ``linger`` (:mod:`bridge.pumpclient.busy`); a lone asker
never waits.

Freshness is kept: every timestamp a caller gets is allocated by a call that
started after that caller asked, so a commit_ts asked for after a Prewrite
was acknowledged is above everything allocated before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from bridge.pumpclient import metrics
from bridge.pumpclient.busy import Activity
from bridge.tso import MAX_LOGICAL

Allocate = Callable[[int], Awaitable[int]]


class TimestampBatcher:
    """Coalesces concurrent :meth:`get` calls into ``allocate(total)`` calls, one in flight at a time."""

    def __init__(self, allocate: Allocate, linger: float = 0.0, activity: Activity | None = None) -> None:
        self._allocate = allocate
        self._linger = linger
        self._activity = activity
        self._waiting: list[tuple[int, asyncio.Future[int]]] = []
        self._serving: asyncio.Task[None] | None = None

    async def get(self, count: int = 1) -> int:
        """Allocate ``count`` consecutive timestamps; returns the first. Raises what ``allocate`` raises."""
        if not 1 <= count <= MAX_LOGICAL:
            raise ValueError(f"count must be 1..{MAX_LOGICAL}, got {count}")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append((count, future))
        if self._serving is None:
            self._serving = asyncio.create_task(self._serve(), name="pump-client-tso")
        return await future

    async def close(self) -> None:
        task, self._serving = self._serving, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        for _, future in self._waiting:
            future.cancel()
        self._waiting = []

    async def _serve(self) -> None:
        try:
            while self._waiting:
                wait = self._activity.linger(len(self._waiting), self._linger) if self._activity else 0.0
                if wait:
                    await asyncio.sleep(wait)
                batch = self._take()
                metrics.TSO_CALLS.inc()
                try:
                    first = await self._allocate(sum(count for count, _ in batch))
                except asyncio.CancelledError:  # closing: nobody waits for this round's answer
                    for _, future in batch:
                        future.cancel()
                    raise
                except Exception as exc:  # noqa: BLE001 - handed to every caller of this round
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for count, future in batch:
                    if not future.done():  # a caller that gave up wastes its stretch, nothing more
                        future.set_result(first)
                    first += count
        finally:
            self._serving = None

    def _take(self) -> list[tuple[int, asyncio.Future[int]]]:
        """The callers waiting now, up to MAX_LOGICAL timestamps in all (at least one caller)."""
        total, cut = 0, 0
        for count, _ in self._waiting:
            if cut and total + count > MAX_LOGICAL:
                break
            total += count
            cut += 1
        batch, self._waiting = self._waiting[:cut], self._waiting[cut:]
        return batch
