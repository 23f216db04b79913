"""When a batch waits for more: only while the client is busy.

A batcher (the writes to one pump, the timestamp asks) sends what it holds
at once when nothing else of the client is in progress, so a lone caller, or
a producer writing one transaction at a time, never waits. While other
``write_binlog`` or ``get_timestamps`` calls of the same client are in
progress (callers that will ask again within milliseconds), it first waits
``batch-linger`` for them: at 10,000 rows/s one call then carries several
transactions' binlogs or timestamps instead of one or two, and every process
on the way (the SDK, the pump or meta service, the drainer's pull) pays its
per-call cost once for all of them.
"""

from __future__ import annotations


class Activity:
    """The number of the client's calls in progress (``write_binlog`` and ``get_timestamps``)."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls = 0

    def others_than(self, waiting: int) -> bool:
        """True when calls other than the ``waiting`` ones (those a batcher holds) are in progress."""
        return self.calls > waiting
