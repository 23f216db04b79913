"""pump.guard.TimestampGuard: the bounds a binlog's timestamps must keep."""

from __future__ import annotations

import asyncio

from bridge import tso
from bridge.binlog import PUMP_UNAVAILABLE_PREFIX, BinlogType, commit, prewrite, rollback
from bridge.errors import MetaUnavailable
from bridge.proto import binlog_pb2
from pump.guard import REFUSAL_PREFIX, TimestampGuard

NOW_MS = 1_700_000_000_000


class Tso:
    """A TSO whose physical clock the test moves; counts the asks."""

    def __init__(self) -> None:
        self.physical = NOW_MS
        self.asks = 0
        self.down = False

    async def fetch(self) -> int:
        if self.down:
            raise MetaUnavailable("meta is down")
        self.asks += 1
        return tso.compose(self.physical, 0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def guard_with(slack: float = 1.0) -> tuple[TimestampGuard, Tso, Clock]:
    oracle, clock = Tso(), Clock()
    return TimestampGuard(oracle.fetch, slack, clock=clock), oracle, clock


def refusal(guard: TimestampGuard, binlog: object) -> str:
    return asyncio.run(guard.refusal(binlog))  # type: ignore[arg-type]


def test_issued_timestamps_pass_and_far_future_ones_are_refused_naming_the_field() -> None:
    guard, oracle, _ = guard_with()
    assert refusal(guard, prewrite(tso.compose(NOW_MS - 5, 3), [])) == ""
    poisoned = refusal(guard, prewrite(1 << 62, []))
    assert poisoned.startswith(REFUSAL_PREFIX) and f"start_ts {1 << 62}" in poisoned
    hour_ahead = tso.compose(NOW_MS + 3_600_000, 0)
    late = refusal(guard, commit(tso.compose(NOW_MS, 1), hour_ahead))
    assert late.startswith(REFUSAL_PREFIX) and f"commit_ts {hour_ahead}" in late
    assert refusal(guard, rollback(1 << 62)).startswith(REFUSAL_PREFIX)
    assert oracle.asks >= 1


def test_commit_ts_must_exceed_start_ts_without_asking_the_tso() -> None:
    guard, oracle, _ = guard_with()
    start = tso.compose(NOW_MS, 5)
    for commit_ts in (start, start - 1):
        binlog = binlog_pb2.Binlog(tp=BinlogType.Commit, start_ts=start, commit_ts=commit_ts)
        assert binlog.tp == BinlogType.Commit
        assert not guard.within(binlog)
        assert "commit_ts must be greater than start_ts" in refusal(guard, binlog)
    assert oracle.asks == 0


def test_the_cached_bound_follows_the_clock_and_slack_then_refreshes_before_refusing() -> None:
    guard, oracle, clock = guard_with(slack=1.0)
    assert refusal(guard, prewrite(tso.compose(NOW_MS, 0), [])) == ""
    asks = oracle.asks
    # Within the slack and the time passed: no ask at all.
    clock.now += 2.0
    assert guard.within(prewrite(tso.compose(NOW_MS + 2_900, 0), []))
    assert not guard.within(prewrite(tso.compose(NOW_MS + 3_100, 0), []))
    # The TSO moved ahead faster than this pump's clock (a clock step): refresh, then admit.
    oracle.physical = NOW_MS + 10_000
    assert refusal(guard, prewrite(tso.compose(NOW_MS + 10_500, 0), [])) == ""
    assert oracle.asks == asks + 1
    # A flood of bad binlogs asks the TSO at most once per refresh interval.
    for _ in range(50):
        assert refusal(guard, prewrite(1 << 62, [])).startswith(REFUSAL_PREFIX)
    assert oracle.asks <= asks + 2


def test_an_unreachable_tso_refuses_as_pump_unavailable() -> None:
    guard, oracle, _ = guard_with()
    oracle.down = True
    answer = refusal(guard, prewrite(tso.compose(NOW_MS, 0), []))
    assert answer.startswith(PUMP_UNAVAILABLE_PREFIX) and "meta is down" in answer
