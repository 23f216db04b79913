"""Counters of a load run, the live progress line and the final summary."""

from __future__ import annotations

import json
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class Totals:
    transactions: int = 0  # committed
    rows: int = 0  # row changes committed
    ddl: int = 0  # schema changes committed
    rollbacks: int = 0  # attempts rolled back (a retried deadlock counts here)
    errors: int = 0  # transactions given up after their attempts


@dataclass
class Stats:
    """Thread-safe counters; :meth:`snapshot` reads them consistently."""

    started: float = field(default_factory=time.monotonic)
    _totals: Totals = field(default_factory=Totals)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def committed(self, rows: int) -> None:
        with self._lock:
            self._totals.transactions += 1
            self._totals.rows += rows

    def ddl_committed(self) -> None:
        with self._lock:
            self._totals.ddl += 1

    def rolled_back(self) -> None:
        with self._lock:
            self._totals.rollbacks += 1

    def failed(self) -> None:
        with self._lock:
            self._totals.errors += 1
            self._totals.rollbacks += 1

    def snapshot(self) -> Totals:
        with self._lock:
            return Totals(**vars(self._totals))

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class Progress:
    """Prints one progress line to ``stream`` every ``interval`` seconds until stopped.

    On a terminal the line is rewritten in place; otherwise one line per tick.
    """

    def __init__(self, stats: Stats, interval: float = 1.0, stream: TextIO | None = None) -> None:
        self._stats = stats
        self._interval = interval
        self._stream = stream if stream is not None else sys.stderr
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-progress", daemon=True)
        self._last = (time.monotonic(), Totals())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._stream.isatty():
            self._stream.write("\n")
            self._stream.flush()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._stream.write(self.line() + ("\r" if self._stream.isatty() else "\n"))
            self._stream.flush()

    def line(self) -> str:
        """``load 12.0s | 456 txn/s | 2345 rows/s | txns 5600 rows 28000 ddl 6 rollbacks 3 errors 0``."""
        now, totals = time.monotonic(), self._stats.snapshot()
        then, before = self._last
        self._last = (now, totals)
        span = max(now - then, 1e-9)
        txn_rate = (totals.transactions - before.transactions) / span
        row_rate = (totals.rows - before.rows) / span
        return (
            f"load {self._stats.elapsed():6.1f}s | {txn_rate:7.0f} txn/s | {row_rate:8.0f} rows/s"
            f" | txns {totals.transactions} rows {totals.rows} ddl {totals.ddl}"
            f" rollbacks {totals.rollbacks} errors {totals.errors}"
        )


def summary(stats: Stats, elapsed: float, **extra: object) -> str:
    """The final one-line JSON summary."""
    totals = stats.snapshot()
    return json.dumps(
        {
            **extra,
            "elapsed": round(elapsed, 3),
            "transactions": totals.transactions,
            "rows": totals.rows,
            "ddl": totals.ddl,
            "rollbacks": totals.rollbacks,
            "errors": totals.errors,
            "txn_per_s": round(totals.transactions / elapsed, 1) if elapsed > 0 else 0.0,
            "rows_per_s": round(totals.rows / elapsed, 1) if elapsed > 0 else 0.0,
        },
        sort_keys=False,
    )
