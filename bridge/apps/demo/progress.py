"""The demo's one live progress line, and the replication lag it samples.

On a terminal the line is rewritten in place (``\\r``); otherwise (a log
file, a pipe) one line is written every ``interval`` seconds, so a CI log
shows the run without a line per refresh.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TextIO

from bridge.apps.demo.workload import LoadProgress

NON_TTY_INTERVAL = 5.0


class LiveLine:
    """A status line on ``stream`` that is replaced by the next one."""

    def __init__(self, stream: TextIO, interval: float = NON_TTY_INTERVAL) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._interval = interval
        self._last_written = float("-inf")
        self._width = 0  # of the line now on screen (terminal only)

    def update(self, text: str, force: bool = False) -> None:
        """Show ``text``; off a terminal only every ``interval`` seconds unless ``force``."""
        if self._tty:
            self._stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            now = time.monotonic()
            if not force and now - self._last_written < self._interval:
                return
            self._last_written = now
            self._stream.write(text + "\n")
        self._stream.flush()

    def message(self, text: str) -> None:
        """A line of its own, above the live line."""
        self.finish()
        self._stream.write(text + "\n")
        self._stream.flush()

    def finish(self) -> None:
        """End the live line (on a terminal: move below it)."""
        if self._tty and self._width:
            self._stream.write("\n")
            self._stream.flush()
            self._width = 0


@dataclass
class LagSamples:
    """Replication lag seen at each status poll (seconds)."""

    samples: list[float] = field(default_factory=list)

    def add(self, lag: float | None) -> None:
        if lag is not None:
            self.samples.append(lag)

    @property
    def last(self) -> float | None:
        return self.samples[-1] if self.samples else None

    @property
    def max(self) -> float | None:
        return max(self.samples) if self.samples else None

    @property
    def avg(self) -> float | None:
        return sum(self.samples) / len(self.samples) if self.samples else None


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def load_line(elapsed: float, load: LoadProgress | None, lag: float | None) -> str:
    """``demo  12.0s | 130 txn/s | 1082 rows/s | lag 0.8s | txns 1561 rows 13120 ddl 17``."""
    if load is None:
        return f"demo {elapsed:6.1f}s | creating the load's tables | lag {seconds(lag)}"
    return (
        f"demo {elapsed:6.1f}s | {load.txn_rate:6d} txn/s | {load.row_rate:7d} rows/s | lag {seconds(lag)}"
        f" | txns {load.transactions} rows {load.rows} ddl {load.ddl}"
    )


def catch_up_line(elapsed: float, checkpoint_ts: int, target_ts: int, lag: float | None) -> str:
    return f"catching up {elapsed:5.1f}s | checkpoint {checkpoint_ts} -> {target_ts} | lag {seconds(lag)}"
