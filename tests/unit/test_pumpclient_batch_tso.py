"""The pump client's timestamp batcher without services: an in-process
allocator stands in for the TSO, records each call's count and answers when
the test lets it."""

from __future__ import annotations

import asyncio

import pytest

from bridge.errors import MetaUnavailable
from bridge.pumpclient.busy import FULL_LINGER_CALLS, Activity
from bridge.pumpclient.timestamps import TimestampBatcher
from bridge.tso import MAX_LOGICAL

pytestmark = pytest.mark.timeout(30)


class Oracle:
    """Hands out consecutive numbers from 1000; each call waits for the test's go unless ``hold`` is off."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.next = 1000
        self.hold = True
        self.fail = False
        self.go = asyncio.Event()

    async def allocate(self, count: int) -> int:
        self.calls.append(count)
        if self.hold:
            await self.go.wait()
            self.go = asyncio.Event()
        if self.fail:
            self.fail = False
            raise MetaUnavailable("meta service down")
        first, self.next = self.next, self.next + count
        return first

    async def in_flight(self, calls: int) -> None:
        while len(self.calls) < calls:
            await asyncio.sleep(0)


def test_a_lone_caller_gets_its_own_call_at_once() -> None:
    async def main() -> None:
        oracle = Oracle()
        oracle.hold = False
        batcher = TimestampBatcher(oracle.allocate)
        assert await batcher.get() == 1000
        assert await batcher.get(5) == 1001
        assert oracle.calls == [1, 5]

    asyncio.run(main())


def test_callers_waiting_during_a_call_share_the_next_one_with_disjoint_stretches() -> None:
    async def main() -> None:
        oracle = Oracle()
        batcher = TimestampBatcher(oracle.allocate)
        first = asyncio.ensure_future(batcher.get())
        await oracle.in_flight(1)
        # asked while the first call is in flight: served by the next call, so allocated after asking
        later = [asyncio.ensure_future(batcher.get(count)) for count in (1, 3, 1, 2)]
        await asyncio.sleep(0)
        oracle.go.set()
        assert await first == 1000
        await oracle.in_flight(2)
        oracle.go.set()
        assert await asyncio.gather(*later) == [1001, 1002, 1005, 1006]
        assert oracle.calls == [1, 7]

    asyncio.run(main())


def test_a_failed_call_fails_its_callers_only() -> None:
    async def main() -> None:
        oracle = Oracle()
        batcher = TimestampBatcher(oracle.allocate)
        oracle.fail = True
        doomed = [asyncio.ensure_future(batcher.get()) for _ in range(3)]
        await oracle.in_flight(1)
        survivor = asyncio.ensure_future(batcher.get())
        await asyncio.sleep(0)
        oracle.go.set()
        for future in doomed:
            with pytest.raises(MetaUnavailable):
                await future
        await oracle.in_flight(2)
        oracle.go.set()
        assert await survivor == 1000
        assert oracle.calls == [3, 1]

    asyncio.run(main())


def test_a_round_never_asks_for_more_than_the_tso_allows() -> None:
    async def main() -> None:
        oracle = Oracle()
        oracle.hold = False
        batcher = TimestampBatcher(oracle.allocate)
        big = MAX_LOGICAL // 2 + 1
        results = await asyncio.gather(batcher.get(big), batcher.get(big), batcher.get(1))
        assert oracle.calls == [big, big + 1]
        assert list(results) == [1000, 1000 + big, 1000 + 2 * big]
        with pytest.raises(ValueError):
            await batcher.get(MAX_LOGICAL + 1)

    asyncio.run(main())


def test_close_cancels_waiting_callers() -> None:
    async def main() -> None:
        oracle = Oracle()
        batcher = TimestampBatcher(oracle.allocate)
        waiting = asyncio.ensure_future(batcher.get())
        await oracle.in_flight(1)
        await batcher.close()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())


def test_while_other_calls_are_in_progress_a_call_waits_for_more_asks() -> None:
    async def main() -> None:
        oracle = Oracle()
        oracle.hold = False
        activity = Activity()
        activity.calls = FULL_LINGER_CALLS  # other calls of the client (writes) are in progress
        batcher = TimestampBatcher(oracle.allocate, linger=0.05, activity=activity)

        async def ask() -> int:
            activity.calls += 1
            try:
                return await batcher.get()
            finally:
                activity.calls -= 1

        first = asyncio.ensure_future(ask())
        await asyncio.sleep(0)  # the first ask is waiting out the linger; these join it
        rest = [asyncio.ensure_future(ask()) for _ in range(3)]
        assert sorted(await asyncio.gather(first, *rest)) == [1000, 1001, 1002, 1003]
        assert oracle.calls == [4]

    asyncio.run(main())


def test_a_lone_asker_never_waits_for_the_linger() -> None:
    async def main() -> None:
        oracle = Oracle()
        oracle.hold = False
        activity = Activity()
        batcher = TimestampBatcher(oracle.allocate, linger=600.0, activity=activity)
        activity.calls += 1
        assert await batcher.get() == 1000  # a linger of 10 minutes would time the test out
        activity.calls -= 1
        assert oracle.calls == [1]

    asyncio.run(main())
