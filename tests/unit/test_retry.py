"""bridge.retry.Backoff: the delays of a retry loop, their cap, reset, and the stop event."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bridge.retry import Backoff


def test_delays_double_from_initial_up_to_the_cap() -> None:
    backoff = Backoff(initial=0.1, cap=0.5)
    assert [backoff.next_delay() for _ in range(5)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    assert backoff.failures == 5


def test_delay_is_what_the_failures_so_far_owe() -> None:
    backoff = Backoff(initial=0.1, cap=0.3)
    assert backoff.delay == 0.0
    backoff.next_delay()
    assert backoff.delay == pytest.approx(0.1)
    backoff.next_delay()
    backoff.next_delay()
    assert backoff.delay == pytest.approx(0.3)


def test_reset_starts_over_after_a_success() -> None:
    backoff = Backoff(initial=0.05, cap=1.0)
    backoff.next_delay()
    backoff.next_delay()
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.next_delay() == pytest.approx(0.05)


def test_a_long_outage_stays_at_the_cap() -> None:
    backoff = Backoff(initial=0.1, cap=2.0)
    delays = [backoff.next_delay() for _ in range(5000)]
    assert delays[-1] == 2.0
    assert max(delays) == 2.0


def test_a_zero_initial_delay_never_pauses() -> None:
    backoff = Backoff(initial=0.0, cap=1.0)
    assert {backoff.next_delay() for _ in range(10)} == {0.0}


@pytest.mark.parametrize(("initial", "cap"), [(-0.1, 1.0), (2.0, 1.0)])
def test_inconsistent_bounds_are_refused(initial: float, cap: float) -> None:
    with pytest.raises(ValueError, match="initial <= cap"):
        Backoff(initial=initial, cap=cap)


def test_wait_returns_at_once_when_stopped() -> None:
    stop = threading.Event()
    stop.set()
    backoff = Backoff(initial=60.0, cap=60.0)
    assert backoff.wait(stop) is True
    assert backoff.failures == 1


def test_sleep_is_bounded_by_the_limit() -> None:
    backoff = Backoff(initial=60.0, cap=60.0)
    slept = asyncio.run(backoff.sleep(limit=0.0))
    assert slept == 0.0
    assert backoff.failures == 1
