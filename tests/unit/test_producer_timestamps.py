"""bridge.producer.timestamps: concurrent requests share TSO calls, and every timestamp is fresh."""

from __future__ import annotations

import threading
import time

import pytest

from bridge.producer.timestamps import TimestampBatcher


class SlowOracle:
    """A TSO that takes a while per call and records each call's block."""

    def __init__(self) -> None:
        self.next = 100
        self.calls: list[tuple[float, int, int]] = []  # (started, first, count)
        self.lock = threading.Lock()

    def allocate(self, count: int) -> int:
        started = time.monotonic()
        time.sleep(0.002)
        with self.lock:
            first, self.next = self.next, self.next + count
            self.calls.append((started, first, count))
        return first


def test_concurrent_requests_share_calls_and_get_unique_fresh_timestamps() -> None:
    oracle = SlowOracle()
    batcher = TimestampBatcher(oracle.allocate)
    got: list[tuple[float, int]] = []
    lock = threading.Lock()

    def ask() -> None:
        for _ in range(50):
            asked = time.monotonic()
            ts = batcher.get()
            with lock:
                got.append((asked, ts))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stamps = [ts for _, ts in got]
    assert sorted(stamps) == list(range(100, 100 + 400))
    assert len(oracle.calls) < 400  # batched
    for asked, ts in got:  # the call that allocated ts started after ts was asked for
        (started,) = [s for s, first, count in oracle.calls if first <= ts < first + count]
        assert started >= asked


def test_a_failed_call_fails_every_waiting_request_and_the_next_call_recovers() -> None:
    calls = []

    def flaky(count: int) -> int:
        calls.append(count)
        if len(calls) == 1:
            raise RuntimeError("tso down")
        return 7

    batcher = TimestampBatcher(flaky)
    with pytest.raises(RuntimeError, match="tso down"):
        batcher.get()
    assert batcher.get() == 7
