"""The one sink driver: retries of open/write/flush, re-writes after a failed flush, batches,
the attempt limit, and the sink's own error for callers that are no drainer."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from bridge.proto import row_pb2
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.driver import SinkDriver, SinkFailed, SinkStopped, as_raised
from bridge.sink.errors import SinkApplyError, SinkUnavailable
from bridge.sink.events import DDLEvent, Event, ResolvedEvent

Change = row_pb2.SchemaChange


class ScriptedSink(Sink):
    """Fails the calls named in ``failures`` (call name -> errors to raise, in order); records the rest."""

    name = "scripted"

    def __init__(self, failures: dict[str, list[Exception]] | None = None) -> None:
        self.failures = failures or {}
        self.calls: list[tuple[str, object]] = []
        self.written: list[int] = []
        self.durable = 0

    def _fail(self, call: str) -> None:
        pending = self.failures.get(call)
        if pending:
            raise pending.pop(0)

    def open(self, context: SinkContext) -> None:
        self._fail("open")
        super().open(context)
        self.calls.append(("open", context.resume_ts))

    def write(self, events: Sequence[Event]) -> None:
        self._fail("write")
        self.calls.append(("write", [e.commit_ts for e in events]))
        self.written += [e.commit_ts for e in events]

    def flush(self) -> int:
        self._fail("flush")
        self.calls.append(("flush", None))
        self.durable = max(self.written, default=self.durable)
        return self.durable


def driver_of(sink: Sink, attempts: int | None = None) -> SinkDriver:
    return SinkDriver(sink, threading.Event(), retry_initial=0.001, retry_max=0.004, attempts=attempts)


def ddl(ts: int) -> DDLEvent:
    change = Change(kind=Change.CREATE_DATABASE, db="d")
    return DDLEvent(ts - 1, ts, b"", "CREATE DATABASE d", change, None, None)


def test_a_retriable_open_and_write_are_called_again() -> None:
    sink = ScriptedSink({"open": [SinkUnavailable("down")], "write": [SinkUnavailable("busy")]})
    driver = driver_of(sink)
    driver.open(SinkContext(resume_ts=5))
    driver.write([ResolvedEvent(6)])
    assert sink.calls == [("open", 5), ("write", [6])]
    assert driver.retries == 2 and "write: busy" in driver.last_error


def test_a_failed_flush_writes_every_unflushed_event_again() -> None:
    sink = ScriptedSink({"flush": [SinkUnavailable("lost connection")]})
    driver = driver_of(sink)
    driver.open(SinkContext())
    driver.write([ResolvedEvent(1), ResolvedEvent(2)])
    driver.write([ResolvedEvent(3)])
    assert driver.flush() == 3
    assert sink.calls[1:] == [("write", [1, 2]), ("write", [3]), ("write", [1, 2, 3]), ("flush", None)]
    assert driver.unflushed == []


def test_write_all_makes_bounded_batches_and_a_ddl_ends_one() -> None:
    sink = ScriptedSink()
    driver = driver_of(sink)
    driver.open(SinkContext())
    events: list[Event] = [ResolvedEvent(1), ddl(2), ResolvedEvent(3), ResolvedEvent(4), ResolvedEvent(5)]
    driver.write_all(events, max_events=2)
    assert [c[1] for c in sink.calls if c[0] == "write"] == [[1, 2], [3, 4], [5]]


def test_the_attempt_limit_gives_up_with_the_sinks_error() -> None:
    errors: list[Exception] = [SinkUnavailable(f"busy {i}") for i in range(3)]
    driver = driver_of(ScriptedSink({"write": errors}), attempts=3)
    driver.open(SinkContext())
    with pytest.raises(SinkFailed, match="write failed 3 times, the last: busy 2") as failed:
        driver.write([ResolvedEvent(1)])
    assert isinstance(failed.value.original, SinkUnavailable)


def test_a_non_retriable_error_is_not_retried_and_as_raised_gives_it_back() -> None:
    refused = SinkApplyError("table d.t at commit_ts 1: refused")
    sink = ScriptedSink({"write": [refused]})
    driver = driver_of(sink)
    driver.open(SinkContext())
    with pytest.raises(SinkApplyError) as raised, as_raised():
        driver.write([ResolvedEvent(1)])
    assert raised.value is refused and driver.retries == 0


def test_a_sink_bug_stays_wrapped_naming_the_sink() -> None:
    driver = driver_of(ScriptedSink({"flush": [KeyError("oops")]}))
    driver.open(SinkContext())
    with pytest.raises(SinkFailed, match="sink scripted: flush failed: KeyError") as failed, as_raised():
        driver.flush()
    assert failed.value.original is failed.value


def test_an_abort_stops_the_retries() -> None:
    abort = threading.Event()
    abort.set()
    driver = SinkDriver(ScriptedSink({"open": [SinkUnavailable("down")]}), abort)
    with pytest.raises(SinkStopped, match="stopped while retrying open"):
        driver.open(SinkContext())
