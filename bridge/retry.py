"""Capped exponential backoff: how every retry loop of the project paces itself.

One :class:`Backoff` per retry loop. After each failed attempt,
:meth:`Backoff.next_delay` counts the failure and gives the pause before the
next attempt: ``initial``, ``2 * initial``, ``4 * initial``, ... never more
than ``cap``. After a success, :meth:`Backoff.reset` starts over from
``initial``. The pause itself is the caller's (``asyncio.sleep``, a stop
event's ``wait``), so a loop stays interruptible in its own way; the helpers
:meth:`Backoff.sleep` and :meth:`Backoff.wait` do the common two.

Which errors are worth a retry is not decided here: callers retry only errors
whose ``retriable`` flag is set (:mod:`bridge.errors`), and give up on their
own deadline or attempt count.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

# 2**64 times any sensible initial delay is far above any cap; the bound keeps the float finite.
_MAX_DOUBLINGS = 64


@dataclass
class Backoff:
    """The delays of one retry loop; not thread-safe (one loop, one instance)."""

    initial: float = 0.1
    cap: float = 2.0
    failures: int = 0  # failed attempts since the last reset

    def __post_init__(self) -> None:
        if not 0 <= self.initial <= self.cap:
            raise ValueError(f"backoff: expected 0 <= initial <= cap, got {self.initial:g} and {self.cap:g}")

    @property
    def delay(self) -> float:
        """The pause owed before the next attempt for the failures counted so far (0 after none).

        For a loop that pauses lazily, just before its next attempt, rather than
        right after the failure.
        """
        if not self.failures:
            return 0.0
        return min(self.initial * 2.0 ** min(self.failures - 1, _MAX_DOUBLINGS), self.cap)

    def next_delay(self) -> float:
        """Count one failure; the pause before the next attempt."""
        self.failures += 1
        return self.delay

    def reset(self) -> None:
        """The last attempt succeeded: the next failure pauses ``initial`` again."""
        self.failures = 0

    async def sleep(self, limit: float | None = None) -> float:
        """Count one failure and sleep its delay (at most ``limit`` seconds); the time slept."""
        delay = self.next_delay()
        if limit is not None:
            delay = max(0.0, min(delay, limit))
        await asyncio.sleep(delay)
        return delay

    def wait(self, stop: threading.Event) -> bool:
        """Count one failure and wait its delay unless ``stop`` is set first; True when stopped."""
        return stop.wait(self.next_delay())
