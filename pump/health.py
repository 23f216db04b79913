"""How able the pump is to take writes: the disk guard and the registry score.

**Disk guard.** Below ``stop-write-at-available-space`` bytes available on
data-dir's file system the pump refuses new Prewrites, so a full disk never
tears a transaction: Commits and Rollbacks of Prewrites it already has, and
fake binlogs, are still written (they are small and they let drainers move
on). Writes resume by themselves once space is back above the threshold.

**Score** (reported in every heartbeat; the pump client's ``score`` strategy
sends Prewrites in proportion to it)::

    disk = 0                                 if available <= threshold
           min(1, (available - threshold) / max(threshold, 1 GiB))   otherwise
    load = 1 / (1 + write_rate / 10,000 + in_flight / 1,000)
    score = round(1000 * disk * load), at least 1 while disk > 0

``write_rate`` is binlogs per second averaged over recent heartbeats,
``in_flight`` the writes admitted and not yet acknowledged (the group-commit
queue). A pump with twice the threshold free and no load scores 1000; one
that refuses Prewrites (or is not online) scores 0, which the client uses only
as a fallback.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from pump import metrics

log = logging.getLogger(__name__)

GIB = 1 << 30
MAX_SCORE = 1000
RATE_REFERENCE = 10_000.0  # binlogs/s at which load alone halves the score
QUEUE_REFERENCE = 1_000.0  # in-flight writes at which load alone halves the score
RATE_SMOOTHING = 0.5  # weight of the newest sample in the write-rate average


def compute_score(available: int, threshold: int, write_rate: float, in_flight: int) -> int:
    """The registry score, 0..1000 (see the module docstring)."""
    if available <= threshold:
        return 0
    disk = min(1.0, (available - threshold) / max(threshold, GIB))
    load = 1.0 / (1.0 + max(write_rate, 0.0) / RATE_REFERENCE + max(in_flight, 0) / QUEUE_REFERENCE)
    return max(1, round(MAX_SCORE * disk * load))


@dataclass
class RateMeter:
    """A smoothed rate of a growing counter, sampled at each heartbeat."""

    rate: float = 0.0
    _last_count: int = 0
    _last_time: float | None = None

    def sample(self, count: int, now: float) -> float:
        if self._last_time is not None and now > self._last_time:
            recent = (count - self._last_count) / (now - self._last_time)
            self.rate = RATE_SMOOTHING * recent + (1 - RATE_SMOOTHING) * self.rate
        self._last_count, self._last_time = count, now
        return self.rate


class DiskGuard:
    """Watches the space available in ``path``; ``stopped`` is True below ``threshold`` bytes."""

    def __init__(self, path: str, threshold: int, usage: Callable[[str], int] | None = None) -> None:
        self.path = path
        self.threshold = threshold
        self._usage = usage or _available_bytes
        self.available: int | None = None
        self.stopped = False

    def check(self) -> bool:
        """Measure now; log and export a transition. Returns ``stopped``.

        An error reading the file system keeps the previous decision (logged).
        """
        try:
            available = self._usage(self.path)
        except OSError as exc:
            metrics.ERRORS.labels("disk_guard").inc()
            log.warning("disk guard: cannot read free space of %s: %s", self.path, exc)
            return self.stopped
        self.available = available
        metrics.DISK_AVAILABLE_BYTES.set(available)
        stopped = available < self.threshold
        if stopped != self.stopped:
            if stopped:
                log.warning(
                    "disk guard: %d bytes available in %s, below stop-write-at-available-space = %d: "
                    "refusing Prewrites (Commits and Rollbacks still accepted)",
                    available,
                    self.path,
                    self.threshold,
                )
            else:
                log.info(
                    "disk guard: %d bytes available in %s again: accepting Prewrites", available, self.path
                )
        self.stopped = stopped
        metrics.PREWRITES_STOPPED.set(1 if stopped else 0)
        return stopped

    def refusal(self, node_id: str) -> str:
        """The error a refused Prewrite gets."""
        return (
            f"pump {node_id} refuses Prewrites: {self.available} bytes available in {self.path}, below "
            f"stop-write-at-available-space = {self.threshold}; Commits and Rollbacks are still accepted"
        )

    def score(self, write_rate: float, in_flight: int) -> int:
        if self.available is None:
            return 0
        return compute_score(self.available, self.threshold, write_rate, in_flight)


def _available_bytes(path: str) -> int:
    """Bytes an unprivileged process may still write (blocks reserved for root excluded)."""
    st = os.statvfs(path)
    return int(st.f_bavail * st.f_frsize)
