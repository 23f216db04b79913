"""Timestamp bounds: a pump refuses binlogs whose timestamps the TSO cannot have issued.

A Prewrite, Commit or Rollback whose ``start_ts`` or ``commit_ts`` lies beyond
the meta service's timestamps would move the pump's sorter watermark past every
real timestamp, and the drainer would then drop later real transactions as
already passed. So before a binlog is admitted:

- ``commit_ts <= start_ts`` on a Commit is refused ("commit_ts must be greater
  than start_ts");
- a ``start_ts`` or ``commit_ts`` above the *bound* is refused. The bound is the
  TSO's high-water mark plus ``timestamp-slack``. The high-water mark is the
  last timestamp the guard got from the meta service, advanced by the time
  passed since on this pump's monotonic clock (the TSO's physical part follows
  the meta leader's clock at the same rate). A binlog above the bound first
  makes the guard ask the meta service again (one request at a time, at most
  every ``MIN_REFRESH_INTERVAL``); only a binlog above the refreshed bound is
  refused. The refusal names the field, its value and the bound.

When the meta service cannot be asked, a binlog above the cached bound is
refused as "pump unavailable" (not the binlog's fault: the client retries).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from bridge import tso
from bridge.binlog import PUMP_UNAVAILABLE_PREFIX, BinlogType
from bridge.errors import MetaError
from bridge.proto import binlog_pb2

log = logging.getLogger(__name__)

REFUSAL_PREFIX = "timestamp out of bounds: "
MIN_REFRESH_INTERVAL = 0.05  # seconds; a flood of bad binlogs asks the TSO at most this often
_COMMIT = BinlogType.Commit

Clock = Callable[[], float]


class TimestampGuard:
    """Checks binlog timestamps against the TSO; ``fetch`` returns a fresh timestamp.

    :meth:`within` is the cheap test done for every binlog (the cached bound);
    only a binlog it fails is passed to :meth:`refusal`, which refreshes the
    bound before deciding.
    """

    def __init__(
        self,
        fetch: Callable[[], Awaitable[int]],
        slack_seconds: float,
        clock: Clock = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._slack_ms = round(slack_seconds * 1000)
        self._clock = clock
        self._high_water = 0  # the last timestamp fetched
        self._fetched_at = 0.0  # clock() when it was fetched
        self._lock = asyncio.Lock()

    def bound(self) -> int:
        """The largest timestamp admitted now without asking the TSO (0 before the first ask)."""
        if not self._high_water:
            return 0
        elapsed_ms = int((self._clock() - self._fetched_at) * 1000)
        physical = tso.physical_ms(self._high_water) + elapsed_ms + self._slack_ms
        return tso.compose(physical, tso.MAX_LOGICAL - 1)

    def within(self, binlog: binlog_pb2.Binlog, bound: int | None = None) -> bool:
        """True when ``binlog`` passes every check against the cached bound (or
        ``bound``, one :meth:`bound` taken for a whole call)."""
        if binlog.tp == _COMMIT and binlog.commit_ts <= binlog.start_ts:
            return False
        if bound is None:
            bound = self.bound()
        return binlog.start_ts <= bound and binlog.commit_ts <= bound

    async def refusal(self, binlog: binlog_pb2.Binlog) -> str:
        """ "" when ``binlog`` is admissible, else why not (after refreshing the bound)."""
        if binlog.tp == _COMMIT and binlog.commit_ts <= binlog.start_ts:
            return (
                f"{REFUSAL_PREFIX}commit_ts must be greater than start_ts "
                f"(commit_ts {binlog.commit_ts}, start_ts {binlog.start_ts})"
            )
        if self.within(binlog):
            return ""
        try:
            await self._refresh()
        except MetaError as exc:
            return f"{PUMP_UNAVAILABLE_PREFIX}cannot check timestamps against the TSO: {exc}"
        bound = self.bound()
        for name, value in (("start_ts", binlog.start_ts), ("commit_ts", binlog.commit_ts)):
            if value > bound:
                return (
                    f"{REFUSAL_PREFIX}{name} {value} is beyond what the TSO has issued "
                    f"plus timestamp-slack (bound {bound})"
                )
        return ""

    async def _refresh(self) -> None:
        async with self._lock:
            if self._high_water and self._clock() - self._fetched_at < MIN_REFRESH_INTERVAL:
                return  # another caller just refreshed
            ts = await self._fetch()
            self._high_water, self._fetched_at = max(ts, self._high_water), self._clock()
            log.debug("TSO high-water mark now %d", self._high_water)
