"""GC by retention on a real storage engine, and the warning for a drainer behind
the GC point, read from a real `binlog-bridge meta` registry."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from bridge import tso
from bridge.binlog import commit
from bridge.meta.client import MetaClient
from bridge.proto import meta_pb2
from pump.gc import GarbageCollector, default_interval, drainer_lost_binlogs, gc_point
from pump.storage import Storage, StorageConfig
from tests.support.pump_server import prewrite_of, start_meta
from tests.support.storage_calls import run_guarded

pytestmark = pytest.mark.timeout(120)

HANG_GUARD = 60.0  # seconds: a safety net against hangs, never a performance bound


run = partial(run_guarded, guard=HANG_GUARD)


@pytest.fixture
def meta(tmp_path: Path) -> Iterator[str]:
    child, addr = start_meta(tmp_path)
    yield addr
    child.kill()


def behind_gauge(drainer: str) -> float | None:
    return REGISTRY.get_sample_value("bridge_pump_drainer_behind_gc", {"drainer": drainer})


async def register_drainer(
    meta: MetaClient, node_id: str, checkpoint: int, state: meta_pb2.NodeState = meta_pb2.ONLINE
) -> None:
    status = meta_pb2.NodeStatus(
        node_id=node_id, kind=meta_pb2.DRAINER, addr="127.0.0.1:1", state=state, max_commit_ts=checkpoint,
        ttl_ms=60_000,
    )  # fmt: skip
    await meta.heartbeat(status)


def test_gc_point_is_the_retention_before_now_in_tso_units() -> None:
    assert gc_point(1_000.0, 60.0) == tso.compose(940_000, 0)
    assert gc_point(10.0, 3600.0) == 0
    assert default_interval(86400 * 7) == 600.0
    assert default_interval(60.0) == 10.0
    assert (
        drainer_lost_binlogs(5, 100) and not drainer_lost_binlogs(99, 100) and not drainer_lost_binlogs(0, 1)
    )


def test_gc_deletes_old_segments_and_flags_the_drainer_behind_it(
    tmp_path: Path, meta: str, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    behind, current, gone = f"{unique_name}-behind", f"{unique_name}-current", f"{unique_name}-offline"

    async def scenario() -> None:
        storage = await Storage.open(tmp_path / "pump", StorageConfig(segment_size=64 * 1024))
        async with MetaClient(meta) as registry:
            first_commit = 0
            for _ in range(300):
                start_ts = await registry.get_timestamp()
                await storage.write([(prewrite_of(start_ts), prewrite_of(start_ts).SerializeToString())])
                commit_ts = await registry.get_timestamp()
                await storage.write(
                    [(commit(start_ts, commit_ts), commit(start_ts, commit_ts).SerializeToString())]
                )
                first_commit = first_commit or commit_ts
            await storage.write_fake(await registry.get_timestamp())
            await storage.wait_indexed()
            size_before = storage.size_bytes
            await register_drainer(registry, behind, first_commit)
            await register_drainer(registry, current, storage.watermark)
            await register_drainer(registry, gone, first_commit, meta_pb2.OFFLINE)

            # max-retention = gc: deletes by age past the drainer behind, the case this test is about
            collector = GarbageCollector(storage, registry, 60.0, interval=3600.0, max_retention=60.0)
            with caplog.at_level(logging.INFO, logger="pump.gc"):
                gc_ts = await collector.collect_once(now=time.time() + 3600)  # everything is old by then
                assert gc_ts == storage.gc_ts > first_commit
                assert storage.size_bytes < size_before / 2
                assert (
                    behind_gauge(behind) == 1 and behind_gauge(current) is None and behind_gauge(gone) is None
                )
                assert await collector.check_drainers(gc_ts) == [behind]

                await register_drainer(registry, behind, storage.watermark)
                assert await collector.check_drainers(gc_ts) == []
                assert behind_gauge(behind) is None
        await storage.close()

    run(scenario())
    # pump.gc's own: grpc.aio may log an unrelated "Event loop is closed" callback error at the end
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and r.name == "pump.gc"]
    assert len(errors) == 1  # said once while it lasts, not at every check
    assert f"drainer {behind} is behind the GC point" in errors[0]
    assert f"drainer {behind} is no longer behind the GC point" in caplog.text
