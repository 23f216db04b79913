"""Routing strategies of the pump client, and the start_ts -> pump routes."""

from __future__ import annotations

from collections import Counter

import pytest

from bridge.pumpclient.routes import PrewriteRoutes
from bridge.pumpclient.selector import (
    HashSelector,
    PumpWeight,
    RangeSelector,
    ScoreSelector,
    make_selector,
    mix64,
)

PUMPS = [PumpWeight("pump-1"), PumpWeight("pump-2"), PumpWeight("pump-3")]
TS0 = 450_000_000_000_000_000  # a realistic TSO timestamp


def firsts(selector, timestamps) -> Counter[str]:
    return Counter(selector.preference(ts)[0] for ts in timestamps)


@pytest.mark.parametrize("strategy", ["range", "hash", "score"])
def test_preference_lists_every_available_pump_once(strategy: str) -> None:
    selector = make_selector(strategy)
    selector.set_pumps(PUMPS)
    for ts in range(TS0, TS0 + 50):
        assert sorted(selector.preference(ts)) == ["pump-1", "pump-2", "pump-3"]


@pytest.mark.parametrize("strategy", ["range", "hash", "score"])
def test_no_pumps_no_preference(strategy: str) -> None:
    selector = make_selector(strategy)
    assert selector.preference(TS0) == []
    selector.set_pumps(PUMPS)
    selector.set_pumps([])
    assert selector.preference(TS0) == []


def test_unknown_strategy_is_named() -> None:
    with pytest.raises(ValueError, match="'random'"):
        make_selector("random")


def test_range_is_round_robin_and_survives_a_shrinking_set() -> None:
    selector = RangeSelector()
    selector.set_pumps(PUMPS)
    assert [selector.preference(0)[0] for _ in range(6)] == ["pump-1", "pump-2", "pump-3"] * 2
    assert selector.preference(0) == ["pump-1", "pump-2", "pump-3"]
    selector.set_pumps([PUMPS[0], PUMPS[2]])
    picks = [selector.preference(0)[0] for _ in range(4)]
    assert Counter(picks) == {"pump-1": 2, "pump-3": 2}


@pytest.mark.parametrize("strategy", ["range", "hash"])
def test_spread_of_30000_consecutive_timestamps(strategy: str) -> None:
    selector = make_selector(strategy)
    selector.set_pumps(PUMPS)
    counts = firsts(selector, range(TS0, TS0 + 30_000))
    assert set(counts) == {"pump-1", "pump-2", "pump-3"}
    assert all(9_000 <= n <= 11_000 for n in counts.values()), counts


def test_hash_spreads_timestamps_with_zero_logical_part() -> None:
    # One transaction per millisecond: every timestamp's low 18 bits are 0.
    selector = HashSelector()
    selector.set_pumps(PUMPS)
    counts = firsts(selector, ((TS0 >> 18) + i << 18 for i in range(30_000)))
    assert all(9_000 <= n <= 11_000 for n in counts.values()), counts


def test_hash_is_deterministic_and_independent_of_pump_order() -> None:
    a, b = HashSelector(), HashSelector()
    a.set_pumps(PUMPS)
    b.set_pumps(list(reversed(PUMPS)))
    for ts in range(TS0, TS0 + 1_000):
        assert a.preference(ts) == b.preference(ts)
    assert a.preference(TS0) == a.preference(TS0)


def test_hash_moves_only_the_departed_pumps_share() -> None:
    selector = HashSelector()
    selector.set_pumps(PUMPS)
    before = {ts: selector.preference(ts) for ts in range(TS0, TS0 + 3_000)}
    selector.set_pumps([PUMPS[0], PUMPS[2]])
    for ts, order in before.items():
        after = selector.preference(ts)
        # Its first surviving choice: the next one on the old preference list.
        assert after == [p for p in order if p != "pump-2"]


def test_mix64_is_a_fixed_64_bit_function() -> None:
    assert mix64(0) == 0
    assert mix64(1) == 0x5692161D100B05E5  # the splitmix64 finalizer of 1
    assert all(0 <= mix64(v) < 1 << 64 for v in (-1, 1 << 70, TS0))


def test_score_follows_weights_exactly_over_whole_cycles() -> None:
    selector = ScoreSelector()
    selector.set_pumps([PumpWeight("a", 100), PumpWeight("b", 200), PumpWeight("c", 300)])
    counts = firsts(selector, range(6_000))
    assert counts == {"a": 1_000, "b": 2_000, "c": 3_000}


def test_score_interleaves_smoothly() -> None:
    selector = ScoreSelector()
    selector.set_pumps([PumpWeight("a", 5), PumpWeight("b", 1), PumpWeight("c", 1)])
    assert [selector.preference(0)[0] for _ in range(7)] == ["a", "a", "b", "a", "c", "a", "a"]


def test_score_fallbacks_are_by_descending_score() -> None:
    selector = ScoreSelector()
    selector.set_pumps([PumpWeight("a", 1), PumpWeight("b", 3), PumpWeight("c", 2)])
    order = selector.preference(0)
    assert order[0] == "b"
    assert order[1:] == ["c", "a"]


def test_score_zero_is_a_fallback_only_unless_all_are_zero() -> None:
    selector = ScoreSelector()
    selector.set_pumps([PumpWeight("a", 10), PumpWeight("idle", 0), PumpWeight("b", -5)])
    picks = firsts(selector, range(100))
    assert picks == {"a": 100}
    assert selector.preference(0) == ["a", "idle", "b"]
    selector.set_pumps([PumpWeight("x", 0), PumpWeight("y", 0)])
    assert firsts(selector, range(10)) == {"x": 5, "y": 5}


def test_score_follows_changed_scores() -> None:
    selector = ScoreSelector()
    selector.set_pumps([PumpWeight("a", 1), PumpWeight("b", 1)])
    firsts(selector, range(11))
    selector.set_pumps([PumpWeight("a", 3), PumpWeight("b", 1)])
    counts = firsts(selector, range(4_000))
    assert 2_990 <= counts["a"] <= 3_010, counts


def test_routes_remember_take_and_forget() -> None:
    routes = PrewriteRoutes(limit=10)
    routes.remember(5, "pump-1")
    assert routes.take(5) == "pump-1"
    assert routes.take(5) is None
    assert len(routes) == 0


def test_routes_are_bounded_and_forget_the_oldest() -> None:
    routes = PrewriteRoutes(limit=3)
    for ts in range(1, 6):
        routes.remember(ts, f"pump-{ts}")
    assert len(routes) == 3
    assert routes.evicted == 2
    assert routes.take(1) is None and routes.take(2) is None
    assert [routes.take(ts) for ts in (3, 4, 5)] == ["pump-3", "pump-4", "pump-5"]
