"""The timestamp oracle's rules, driven by a fake clock and an in-memory limit."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest

from bridge.apps.meta.oracle import TimestampOracle
from bridge.errors import NotLeader, StoreError
from bridge.tso import MAX_LOGICAL, logical, physical_ms

START_MS = 1_800_000_000_000


class FakeClock:
    def __init__(self, ms: int = START_MS) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


class SavedLimit:
    """What a store would hold: the last limit saved, and every save in order."""

    def __init__(self) -> None:
        self.value = 0
        self.saves: list[int] = []
        self.gate: asyncio.Event | None = None  # when set, saves wait for it
        self.fail: Exception | None = None

    async def save(self, limit: int) -> None:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.saves.append(limit)
        self.value = limit


def make(
    interval_ms: int = 3000, clock: FakeClock | None = None
) -> tuple[TimestampOracle, SavedLimit, FakeClock]:
    clock = clock or FakeClock()
    saved = SavedLimit()
    return TimestampOracle(saved.save, interval_ms, clock), saved, clock


def run(coro):
    return asyncio.run(coro)


def test_batch_is_consecutive_within_one_millisecond() -> None:
    async def main() -> None:
        oracle, _, clock = make()
        await oracle.start(0)
        first = await oracle.allocate(100)
        second = await oracle.allocate(5)
        assert physical_ms(first) == clock.ms
        assert logical(first) == 0
        assert second == first + 100

    run(main())


def test_concurrent_callers_get_unique_strictly_increasing_batches() -> None:
    async def main() -> None:
        oracle, _, clock = make(interval_ms=50)
        await oracle.start(0)
        rng = random.Random(7)

        async def caller() -> list[tuple[int, int]]:
            got = []
            for _ in range(50):
                count = rng.randint(1, 5000)
                got.append((await oracle.allocate(count), count))
                clock.ms += rng.choice((0, 0, 1))
                await asyncio.sleep(0)
            return got

        batches = sorted(b for part in await asyncio.gather(*(caller() for _ in range(40))) for b in part)
        for (first, count), (nxt, _) in itertools.pairwise(batches):
            assert first + count <= nxt  # no overlap, strictly increasing
        for first, count in batches:
            assert physical_ms(first) == physical_ms(first + count - 1)  # no batch crosses a ms

    run(main())


def test_logical_overflow_moves_to_the_next_millisecond_without_waiting_for_the_clock() -> None:
    async def main() -> None:
        oracle, _, clock = make()
        await oracle.start(0)
        a = await oracle.allocate(MAX_LOGICAL - 10)
        b = await oracle.allocate(20)
        assert physical_ms(b) == physical_ms(a) + 1 == clock.ms + 1
        assert logical(b) == 0
        c = await oracle.allocate(MAX_LOGICAL)
        assert physical_ms(c) == physical_ms(b) + 1 and logical(c) == 0

    run(main())


def test_clock_going_backwards_never_makes_timestamps_go_backwards() -> None:
    async def main() -> None:
        oracle, _, clock = make()
        await oracle.start(0)
        before = await oracle.allocate(3)
        clock.ms -= 60_000
        after = await oracle.allocate(1)
        assert after > before + 2
        clock.ms += 60_001
        later = await oracle.allocate(1)
        assert later > after and physical_ms(later) == clock.ms

    run(main())


def test_never_hands_out_a_timestamp_at_or_beyond_the_saved_limit() -> None:
    async def main() -> None:
        oracle, saved, clock = make(interval_ms=10)
        await oracle.start(0)
        for _ in range(500):  # the clock stands still: each full batch needs a new ms
            ts = await oracle.allocate(MAX_LOGICAL)
            assert physical_ms(ts) < saved.value
        assert physical_ms(ts) - clock.ms == 499  # ran ahead of the clock, within the saved window
        assert len(saved.saves) > 10

    run(main())


def test_restart_starts_strictly_above_the_saved_limit() -> None:
    async def main() -> None:
        clock = FakeClock()
        oracle, saved, _ = make(clock=clock)
        await oracle.start(0)
        issued = [await oracle.allocate(1000) + 999 for _ in range(50)]
        # a crash: nothing is stopped; the clock even went back a little
        clock.ms -= 5
        reborn = TimestampOracle(saved.save, 3000, clock)
        await reborn.start(saved.value)
        first = await reborn.allocate(1)
        assert first > max(issued)
        assert physical_ms(first) > physical_ms(max(issued))

    run(main())


def test_window_is_extended_ahead_of_time_while_callers_keep_allocating() -> None:
    async def main() -> None:
        oracle, saved, clock = make(interval_ms=3000)
        await oracle.start(0)
        limit = oracle.limit
        saved.gate = asyncio.Event()  # the store is slow: saves hang until released
        clock.ms = limit - 900  # inside the last third of the window
        ts = await oracle.allocate(1)  # does not wait for the save it triggered
        assert physical_ms(ts) == clock.ms
        clock.ms += 100
        assert await oracle.allocate(1) > ts  # still no wait
        assert oracle.limit == limit
        saved.gate.set()
        await asyncio.sleep(0.01)
        assert oracle.limit == saved.value > limit

    run(main())


def test_exhausted_window_waits_for_the_store_and_surfaces_its_failure() -> None:
    async def main() -> None:
        oracle, saved, clock = make(interval_ms=3000)
        await oracle.start(0)
        saved.fail = StoreError("disk gone")
        clock.ms = oracle.limit + 10
        with pytest.raises(StoreError, match="disk gone"):
            await oracle.allocate(1)
        saved.fail = None
        ts = await oracle.allocate(1)
        assert physical_ms(ts) == clock.ms < oracle.limit

    run(main())


def test_stopped_oracle_refuses_with_not_leader_and_restarts_above_what_it_gave() -> None:
    async def main() -> None:
        oracle, saved, _ = make()
        await oracle.start(0)
        last = await oracle.allocate(10)
        await oracle.stop()
        with pytest.raises(NotLeader):
            await oracle.allocate(1)
        await oracle.start(0)  # even with a stale saved limit, never below its own past
        assert await oracle.allocate(1) > last + 9
        assert saved.value == oracle.limit

    run(main())


@pytest.mark.parametrize("count", [0, -1, MAX_LOGICAL + 1])
def test_count_out_of_range_is_rejected(count: int) -> None:
    async def main() -> None:
        oracle, _, _ = make()
        await oracle.start(0)
        with pytest.raises(ValueError, match="count"):
            await oracle.allocate(count)

    run(main())
