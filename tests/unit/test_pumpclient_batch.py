"""The pump client's batcher without services: a PumpNode whose gRPC stub is an
in-process stand-in that records each WriteBinlogs call and answers when the
test lets it. What is checked: a lone binlog leaves at once; binlogs that
arrive while calls are in flight leave together in the next call, within
batch-max and batch-max-bytes; each binlog gets its own answer; a failed
call fails its binlogs only; an expired binlog is not sent."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from bridge.errors import PumpRejected, PumpUnavailable
from bridge.proto import meta_pb2, pump_pb2
from bridge.pumpclient import PumpClientConfig
from bridge.pumpclient.busy import FULL_LINGER_CALLS, MIN_LINGER, Activity
from bridge.pumpclient.node import PumpNode
from bridge.pumpclient.pool import PumpPool

pytestmark = pytest.mark.timeout(30)


class HeldStub:
    """Records every WriteBinlogs call; each call waits for :meth:`release` unless ``hold`` is off."""

    def __init__(self, answer: Callable[[list[bytes]], list[str]] | None = None) -> None:
        self.calls: list[list[bytes]] = []
        self.hold = True
        self.fail_next = False
        self._answer = answer or (lambda payloads: [""] * len(payloads))
        self._gates: list[asyncio.Event] = []

    async def WriteBinlogs(self, request: pump_pb2.WriteBinlogsReq, timeout: float) -> Any:
        self.calls.append(list(request.payloads))
        gate = asyncio.Event()
        self._gates.append(gate)
        if self.hold:
            await gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "pump gone"
            )
        return pump_pb2.WriteBinlogsResp(errmsgs=self._answer(list(request.payloads)))

    def release(self) -> None:
        for gate in self._gates:
            gate.set()

    async def in_flight(self, calls: int) -> None:
        while len(self.calls) < calls:
            await asyncio.sleep(0)


def run_with_node(
    config: PumpClientConfig,
    stub: HeldStub,
    body: Callable[[PumpNode, list[tuple[PumpNode, bool]]], Awaitable[None]],
) -> list[tuple[PumpNode, bool]]:
    failures: list[tuple[PumpNode, bool]] = []

    async def main() -> None:
        node = PumpNode("pump-1", "127.0.0.1:1", config, 1, lambda n, gone: failures.append((n, gone)))
        node._stub = stub  # type: ignore[assignment]  # the stand-in answers in place of a pump
        try:
            await body(node, failures)
        finally:
            stub.release()
            await node.close(grace=1.0)

    asyncio.run(main())
    return failures


def payload(n: int, size: int = 10) -> bytes:
    return n.to_bytes(4, "big") * (size // 4)


def test_a_lone_binlog_leaves_at_once_in_a_call_of_its_own() -> None:
    stub = HeldStub()
    stub.hold = False

    async def body(node: PumpNode, failures: list[Any]) -> None:
        await node.write(payload(1), "prewrite", timeout=5)
        await node.write(payload(2), "commit", timeout=5)

    run_with_node(PumpClientConfig(), stub, body)
    assert stub.calls == [[payload(1)], [payload(2)]]


def test_binlogs_arriving_while_a_call_is_in_flight_leave_together_within_batch_max() -> None:
    stub = HeldStub()
    config = PumpClientConfig(max_inflight_batches=1, batch_max=16)

    async def body(node: PumpNode, failures: list[Any]) -> None:
        first = asyncio.ensure_future(node.write(payload(0), "prewrite", timeout=5))
        await stub.in_flight(1)
        rest = [asyncio.ensure_future(node.write(payload(n), "prewrite", timeout=5)) for n in range(1, 41)]
        await asyncio.sleep(0)
        stub.hold = False
        stub.release()
        await asyncio.gather(first, *rest)

    run_with_node(config, stub, body)
    assert [len(call) for call in stub.calls] == [1, 16, 16, 8]
    assert [p for call in stub.calls for p in call] == [payload(n) for n in range(41)]  # in arrival order


def test_a_batch_stops_at_batch_max_bytes() -> None:
    stub = HeldStub()
    config = PumpClientConfig(max_inflight_batches=1, batch_max=512, batch_max_bytes=100)

    async def body(node: PumpNode, failures: list[Any]) -> None:
        first = asyncio.ensure_future(node.write(payload(0, 40), "prewrite", timeout=5))
        await stub.in_flight(1)
        rest = [asyncio.ensure_future(node.write(payload(n, 40), "prewrite", timeout=5)) for n in range(1, 6)]
        await asyncio.sleep(0)
        stub.hold = False
        stub.release()
        await asyncio.gather(first, *rest)

    run_with_node(config, stub, body)
    assert [len(call) for call in stub.calls] == [1, 2, 2, 1]


def test_each_binlog_of_a_batch_gets_its_own_answer() -> None:
    stub = HeldStub(answer=lambda payloads: ["bad binlog" if p == payload(2) else "" for p in payloads])
    config = PumpClientConfig(max_inflight_batches=1)

    async def body(node: PumpNode, failures: list[Any]) -> None:
        first = asyncio.ensure_future(node.write(payload(0), "prewrite", timeout=5))
        await stub.in_flight(1)
        rest = [asyncio.ensure_future(node.write(payload(n), "prewrite", timeout=5)) for n in (1, 2, 3)]
        await asyncio.sleep(0)
        stub.hold = False
        stub.release()
        results = await asyncio.gather(first, *rest, return_exceptions=True)
        assert results[0] is None and results[1] is None and results[3] is None
        assert isinstance(results[2], PumpRejected) and "bad binlog" in str(results[2])

    failures = run_with_node(config, stub, body)
    assert [len(call) for call in stub.calls] == [1, 3]
    assert failures == []  # a refused binlog is not the pump's failure


def test_a_failed_call_fails_its_binlogs_only_and_reports_the_pump() -> None:
    stub = HeldStub()
    config = PumpClientConfig(max_inflight_batches=1)

    async def body(node: PumpNode, failures: list[Any]) -> None:
        first = asyncio.ensure_future(node.write(payload(0), "prewrite", timeout=5))
        await stub.in_flight(1)
        second = [asyncio.ensure_future(node.write(payload(n), "prewrite", timeout=5)) for n in (1, 2)]
        await asyncio.sleep(0)
        stub.fail_next = True
        stub.hold = False
        stub.release()
        with pytest.raises(PumpUnavailable, match="UNAVAILABLE"):
            await first
        await asyncio.gather(*second)  # the next call, after the failed one, succeeds
        assert node.consecutive_errors == 0

    failures = run_with_node(config, stub, body)
    assert len(failures) == 1 and failures[0][1] is True  # UNAVAILABLE: the process is gone
    assert [len(call) for call in stub.calls] == [1, 2]


def test_a_binlog_that_waited_past_its_timeout_fails_and_is_not_sent() -> None:
    stub = HeldStub()
    config = PumpClientConfig(max_inflight_batches=1, rpc_timeout=3.0)

    async def body(node: PumpNode, failures: list[Any]) -> None:
        first = asyncio.ensure_future(node.write(payload(0), "prewrite", timeout=5))
        await stub.in_flight(1)
        # 0.05 s is below the worst wait the batcher can promise, so this one runs a timer.
        with pytest.raises(PumpUnavailable, match="no answer within"):
            await node.write(payload(1), "prewrite", timeout=0.05)
        stub.hold = False
        stub.release()
        await first
        await node.write(payload(2), "prewrite", timeout=5)

    run_with_node(config, stub, body)
    assert stub.calls == [[payload(0)], [payload(2)]]


def test_while_other_calls_of_the_client_are_in_progress_a_batch_gathers_for_batch_linger() -> None:
    stub = HeldStub()
    stub.hold = False
    activity = Activity()
    activity.calls = FULL_LINGER_CALLS  # calls elsewhere in the client (timestamp asks, other pumps)
    config = PumpClientConfig(batch_linger=0.05)

    async def main() -> None:
        node = PumpNode("pump-1", "127.0.0.1:1", config, 1, lambda n, gone: None, activity)
        node._stub = stub  # type: ignore[assignment]  # the stand-in answers in place of a pump
        try:
            activity.calls += 1
            first = asyncio.ensure_future(node.write(payload(0), "prewrite", timeout=5))
            while not node.gathering:  # the sender starts and waits for more
                await asyncio.sleep(0)
            assert not stub.calls
            activity.calls += 3
            rest = [asyncio.ensure_future(node.write(payload(n), "prewrite", timeout=5)) for n in range(1, 4)]
            await asyncio.gather(first, *rest)
        finally:
            await node.close(grace=1.0)

    asyncio.run(main())
    assert stub.calls == [[payload(n) for n in range(4)]]  # one call, no second sender meanwhile


def test_range_prewrites_follow_the_batch_the_round_robin_started_not_a_commit_batch() -> None:
    activity = Activity()
    config = PumpClientConfig(strategy="range", batch_linger=0.05)
    stubs: dict[str, HeldStub] = {}

    async def main() -> list[str]:
        pool = PumpPool(config, 1, activity)
        pool.apply_registry(
            [
                meta_pb2.NodeStatus(
                    node_id=f"p{i}", addr=f"127.0.0.1:{i + 1}", state=meta_pb2.ONLINE, is_alive=True
                )
                for i in range(3)
            ]
        )
        for node in pool.nodes():
            stubs[node.node_id] = HeldStub()
            stubs[node.node_id].hold = False
            node._stub = stubs[node.node_id]  # type: ignore[assignment]  # the stand-in answers for a pump
        activity.calls = 10  # a busy client: other transactions are in progress
        picks = []
        writes = []
        first = pool.prewrite_candidates(1)[0]
        picks.append(first.node_id)
        writes.append(asyncio.ensure_future(first.write(payload(1), "prewrite", timeout=5)))
        while not first.gathering:
            await asyncio.sleep(0)
        other = next(node for node in pool.nodes() if node is not first)
        writes.append(asyncio.ensure_future(other.write(payload(2), "commit", timeout=5)))  # a Commit batch
        while not other.gathering:
            await asyncio.sleep(0)
        for ts in range(3, 6):  # the Prewrites of this moment join the first batch
            picks.append(pool.prewrite_candidates(ts)[0].node_id)
        await asyncio.gather(*writes)
        picks.append(pool.prewrite_candidates(6)[0].node_id)  # that batch left: the round robin again
        await pool.close()
        return picks

    picks = asyncio.run(main())
    assert picks[:4] == [picks[0]] * 4
    assert picks[4] != picks[0]
    assert [len(c) for c in stubs[picks[0]].calls] == [1]  # one call: the Prewrites above were not written


def test_the_wait_grows_with_the_other_calls_in_progress_up_to_batch_linger() -> None:
    activity = Activity()
    assert activity.linger(0, 0.02) == 0.0  # nothing in progress: a lone caller never waits
    activity.calls = 3
    assert activity.linger(3, 0.02) == 0.0  # only the calls the batcher holds itself
    assert activity.linger(2, 0.02) == MIN_LINGER  # busy: at least the 5 ms of before
    activity.calls = 2 + FULL_LINGER_CALLS // 2
    assert activity.linger(2, 0.02) == pytest.approx(0.01)  # then in proportion to the calls
    activity.calls = 2 + FULL_LINGER_CALLS
    assert activity.linger(2, 0.02) == 0.02
    activity.calls = 10 * FULL_LINGER_CALLS
    assert activity.linger(2, 0.02) == 0.02  # never past batch-linger
    assert activity.linger(2, 0.002) == 0.002  # nor past a batch-linger below the 5 ms
    assert activity.linger(2, 0.0) == 0.0  # batch-linger = 0: never
