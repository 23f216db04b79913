"""The timestamp oracle: strictly increasing PD-style timestamps in batches.

A timestamp is ``physical_ms << 18 | logical``. The oracle keeps the last
physical millisecond it used and the next free logical value in it:

- A batch of ``count`` never crosses a millisecond, so its timestamps are
  ``first .. first + count - 1``.
- When the wall clock moved past the current millisecond, the next batch
  starts at the clock's millisecond with logical 0. When the clock stands
  still or went backwards, the oracle stays on its own millisecond, so
  timestamps never go backwards.
- When a batch does not fit in the logical values left, the oracle moves to
  the next millisecond at once instead of waiting for the clock; it may so
  run ahead of the clock, but never past the saved limit (below).

**The saved window.** The oracle never hands out a timestamp whose physical
part reaches ``limit``, a millisecond persisted through the store. When less
than a third of ``save_interval`` remains below the limit, a background task
saves ``max(now, physical) + save_interval`` as the new limit, so callers
rarely wait for the store. On start (or on becoming leader) the oracle loads
the saved limit and continues strictly above it: a crash, restart or leader
change skips at most one window of physical time and never goes backwards.

All allocation runs on one event loop thread, so concurrent callers are
serialised by the loop itself: the critical section contains no ``await``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from bridge.errors import NotLeader
from bridge.tso import MAX_LOGICAL, compose

log = logging.getLogger(__name__)

Clock = Callable[[], int]
SaveLimit = Callable[[int], Awaitable[None]]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class TimestampOracle:
    """Hands out timestamps while started; ``save_limit`` persists the window.

    ``save_limit(ms)`` must durably record ``ms`` or raise; it raises
    :class:`NotLeader` when this member may no longer write.
    """

    def __init__(
        self, save_limit: SaveLimit, save_interval_ms: int = 3000, clock: Clock = wall_clock_ms
    ) -> None:
        if save_interval_ms < 1:
            raise ValueError("save_interval_ms must be positive")
        self._save_limit = save_limit
        self._interval = save_interval_ms
        self._clock = clock
        self._physical = 0
        self._logical = 0
        self._limit = 0
        self._serving = False
        self._saving: asyncio.Task[None] | None = None
        self.allocated = 0  # timestamps handed out since construction, for metrics

    @property
    def serving(self) -> bool:
        return self._serving

    @property
    def limit(self) -> int:
        """The saved physical limit: no timestamp handed out reaches it."""
        return self._limit

    async def start(self, saved_limit: int) -> None:
        """Begin serving strictly above ``saved_limit`` (the store's last saved window)."""
        await self.stop()
        self._physical = max(self._clock(), saved_limit + 1, self._physical + 1)
        self._logical = 0
        self._limit = 0
        await self._extend()
        self._serving = True
        log.info("tso serving from physical %d, window saved to %d", self._physical, self._limit)

    async def stop(self) -> None:
        """Stop serving (stepping down or shutting down); callers get NotLeader."""
        self._serving = False
        saving, self._saving = self._saving, None
        if saving is not None and not saving.done():
            saving.cancel()
            await asyncio.wait([saving])  # its outcome was logged; stopping must not raise it

    async def allocate(self, count: int = 1) -> int:
        """Allocate ``count`` consecutive timestamps; returns the first."""
        if not 1 <= count <= MAX_LOGICAL:
            raise ValueError(f"count must be 1..{MAX_LOGICAL}, got {count}")
        while True:
            if not self._serving:
                raise NotLeader("the timestamp oracle is not serving (not the leader)")
            first = self._try_allocate(count)
            if first is not None:
                self.allocated += count
                return first
            await self._wait_for_window()

    def _try_allocate(self, count: int) -> int | None:
        now = self._clock()
        physical, logical = self._physical, self._logical
        if now > physical:
            physical, logical = now, 0
        elif logical + count > MAX_LOGICAL:
            physical, logical = physical + 1, 0
        if physical >= self._limit:
            return None  # the window is used up: wait for the store to extend it
        self._physical, self._logical = physical, logical + count
        if self._limit - physical < self._interval / 3:
            self._extend_in_background()
        return compose(physical, logical)

    async def _wait_for_window(self) -> None:
        if self._saving is None or self._saving.done():
            self._extend_in_background()
        assert self._saving is not None
        await asyncio.shield(self._saving)

    def _extend_in_background(self) -> None:
        if self._saving is None or self._saving.done():
            self._saving = asyncio.create_task(self._extend(), name="tso-save-window")
            self._saving.add_done_callback(_consume_outcome)

    async def _extend(self) -> None:
        new_limit = max(self._clock(), self._physical) + self._interval
        try:
            await self._save_limit(new_limit)
        except Exception as exc:
            log.warning("tso: saving the window to %d failed: %s", new_limit, exc)
            raise
        self._limit = max(self._limit, new_limit)


def _consume_outcome(task: asyncio.Task[None]) -> None:
    """Mark a background save's failure as seen: it was logged, and waiters get it themselves."""
    if not task.cancelled():
        task.exception()
