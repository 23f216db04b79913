"""GC bounded by the drainers' checkpoints (issue 15, item 5): on a real storage engine in a
temporary directory, with the registry's answer given by the test (the registry itself is
covered against a real `binlog-bridge meta` in tests/integration/test_pump_gc.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from bridge import tso
from bridge.binlog import commit
from bridge.config import build
from bridge.errors import ConfigError, MetaUnavailable
from bridge.proto import meta_pb2
from pump.config import PumpConfig
from pump.gc import GarbageCollector, gc_point, gc_target
from pump.storage import CommittedTxn, Storage, StorageConfig, Watermark
from tests.support.pump_server import prewrite_of

HANG_GUARD = 60.0  # seconds: a safety net against hangs, never a performance bound
BASE_MS = 1_700_000_000_000  # the physical time of the first binlog (Nov 2023)
TXNS = 300
RETENTION = 60.0
NOW = BASE_MS / 1000 + 86400  # a day after the binlogs: every one of them is older than RETENTION


def run(coro: Awaitable[Any]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, HANG_GUARD)

    return asyncio.run(guarded())


class Registry:
    """The drainers the meta service would list; ``failing`` makes the listing fail."""

    def __init__(self) -> None:
        self.drainers: dict[str, tuple[int, meta_pb2.NodeState]] = {}  # id -> (checkpoint, state)
        self.failing = False

    async def list_nodes(
        self, kind: meta_pb2.NodeKind = meta_pb2.DRAINER, wait_revision: int = 0, wait_ms: int = 0
    ) -> meta_pb2.ListNodesResponse:
        if self.failing:
            raise MetaUnavailable("meta service 127.0.0.1:1 unreachable")
        nodes = [
            meta_pb2.NodeStatus(node_id=node_id, kind=kind, state=state, max_commit_ts=checkpoint)
            for node_id, (checkpoint, state) in self.drainers.items()
        ]
        return meta_pb2.ListNodesResponse(nodes=nodes)


async def filled_storage(path: Path) -> tuple[Storage, list[int]]:
    """A storage holding TXNS committed transactions, one a millisecond from BASE_MS, in many
    segments; returns it and the commit_ts of each."""
    storage = await Storage.open(path, StorageConfig(segment_size=4096))
    commits, batch = [], []
    for i in range(TXNS):
        start_ts, commit_ts = tso.compose(BASE_MS + i, 0), tso.compose(BASE_MS + i, 1)
        for binlog in (prewrite_of(start_ts), commit(start_ts, commit_ts)):
            batch.append((binlog, binlog.SerializeToString()))
        commits.append(commit_ts)
    await storage.write(batch)
    await storage.write_fake(tso.compose(BASE_MS + TXNS, 0))
    await storage.wait_indexed()
    return storage, commits


async def pulled_after(storage: Storage, checkpoint: int) -> list[int]:
    """The commit_ts of every transaction a drainer at ``checkpoint`` pulls, up to the watermark."""
    got: list[int] = []
    async for items in storage.pull(checkpoint):
        got.extend(item.commit_ts for item in items if isinstance(item, CommittedTxn))
        if any(isinstance(item, Watermark) and item.ts >= storage.watermark for item in items):
            break
    return got


def test_gc_target_is_capped_by_the_slowest_drainer_and_raised_by_max_retention() -> None:
    assert gc_target(1000, {}) == 1000
    assert gc_target(1000, {"a": 500, "b": 700}) == 501  # commits <= 500 are read by both
    assert gc_target(1000, {"a": 5000}) == 1000  # a drainer ahead of the age point holds nothing
    assert gc_target(1000, {"a": 500}, floor=800) == 800  # max-retention overrides the drainer
    assert gc_target(1000, {"a": 900}, floor=800) == 901


def test_gc_keeps_every_binlog_a_registered_drainer_has_not_checkpointed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        storage, commits = await filled_storage(tmp_path / "pump")
        registry = Registry()
        slow_checkpoint = commits[99]
        registry.drainers = {
            "slow": (slow_checkpoint, meta_pb2.PAUSED),  # a paused drainer resumes from its checkpoint
            "current": (commits[-1], meta_pb2.ONLINE),
            "gone": (0, meta_pb2.OFFLINE),  # offline for good: holds nothing
        }
        collector = GarbageCollector(storage, registry, RETENTION, interval=3600.0)
        size_before = storage.size_bytes
        with caplog.at_level(logging.INFO, logger="pump.gc"):
            gc_ts = await collector.collect_once(now=NOW)
            assert gc_ts == slow_checkpoint + 1 < gc_point(NOW, RETENTION)
            assert storage.size_bytes < size_before  # what is before the checkpoint did go
            assert await pulled_after(storage, slow_checkpoint) == commits[100:]
            assert await collector.check_drainers(gc_ts) == []

            registry.drainers["slow"] = (commits[199], meta_pb2.ONLINE)  # it read on
            assert await collector.collect_once(now=NOW) == commits[199] + 1
            assert await pulled_after(storage, commits[199]) == commits[200:]

            registry.failing = True  # cannot see the drainers: delete nothing, say why
            registry.drainers.pop("slow")
            with pytest.raises(MetaUnavailable):
                await collector.collect_once(now=NOW)
            assert storage.gc_ts == commits[199] + 1
        await storage.close()

    run(scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once while it lasts, not every round
    assert warnings[0].startswith("drainer slow holds GC back: its checkpoint ")
    assert "set max-retention to bound this" in warnings[0]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_max_retention_deletes_by_age_and_names_the_drainer_that_falls_behind(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> tuple[int, int]:
        storage, commits = await filled_storage(tmp_path / "pump")
        registry = Registry()
        registry.drainers = {"laggard": (commits[9], meta_pb2.ONLINE)}
        collector = GarbageCollector(storage, registry, RETENTION, interval=3600.0, max_retention=3600.0)
        with caplog.at_level(logging.INFO, logger="pump.gc"):
            gc_ts = await collector.collect_once(now=NOW)  # a day later: past max-retention too
        await storage.close()
        return gc_ts, commits[9]

    gc_ts, checkpoint = run(scenario())
    assert gc_ts > checkpoint + 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"drainer laggard falls behind max-retention: its checkpoint {checkpoint} is older than 3600s; "
        f"deleting binlogs it has not read (up to ts {gc_point(NOW, 3600.0)})"
    ]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("drainer laggard is behind the GC point")


def test_max_retention_below_gc_is_refused() -> None:
    with pytest.raises(ValueError, match="max_retention"):
        GarbageCollector(object(), Registry(), 3600.0, max_retention=60.0)  # type: ignore[arg-type]
    assert build(PumpConfig, {"gc": "1h", "max-retention": "2d"}).max_retention == 2 * 86400
    assert build(PumpConfig, {}).max_retention == 0  # unset: GC waits for every drainer
    for options in ({"gc": "1h", "max-retention": "30m"}, {"gc": 0, "max-retention": "1h"}):
        with pytest.raises(ConfigError, match=r"^max-retention: expected 0 \(unset\) or at least gc"):
            build(PumpConfig, options)
