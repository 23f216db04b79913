"""BatchingSink's bookkeeping: the failure latch, rate-limited warnings, metrics once per registry;
AckTracker's acknowledged position."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
from prometheus_client import CollectorRegistry, Counter

from bridge.sink.acks import AckTracker, Failure
from bridge.sink.batching import BatchingSink, Warnings, metrics_for
from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable
from bridge.sink.events import Event, ResolvedEvent

log = logging.getLogger(__name__)


class ListSink(BatchingSink):
    """Keeps written commit_ts in a list; ``refuse`` makes the next write fail with that error."""

    def __init__(self) -> None:
        super().__init__(log)
        self.pending: list[int] = []
        self.durable: list[int] = []
        self.refuse: SinkError | None = None
        self.recovered: list[str] = []

    def write_batch(self, events: Sequence[Event]) -> None:
        for event in events:
            if self.refuse is not None:
                refuse, self.refuse = self.refuse, None
                raise refuse
            self.pending.append(event.commit_ts)

    def flush_batch(self) -> int:
        self.durable += self.pending
        self.pending = []
        return self.durable[-1] if self.durable else 0

    def recover(self, failure: SinkError) -> SinkError:
        self.pending = []
        self.recovered.append(str(failure))
        return super().recover(failure)


def test_a_retriable_failure_is_latched_later_writes_dropped_and_the_flush_raises_it() -> None:
    sink = ListSink()
    sink.write([ResolvedEvent(10)])
    assert sink.flush() == 10
    sink.refuse = SinkUnavailable("down")
    sink.write([ResolvedEvent(20)])  # latched, not raised
    sink.write([ResolvedEvent(30)])  # dropped
    with pytest.raises(SinkUnavailable, match="down"):
        sink.flush()
    assert sink.recovered == ["down"] and sink.durable == [10]
    sink.write([ResolvedEvent(20), ResolvedEvent(30)])  # what the driver writes again
    assert sink.flush() == 30


def test_a_refusal_is_raised_at_once() -> None:
    sink = ListSink()
    sink.refuse = SinkApplyError("refused")
    with pytest.raises(SinkApplyError):
        sink.write([ResolvedEvent(10)])
    assert not sink.failed


def test_warnings_of_one_kind_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    warn = Warnings(log)
    with caplog.at_level(logging.WARNING, logger=__name__):
        for _ in range(3):
            warn("a", "kind a %d", 1)
        warn("b", "kind b")
    assert [r.getMessage() for r in caplog.records] == ["kind a 1", "kind b"]


class Made:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.counter = Counter("bridge_test_made_total", "made once per registry", registry=registry)


def test_metrics_are_made_once_per_registry() -> None:
    first, second = CollectorRegistry(), CollectorRegistry()
    assert metrics_for(first, Made) is metrics_for(first, Made)
    assert metrics_for(second, Made) is not metrics_for(first, Made)


def test_the_acknowledged_position_stops_at_a_failure_until_reset() -> None:
    tracker = AckTracker(5)
    one, two = tracker.begin(10), tracker.begin(20)
    tracker.sent(one)
    tracker.sent(two)
    tracker.close(one)
    tracker.close(two)
    tracker.acknowledged(two)
    assert tracker.acked == 5  # 10 is not acknowledged yet
    tracker.failed(one, Failure(10, "t", "topic", "timed out", retriable=True))
    assert tracker.acked == 5 and not tracker.idle
    assert tracker.reset() is not None and tracker.idle
    three = tracker.begin(30)
    tracker.close(three)
    assert tracker.acked == 30
