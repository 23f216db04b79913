"""When a batch waits for more: only while the client is busy, the longer the busier.

A batcher (the writes to one pump, the timestamp asks) sends what it holds
at once when nothing else of the client is in progress, so a lone caller, or
a producer writing one transaction at a time, never waits. While other
``write_binlog`` or ``get_timestamps`` calls of the same client are in
progress (callers that will ask again within milliseconds), it first waits
for them: :data:`MIN_LINGER` (5 ms, the fixed wait of before), growing as
``batch-linger`` * (those calls) / :data:`FULL_LINGER_CALLS` past it, at
most ``batch-linger``. At 10,000 rows/s (hundreds of calls in progress) one
call then carries tens of transactions' binlogs or timestamps instead of a
few, and every process on the way (the SDK, the pump or meta service, the
drainer's pull) pays its per-call cost once for all of them; at 1,000 rows/s
(a handful of calls in progress) the wait stays 5 ms (shorter waits there
meant more calls and, on a loaded machine, a higher latency, measured). By
Little's law the calls in progress are the rate times the time each takes,
so the wait grows with the rate and with the latency already there, never
past ``batch-linger``.
"""

from __future__ import annotations

# Other calls in progress at which a batch waits the whole batch-linger.
FULL_LINGER_CALLS = 64
# The shortest wait while busy (the fixed wait before the wait grew with the load).
MIN_LINGER = 0.005


class Activity:
    """The number of the client's calls in progress (``write_binlog`` and ``get_timestamps``)."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0

    def others_than(self, waiting: int) -> bool:
        """True when calls other than the ``waiting`` ones (those a batcher holds) are in progress."""
        return self.calls > waiting

    def linger(self, waiting: int, longest: float) -> float:
        """How long a batcher holding ``waiting`` of the calls waits for more before it sends:
        0 when no other call is in progress, else ``longest`` * others / FULL_LINGER_CALLS but
        at least MIN_LINGER, and at most ``longest``."""
        others = self.calls - waiting
        if others <= 0 or longest <= 0:
            return 0.0
        if others >= FULL_LINGER_CALLS:
            return longest
        return min(longest, max(MIN_LINGER, longest * others / FULL_LINGER_CALLS))
