"""The kafka sink's Pace: whether writes come fast enough to fill produce requests (then they
linger) or not (then each write is sent at once)."""

from drainer.sinks.kafka.producer import Pace


def test_few_messages_are_not_busy_and_enough_of_them_are() -> None:
    pace = Pace(window=3600.0, fill=128)  # one window for the whole test
    assert not pace.busy(1)
    assert not pace.busy(126)
    assert pace.busy(1)  # 128 within the window
    assert pace.busy(500)


def test_a_single_large_write_is_busy() -> None:
    assert Pace(window=3600.0, fill=128).busy(128)


def test_an_expired_window_forgets_what_came_before() -> None:
    pace = Pace(window=0.0, fill=128)  # every call starts a new window; the one before is too old
    assert not pace.busy(127)
    assert not pace.busy(127)
