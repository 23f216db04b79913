"""The pump's fake binlogs (pump.app.FakeBinlogTicker), tick by tick on a real storage and a real
meta service: an idle pump writes one per tick; a pump that took any binlog since the last tick
writes none, even when what it took is older than its last fake binlog (producers lagging behind
the timestamps they got); OFFLINE writes none."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from bridge.binlog import commit
from bridge.meta.client import MetaClient
from pump.app import FakeBinlogTicker
from pump.node import PumpState
from pump.storage import Storage, StorageConfig
from tests.support.pump_server import prewrite_of, start_meta
from tests.support.storage_calls import pairs, run_guarded

pytestmark = pytest.mark.timeout(120)
run = partial(run_guarded, guard=60.0)  # a safety net against hangs, never a performance bound


def test_fake_binlogs_only_on_ticks_without_binlogs(tmp_path: Path) -> None:
    meta_process, meta_addr = start_meta(tmp_path)

    async def scenario() -> None:
        storage = await Storage.open(tmp_path / "pump", StorageConfig(segment_size=1 << 20))
        try:
            async with MetaClient(meta_addr) as meta:
                node: Any = SimpleNamespace(state=PumpState.ONLINE)
                ticker = FakeBinlogTicker(meta, storage, cast(Any, node), 0.1)
                assert await ticker.tick()  # idle: a fake binlog
                assert await ticker.tick()
                old_start = await meta.get_timestamp()
                await storage.write(pairs([prewrite_of(old_start)]))
                assert not await ticker.tick()  # a Prewrite came: not idle
                old_commit = await meta.get_timestamp()
                assert await ticker.tick()  # a fake newer than old_commit (the Prewrite holds the watermark)
                await storage.write(pairs([commit(old_start, old_commit)]))
                await storage.wait_indexed()
                assert storage.max_commit_ts > old_commit
                assert not await ticker.tick()  # a Commit older than the last fake came: not idle either
                assert await ticker.tick()  # nothing since: idle again
                written = storage.records_written
                node.state = PumpState.OFFLINE
                assert not await ticker.tick()
                assert storage.records_written == written
        finally:
            await storage.close()

    try:
        run(scenario())
    finally:
        meta_process.kill()
