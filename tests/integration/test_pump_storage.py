"""The pump storage engine end to end, on real files: concurrent writers, pulls,
restarts, SIGKILL, a torn tail, a 100 MB binlog, a slow index and GC."""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from bridge import tso
from bridge.binlog import Binlog, BinlogType, commit, probe, rollback
from bridge.errors import ProtocolError
from pump.storage import CommittedTxn, DataDirLocked, Storage, StorageConfig, Watermark
from pump.storage.index import Index
from pump.storage.vlog import segment_name
from tests.support.process import ChildProcess, wait_until
from tests.support.storage_calls import pairs, run_guarded
from tests.support.storage_writer import CONFIG as CHILD_CONFIG
from tests.support.storage_writer import Acked, prewrite_binlog, prewrite_payload

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 120.0  # seconds; a safety net against hangs, never a performance assertion
SMALL = StorageConfig(segment_size=1 << 20)


run = partial(run_guarded, guard=HANG_GUARD)


@dataclass
class Pulled:
    txns: list[CommittedTxn] = field(default_factory=list)
    watermarks: list[int] = field(default_factory=list)

    def check(self, expected: dict[int, int]) -> None:
        """Exactly ``expected`` (start_ts -> commit_ts), each once, in strictly
        increasing commit_ts, with its Prewrite payload, never behind a watermark."""
        commit_ts = [t.commit_ts for t in self.txns]
        assert all(a < b for a, b in itertools.pairwise(commit_ts)), "commit_ts not strictly increasing"
        assert {t.start_ts: t.commit_ts for t in self.txns} == expected
        assert len(self.txns) == len(expected)
        for txn in self.txns:
            assert txn.payload == prewrite_payload(txn.start_ts)
        assert self.watermarks == sorted(self.watermarks), "a watermark went down"


async def pull_until(storage: Storage, after: int, until_ts: int, into: Pulled | None = None) -> Pulled:
    """Pull from ``after`` until a watermark at or past ``until_ts``."""
    pulled = into if into is not None else Pulled()
    last_watermark = after
    async for items in storage.pull(after, max_entries=500):
        for item in items:
            if isinstance(item, Watermark):
                pulled.watermarks.append(item.ts)
                last_watermark = item.ts
            else:
                assert isinstance(item, CommittedTxn), "a chunk part: these tests write no chunked binlog"
                assert item.commit_ts > last_watermark, "a transaction behind an announced watermark"
                pulled.txns.append(item)
        if last_watermark >= until_ts:
            return pulled
    raise AssertionError("the pull ended before the watermark was reached")


async def wait_for_watermark(pulled: Pulled, ts: int) -> None:
    while not pulled.watermarks or pulled.watermarks[-1] < ts:
        await asyncio.sleep(0.01)


class Clock:
    """A TSO stand-in shared by the writers of one test."""

    def __init__(self, start: int = 1000) -> None:
        self._next = itertools.count(start)

    def __call__(self) -> int:
        return next(self._next)


async def random_writer(
    storage: Storage, clock: Clock, rng: random.Random, quota: int, expected: dict[int, int]
) -> None:
    """Writes ``quota`` binlogs in calls of 1-8: Prewrites, and Commits or
    Rollbacks of its own acknowledged Prewrites, at random."""
    acknowledged: list[int] = []
    written = 0
    while written < quota or acknowledged:
        batch: list[Binlog] = []
        started: list[int] = []
        for _ in range(rng.randint(1, 8)):
            finishing = acknowledged and (written + len(batch) >= quota or rng.random() < 0.5)
            if finishing:
                start_ts = acknowledged.pop(rng.randrange(len(acknowledged)))
                if rng.random() < 0.8:
                    expected[start_ts] = clock()
                    batch.append(commit(start_ts, expected[start_ts]))
                else:
                    batch.append(rollback(start_ts))
            elif written + len(batch) < quota:
                started.append(clock())
                batch.append(prewrite_binlog(started[-1]))
        await storage.write(pairs(batch))
        acknowledged += started
        written += len(batch)


def test_concurrent_writers_then_pull_returns_every_committed_txn_once_in_order(tmp_path: Path) -> None:
    writers, total = 16, 100_000
    expected: dict[int, int] = {}
    clock = Clock()

    async def scenario() -> tuple[Pulled, Pulled, Pulled]:
        storage = await Storage.open(tmp_path, SMALL)
        live_pulled = Pulled()
        live = asyncio.create_task(pull_until(storage, 0, 2**62, into=live_pulled))
        rngs = [random.Random(i) for i in range(writers)]
        await asyncio.gather(*(random_writer(storage, clock, r, total // writers, expected) for r in rngs))
        final = clock()
        await storage.write_fake(final)
        fresh = await pull_until(storage, 0, final)
        await wait_for_watermark(live_pulled, final)
        live.cancel()
        assert isinstance((await asyncio.gather(live, return_exceptions=True))[0], asyncio.CancelledError)
        assert storage.stats().records > total
        await storage.close()
        reopened = await Storage.open(tmp_path, SMALL)
        assert reopened.watermark == final
        after_restart = await pull_until(reopened, 0, final)
        await reopened.close()
        return fresh, live_pulled, after_restart

    fresh, live, after_restart = run(scenario())
    assert len(expected) > 30_000
    fresh.check(expected)
    live.check(expected)
    after_restart.check(expected)


def test_a_live_pull_follows_new_writes(tmp_path: Path) -> None:
    clock = Clock()

    async def scenario() -> None:
        storage = await Storage.open(tmp_path, SMALL)
        pulls = storage.pull(0)
        expected: dict[int, int] = {}
        seen: list[CommittedTxn] = []
        for _ in range(20):
            start_ts = clock()
            await storage.write(pairs([prewrite_binlog(start_ts)]))
            expected[start_ts] = clock()
            await storage.write(pairs([commit(start_ts, expected[start_ts])]))
            while not seen or seen[-1].start_ts != start_ts:
                items = await anext(pulls)
                seen += [i for i in items if isinstance(i, CommittedTxn)]
        Pulled(seen).check(expected)
        await pulls.aclose()
        await storage.close()

    run(scenario())


def test_restart_keeps_unpaired_prewrites_orphans_and_the_watermark(tmp_path: Path) -> None:
    async def first_life() -> int:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.write(pairs([prewrite_binlog(10), prewrite_binlog(20)]))
        await storage.write(pairs([commit(10, 30)]))
        await storage.write(pairs([commit(40, 50)]))  # an orphan: its Prewrite comes later
        await storage.wait_indexed()
        assert storage.unpaired_before(2**62) == [20]
        watermark = storage.watermark
        assert watermark == 19
        await storage.close()
        return watermark

    async def second_life(watermark: int) -> Pulled:
        storage = await Storage.open(tmp_path, SMALL)
        assert storage.watermark >= watermark
        assert storage.unpaired_before(2**62) == [20]
        assert storage.stats().orphans == 1
        await storage.write(pairs([commit(20, 60)]))
        await storage.write(pairs([prewrite_binlog(40)]))
        await storage.write_fake(70)
        pulled = await pull_until(storage, 0, 70)
        await storage.close()
        return pulled

    run(second_life(run(first_life()))).check({10: 30, 20: 60, 40: 50})


def test_resolve_writes_the_commit_or_discards_the_prewrite(tmp_path: Path) -> None:
    fresh = tso.compose(int(time.time() * 1000), 0)

    async def scenario() -> Pulled:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.write(pairs([prewrite_binlog(s) for s in (10, 11, fresh)]))
        await storage.wait_indexed()
        assert storage.unpaired_older_than(0) == [10, 11, fresh]
        assert storage.unpaired_older_than(3600) == [10, 11]  # ts 10 and 11 are from 1970
        await storage.resolve(10, 20)
        await storage.resolve(11, None)
        await storage.resolve(99, None)  # unknown: nothing happens
        await storage.write(pairs([commit(fresh, fresh + 1)]))
        await storage.write_fake(fresh + 2)
        pulled = await pull_until(storage, 0, fresh + 2)
        assert storage.unpaired_count == 0
        await storage.close()
        return pulled

    run(scenario()).check({10: 20, fresh: fresh + 1})


def test_probes_are_not_stored_and_invalid_binlogs_are_refused_whole(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.write(pairs([probe()]))
        assert storage.stats().records == 0
        bad_commit = Binlog(tp=BinlogType.Commit, start_ts=5, commit_ts=5)
        with pytest.raises(ProtocolError, match="commit_ts"):
            await storage.write(pairs([prewrite_binlog(4), bad_commit]))
        with pytest.raises(ProtocolError, match="type 3"):
            await storage.write(pairs([Binlog(tp=BinlogType.PreDDL, start_ts=6)]))
        assert storage.stats().records == 0
        with pytest.raises(DataDirLocked):
            await Storage.open(tmp_path, SMALL)
        await storage.close()

    run(scenario())


def test_a_100_mb_binlog_is_stored_and_pulled(tmp_path: Path) -> None:
    big = Binlog(tp=BinlogType.Prewrite, start_ts=10, prewrite_value=os.urandom(1 << 20) * 100)
    payload = big.SerializeToString()
    digest = hashlib.sha256(payload).digest()
    del big

    async def scenario() -> bytes:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.write([(Binlog(tp=BinlogType.Prewrite, start_ts=10), payload)])
        await storage.write(pairs([commit(10, 11)]))
        pulled = await pull_until(storage, 0, 11)
        await storage.close()
        assert [t.commit_ts for t in pulled.txns] == [11]
        return hashlib.sha256(pulled.txns[0].payload).digest()

    assert run(scenario()) == digest


def test_a_slow_index_never_blocks_writes_and_the_chaser_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    apply = Index.apply

    def slow_apply(self: Index, *args: Any) -> None:
        import time

        time.sleep(0.02)
        apply(self, *args)

    monkeypatch.setattr(Index, "apply", slow_apply)
    config = StorageConfig(segment_size=1 << 20, index_queue_batches=1, index_ack_wait=0.001)
    expected: dict[int, int] = {}
    clock = Clock()

    async def scenario() -> tuple[Pulled, int]:
        storage = await Storage.open(tmp_path, config)
        rngs = [random.Random(i) for i in range(8)]
        await asyncio.gather(*(random_writer(storage, clock, r, 1500, expected) for r in rngs))
        final = clock()
        await storage.write_fake(final)
        pulled = await pull_until(storage, 0, final)
        read_back = storage.stats().read_back
        await storage.close()
        return pulled, read_back

    pulled, read_back = run(scenario())
    assert read_back > 0, "the chaser never had to read the log back"
    pulled.check(expected)


def test_a_hand_torn_last_record_is_truncated_on_restart(tmp_path: Path) -> None:
    async def write_some() -> None:
        storage = await Storage.open(tmp_path, SMALL)
        for start_ts in (10, 20):
            await storage.write(pairs([prewrite_binlog(start_ts)]))
            await storage.write(pairs([commit(start_ts, start_ts + 1)]))
        await storage.write(pairs([prewrite_binlog(30)]))
        await storage.close()

    run(write_some())
    segment = tmp_path / "value" / segment_name(1)
    size = segment.stat().st_size
    torn = size - len(prewrite_payload(30)) // 2
    os.truncate(segment, torn)

    async def reopen() -> Pulled:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.wait_indexed()
        assert storage.unpaired_before(2**62) == []  # the torn Prewrite is gone
        assert segment.stat().st_size < torn
        await storage.write_fake(40)
        pulled = await pull_until(storage, 0, 40)
        await storage.close()
        return pulled

    run(reopen()).check({10: 11, 20: 21})


def test_the_index_is_rebuilt_from_the_value_log(tmp_path: Path) -> None:
    expected: dict[int, int] = {}
    clock = Clock()

    async def write_some() -> int:
        storage = await Storage.open(tmp_path, SMALL)
        rngs = [random.Random(i) for i in range(4)]
        await asyncio.gather(*(random_writer(storage, clock, r, 500, expected) for r in rngs))
        await storage.write(pairs([prewrite_binlog(clock())]))  # left unpaired
        await storage.close()
        return clock()

    final = run(write_some())
    shutil.rmtree(tmp_path / "kv")

    async def rebuild() -> Pulled:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.wait_indexed()
        assert storage.unpaired_before(2**62) == [final - 1]
        await storage.resolve(final - 1, None)
        await storage.write_fake(final)
        pulled = await pull_until(storage, 0, final)
        await storage.close()
        return pulled

    run(rebuild()).check(expected)


def test_gc_removes_old_segments_and_their_commits(tmp_path: Path) -> None:
    config = StorageConfig(segment_size=8192)

    async def scenario() -> None:
        storage = await Storage.open(tmp_path, config)
        for start_ts in range(1000, 3000, 10):
            await storage.write(pairs([prewrite_binlog(start_ts)]))
            await storage.write(pairs([commit(start_ts, start_ts + 5)]))
        await storage.write(pairs([prewrite_binlog(2500_0)]))  # unpaired: caps the GC
        await storage.wait_indexed()
        segments, size = storage.stats().segments, storage.size_bytes
        assert await storage.gc(2000) == 2000
        assert storage.gc_ts == 2000
        assert storage.stats().segments < segments and storage.size_bytes < size
        pulled = await pull_until(storage, 0, 2995)
        assert pulled.txns[0].commit_ts >= 2000
        Pulled(pulled.txns).check({s: s + 5 for s in range(2000, 3000, 10) if s + 5 >= 2000})
        assert await storage.gc(10**9) == 25_000  # the oldest unpaired Prewrite
        await storage.close()
        reopened = await Storage.open(tmp_path, config)
        assert reopened.gc_ts == 25_000
        await reopened.close()

    run(scenario())


# --- SIGKILL -------------------------------------------------------------------


def kill_writer_once(data_dir: Path, base_ts: int, acks: int, log_path: Path) -> str:
    child = ChildProcess(
        [sys.executable, "-m", "tests.support.storage_writer", str(data_dir), str(base_ts)],
        log_path,
        env={"PYTHONPATH": str(ROOT)},
    )
    try:
        child.wait_for_line("^READY$", timeout=HANG_GUARD)
        wait_until(lambda: child.output.count("\nACK ") >= acks, timeout=HANG_GUARD, what=f"{acks} acks")
    finally:
        child.kill()
        child.stop()
    return child.output


async def verify_after_kill(data_dir: Path, acked: Acked, watermark_before: int, fake_ts: int) -> int:
    """Every acknowledged binlog is there; settle the leftovers; pull order holds."""
    storage = await Storage.open(data_dir, CHILD_CONFIG)
    await storage.wait_indexed()
    assert storage.watermark >= watermark_before
    for start_ts in storage.unpaired_before(2**62):
        assert start_ts not in acked.commits and start_ts not in acked.rollbacks
        await storage.resolve(start_ts, None)
    await storage.write_fake(fake_ts)
    pulled = await pull_until(storage, 0, fake_ts)
    await storage.close()
    got = {t.start_ts: t.commit_ts for t in pulled.txns}
    missing = {s: c for s, c in acked.commits.items() if got.get(s) != c}
    assert not missing, f"acknowledged commits lost: {sorted(missing.items())[:5]}"
    assert not (set(got) & acked.rollbacks)
    assert set(got) <= acked.prewrites
    Pulled(pulled.txns, pulled.watermarks).check(got)
    return fake_ts


def sigkill_rounds(tmp_path: Path, rounds: int) -> None:
    rng = random.Random(rounds)
    acked = Acked()
    watermark = 0
    base_ts = 1_000_000
    for i in range(rounds):
        output = kill_writer_once(
            tmp_path / "data", base_ts, rng.randint(5, 120), tmp_path / f"child-{i}.log"
        )
        acked.add_output(output)
        assert acked.commits, "the child acknowledged no Commit"
        fake_ts = max(*acked.commits.values(), *acked.prewrites) + 1_000_000
        watermark = run(verify_after_kill(tmp_path / "data", acked, watermark, fake_ts))
        base_ts = fake_ts + 1


def test_sigkill_keeps_every_acknowledged_binlog(tmp_path: Path) -> None:
    sigkill_rounds(tmp_path, 2)


@pytest.mark.slow
def test_sigkill_twenty_times_keeps_every_acknowledged_binlog(tmp_path: Path) -> None:
    sigkill_rounds(tmp_path, 20)
