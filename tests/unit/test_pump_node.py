"""Pump node pieces without services: the score, the disk guard, write admission
and the state machine, driven through the node's own registry and storage
protocols (in-memory implementations written here), and the HTTP endpoint's
handling of bad requests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from bridge.errors import MetaUnavailable
from bridge.proto import meta_pb2
from pump import metrics
from pump.health import GIB, MAX_SCORE, DiskGuard, RateMeter, compute_score
from pump.http import StatusServer
from pump.node import NodeSettings, PumpNode, PumpState, StateError, WriteRefused

pytestmark = pytest.mark.timeout(60)


# -- score and disk guard ----------------------------------------------------


def test_score_is_zero_at_or_below_the_threshold() -> None:
    assert compute_score(available=10 * GIB, threshold=10 * GIB, write_rate=0, in_flight=0) == 0
    assert compute_score(available=5 * GIB, threshold=10 * GIB, write_rate=0, in_flight=0) == 0


def test_score_ramps_with_disk_headroom_then_saturates() -> None:
    assert compute_score(15 * GIB, 10 * GIB, 0, 0) == MAX_SCORE // 2
    assert compute_score(20 * GIB, 10 * GIB, 0, 0) == MAX_SCORE
    assert compute_score(900 * GIB, 10 * GIB, 0, 0) == MAX_SCORE
    # A zero threshold still needs 1 GiB of headroom for a full disk factor.
    assert compute_score(GIB // 4, 0, 0, 0) == MAX_SCORE // 4


def test_score_falls_with_load_but_stays_positive() -> None:
    idle = compute_score(100 * GIB, GIB, 0, 0)
    assert compute_score(100 * GIB, GIB, 10_000, 0) == idle // 2
    assert compute_score(100 * GIB, GIB, 0, 1_000) == idle // 2
    assert compute_score(100 * GIB, GIB, 10_000, 1_000) == idle // 3
    assert compute_score(100 * GIB, GIB, 1e12, 10**9) == 1


def test_rate_meter_smooths_samples() -> None:
    meter = RateMeter()
    assert meter.sample(0, 10.0) == 0.0
    assert meter.sample(100, 11.0) == 50.0  # half of 100/s on the first sample
    assert meter.sample(200, 12.0) == 75.0
    assert meter.sample(200, 12.0) == 75.0  # no time passed: unchanged


def test_disk_guard_transitions_log_and_export(caplog: pytest.LogCaptureFixture) -> None:
    free = {"bytes": 5 * GIB}
    guard = DiskGuard("/data", threshold=2 * GIB, usage=lambda path: free["bytes"])
    with caplog.at_level(logging.INFO, logger="pump.health"):
        assert guard.check() is False
        free["bytes"] = GIB
        assert guard.check() is True
        assert guard.check() is True
        free["bytes"] = 3 * GIB
        assert guard.check() is False
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages  # one line per transition, none for steady states
    assert "refusing Prewrites" in messages[0]
    assert "accepting Prewrites" in messages[1]
    assert metrics.PREWRITES_STOPPED._value.get() == 0
    assert metrics.DISK_AVAILABLE_BYTES._value.get() == 3 * GIB


def test_disk_guard_keeps_its_decision_when_the_disk_cannot_be_read() -> None:
    answers: list[int | OSError] = [GIB, OSError(5, "I/O error")]

    def usage(path: str) -> int:
        answer = answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer

    guard = DiskGuard("/data", threshold=2 * GIB, usage=usage)
    assert guard.check() is True
    assert guard.check() is True


# -- the node with in-memory registry and storage ------------------------------


class MemoryRegistry:
    """The node's NodeRegistry protocol over a dict."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[int, str], meta_pb2.NodeStatus] = {}
        self.states: list[str] = []
        self.revision = 1
        self.fail_heartbeats = False

    async def heartbeat(self, status: meta_pb2.NodeStatus, cluster_id: int = 0) -> int:
        if self.fail_heartbeats:
            raise MetaUnavailable("meta is down (test)")
        record = meta_pb2.NodeStatus()
        record.CopyFrom(status)
        record.is_alive = True
        self.nodes[(status.kind, status.node_id)] = record
        name = meta_pb2.NodeState.Name(status.state)
        if not self.states or self.states[-1] != name:
            self.states.append(name)
        self.revision += 1
        return self.revision

    async def list_nodes(
        self, kind: int = 0, wait_revision: int = 0, wait_ms: int = 0
    ) -> meta_pb2.ListNodesResponse:
        if wait_revision:
            await asyncio.sleep(0.01)
        nodes = [n for (k, _), n in sorted(self.nodes.items()) if kind in (0, k)]
        return meta_pb2.ListNodesResponse(nodes=nodes, revision=self.revision)

    def set_drainer(self, node_id: str, state: meta_pb2.NodeState, max_commit_ts: int) -> None:
        self.nodes[(meta_pb2.DRAINER, node_id)] = meta_pb2.NodeStatus(
            node_id=node_id,
            kind=meta_pb2.DRAINER,
            addr="127.0.0.1:1",
            state=state,
            is_alive=True,
            max_commit_ts=max_commit_ts,
        )
        self.revision += 1


class MemoryStorage:
    def __init__(self) -> None:
        self.watermark = 100
        self.max_commit_ts = 90
        self.unpaired_count = 0
        self.fakes = 0

    async def write_fake(self) -> int:
        self.fakes += 1
        self.watermark += 10
        return self.watermark


def state_of(node: PumpNode) -> PumpState:
    """``node.state`` read anew: mypy keeps an asserted ``node.state`` narrowed across an await."""
    return node.state


def make_node(registry: MemoryRegistry, storage: MemoryStorage, free: int = 100 * GIB) -> PumpNode:
    settings = NodeSettings(node_id="pump-u", addr="127.0.0.1:9", heartbeat_interval=0.05, ttl_ms=150)
    guard = DiskGuard("/data", threshold=GIB, usage=lambda path: free)
    return PumpNode(settings, registry, storage, storage.write_fake, disk_guard=guard)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 30))


async def until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.01)


def test_a_new_pump_with_no_drainers_goes_online_through_paused() -> None:
    registry, storage = MemoryRegistry(), MemoryStorage()

    async def scenario() -> None:
        node = make_node(registry, storage)
        assert node.write_refusal(True).endswith("it takes writes once every drainer has acknowledged it")
        await node.start()
        try:
            assert node.state is PumpState.ONLINE
            assert node.accepts_prewrite() and node.accepts_commit()
            entry = registry.nodes[(meta_pb2.PUMP, "pump-u")]
            assert (entry.addr, entry.max_commit_ts, entry.ttl_ms) == ("127.0.0.1:9", 100, 150)
            assert entry.score > 0
        finally:
            await node.stop()

    run(scenario)
    assert registry.states == ["PAUSED", "ONLINE"]


def test_disk_guard_refuses_prewrites_only() -> None:
    registry, storage = MemoryRegistry(), MemoryStorage()

    async def scenario() -> None:
        node = make_node(registry, storage, free=GIB // 2)
        await node.start()
        try:
            refusal = node.write_refusal(True)
            assert "refuses Prewrites" in refusal and "below stop-write-at-available-space" in refusal
            assert node.accepts_commit()
            with (
                pytest.raises(WriteRefused, match="Commits and Rollbacks are still accepted"),
                node.admit(True),
            ):
                pass
            with node.admit(False):
                assert node.writes.in_flight == 1
            assert node.writes.in_flight == 0
            await until(lambda: registry.nodes[(meta_pb2.PUMP, "pump-u")].score == 0)
        finally:
            await node.stop()

    run(scenario)


def test_pause_waits_for_in_flight_prewrites_and_resume_reopens() -> None:
    registry, storage = MemoryRegistry(), MemoryStorage()

    async def scenario() -> None:
        node = make_node(registry, storage)
        await node.start()
        try:
            assert node.enter_write(True) == ""
            pausing = asyncio.create_task(node.pause())
            await until(lambda: node.state is PumpState.PAUSING)
            assert "is paused" in node.write_refusal(True)
            assert node.write_refusal(False) == ""  # the Commit of a Prewrite it holds
            assert node.enter_write(False) == ""
            assert not pausing.done()
            node.exit_write(True)
            await pausing  # the Commit still in flight does not hold the pause
            assert node.state is PumpState.PAUSED
            node.exit_write(False)
            assert "is paused" in node.write_refusal(True) and node.write_refusal(False) == ""
            await node.pause()  # again: harmless
            await node.resume()
            assert state_of(node) is PumpState.ONLINE and node.accepts_prewrite()
            await node.resume()  # again: harmless
        finally:
            await node.stop()

    run(scenario)
    assert registry.states == ["PAUSED", "ONLINE", "PAUSING", "PAUSED", "ONLINE"]


def test_close_waits_for_unpaired_prewrites_then_drainers_then_goes_offline() -> None:
    registry, storage = MemoryRegistry(), MemoryStorage()

    async def scenario() -> None:
        node = make_node(registry, storage)
        storage.unpaired_count = 2
        await node.start()
        # Drainers registered after the join (this test is about closing).
        registry.set_drainer("d-online", meta_pb2.ONLINE, max_commit_ts=50)
        registry.set_drainer("d-paused", meta_pb2.PAUSED, max_commit_ts=50)
        registry.set_drainer("d-gone", meta_pb2.OFFLINE, max_commit_ts=1)
        try:
            await node.close()
            assert node.state is PumpState.CLOSING
            assert "is closing" in node.write_refusal(True)
            assert node.accepts_commit()
            offline = asyncio.create_task(node.wait_offline())
            await asyncio.sleep(0.2)
            assert storage.fakes == 0  # unpaired Prewrites first
            storage.unpaired_count = 0
            await until(lambda: storage.fakes == 1)
            final = storage.watermark
            registry.set_drainer("d-online", meta_pb2.ONLINE, max_commit_ts=final)
            await asyncio.sleep(0.2)
            assert not offline.done()  # the paused drainer has not passed the final watermark
            registry.set_drainer("d-paused", meta_pb2.PAUSED, max_commit_ts=final + 5)
            await offline
            assert state_of(node) is PumpState.OFFLINE
            assert "is offline" in node.write_refusal(False)
            with pytest.raises(StateError, match="cannot resume pump pump-u: it is offline"):
                await node.resume()
        finally:
            await node.stop()

    run(scenario)
    assert registry.states[-2:] == ["CLOSING", "OFFLINE"]
    assert registry.nodes[(meta_pb2.PUMP, "pump-u")].max_commit_ts >= storage.watermark - 10


def test_a_pump_that_was_online_restarts_online_and_heartbeat_failures_are_survived() -> None:
    registry, storage = MemoryRegistry(), MemoryStorage()
    registry.nodes[(meta_pb2.PUMP, "pump-u")] = meta_pb2.NodeStatus(
        node_id="pump-u", kind=meta_pb2.PUMP, state=meta_pb2.ONLINE
    )

    async def scenario() -> None:
        node = make_node(registry, storage)
        await node.start()
        try:
            assert registry.states == ["ONLINE"]  # no PAUSED join phase
            registry.fail_heartbeats = True
            errors = metrics.ERRORS.labels("heartbeat")._value.get()
            await until(lambda: metrics.ERRORS.labels("heartbeat")._value.get() > errors + 2)
            registry.fail_heartbeats = False
            storage.watermark = 500
            await until(lambda: registry.nodes[(meta_pb2.PUMP, "pump-u")].max_commit_ts == 500)
        finally:
            await node.stop()

    run(scenario)


def test_invalid_transitions_are_state_errors() -> None:
    registry, storage = MemoryRegistry(), MemoryStorage()

    async def scenario() -> None:
        node = make_node(registry, storage)
        with pytest.raises(StateError, match="still joining"):
            await node.close()
        with pytest.raises(StateError, match="cannot pause pump pump-u: it is joining"):
            await node.pause()
        await node.start()
        try:
            await node.close()
            await node.close()  # again: harmless
            with pytest.raises(StateError, match="cannot pause pump pump-u: it is closing"):
                await node.pause()
        finally:
            await node.stop()

    run(scenario)


# -- the HTTP endpoint's request handling --------------------------------------


class StaticControl:
    """The endpoint's NodeControl protocol with fixed answers."""

    def status(self) -> dict[str, object]:
        return {"state": "online"}

    async def pause(self) -> None:
        raise StateError("cannot pause pump p: it is closing")

    async def resume(self) -> None:
        return None

    async def close(self) -> None:
        return None


async def raw_request(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    answer = await reader.read()
    writer.close()
    return answer


def test_http_answers_bad_requests_clearly_and_keeps_serving() -> None:
    async def scenario() -> None:
        server = StatusServer(StaticControl(), "127.0.0.1", 0)
        port = await server.start()
        try:
            # aiohttp answers what its parser refuses as HTTP/1.0: only the status is compared
            answer = await raw_request(port, b"NONSENSE\r\n\r\n")
            assert answer.split(b" ", 2)[1] == b"400" and b"malformed request line" in answer
            answer = await raw_request(
                port, b"GET /status HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 20_000 + b"\r\n\r\n"
            )
            assert answer.split(b" ", 2)[1] == b"431"
            answer = await raw_request(
                port, b"POST /state/resume HTTP/1.1\r\nHost: x\r\nContent-Length: 999999\r\n\r\n"
            )
            assert answer.startswith(b"HTTP/1.1 413 ")
            answer = await raw_request(
                port, b"POST /state/pause HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
            )
            assert answer.startswith(b"HTTP/1.1 409 Conflict") and b"it is closing" in answer
            answer = await raw_request(port, b"HEAD /status HTTP/1.1\r\nHost: x\r\n\r\n")
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK") and b"Content-Length: " in head and body == b""
            answer = await raw_request(port, b"GET /status?verbose=1 HTTP/1.0\r\n\r\n")
            assert answer.startswith(
                b"HTTP/1.0 200 OK"
            )  # aiohttp answers in the request's version and answer.endswith(b'"state": "online"\n}\n')
        finally:
            await server.stop()

    run(scenario)
