"""Timestamps for many threads from few TSO calls, as PD clients batch them for TiDB.

Every transaction takes two timestamps. Threads that ask while a TSO call is
in flight wait for the next one, which allocates a consecutive block for all
of them (``get_timestamps(count)``), so under load one call serves many
transactions. A timestamp is always allocated by a call that started after
it was asked for: a commit_ts taken after a Prewrite was written is still
newer than anything the pumps saw before that Prewrite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class _Request:
    __slots__ = ("error", "lead", "ready", "ts")

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.lead = False  # this thread makes the next TSO call for everyone waiting
        self.ts = 0
        self.error: BaseException | None = None


class TimestampBatcher:
    """``get()`` from any thread; ``allocate(count)`` returns the first of ``count`` new timestamps."""

    def __init__(self, allocate: Callable[[int], int]) -> None:
        self._allocate = allocate
        self._lock = threading.Lock()
        self._waiting: list[_Request] = []
        self._calling = False

    def get(self) -> int:
        request = _Request()
        with self._lock:
            self._waiting.append(request)
            if not self._calling:
                self._calling = request.lead = True
                request.ready.set()
        while True:
            request.ready.wait()
            if not request.lead:
                break
            request.lead = False
            request.ready.clear()
            self._call()
        if request.error is not None:
            raise request.error
        return request.ts

    def _call(self) -> None:
        """One TSO call for every request waiting now; then hand the lead to a newcomer, if any."""
        with self._lock:
            batch, self._waiting = self._waiting, []
        try:
            first = self._allocate(len(batch))
        except BaseException as exc:  # noqa: BLE001 - raised again in every waiting thread
            for request in batch:
                request.error = exc
        else:
            for offset, request in enumerate(batch):
                request.ts = first + offset
        with self._lock:
            if self._waiting:
                following = self._waiting[0]
                following.lead = True
                following.ready.set()
            else:
                self._calling = False
        for request in batch:
            request.ready.set()
