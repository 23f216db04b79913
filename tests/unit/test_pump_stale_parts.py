"""Stale extra parts in the pump storage (real value log and LMDB index on files): a producer
wrote parts 1..5 of a transaction, then, retrying, parts 1..3 and the Prewrite with chunks = 3.
The pump serves exactly parts 1..3, the retry's, then the transaction; the index drops parts 4
and 5 when the Prewrite is applied (fast and slow path), and the pull ignores parts above the
count that came after the Prewrite."""

from __future__ import annotations

import logging
import shutil
from functools import partial
from pathlib import Path

import pytest

from bridge.binlog import Binlog, BinlogType, commit, parse_binlog
from pump.storage import ChunkPart, CommittedTxn, PullItem, Storage, StorageConfig, Watermark
from tests.support.chunk_writer import final_binlog, part_binlog, part_is_intact
from tests.support.storage_calls import pairs, run_guarded

HANG_GUARD = 120.0  # seconds; a safety net against hangs, never a performance assertion
SMALL = StorageConfig(segment_size=1 << 20)
S, C = 100, 200  # the transaction's start_ts and commit_ts


run = partial(run_guarded, guard=HANG_GUARD)


def attempt_part(chunk: int, attempt: str, size: int = 200) -> Binlog:
    """Part ``chunk`` of S, marked with the attempt that wrote it (its contents stay intact)."""
    binlog = part_binlog(S, chunk, size)
    binlog.prewrite_key = attempt.encode()
    return binlog


async def pulled(storage: Storage, after: int = 0, until: int = C, **limits: int) -> list[PullItem]:
    items: list[PullItem] = []
    async for batch in storage.pull(after, **limits):
        items += batch
        if any(isinstance(item, Watermark) and item.ts >= until for item in batch):
            return items
    raise AssertionError("the pull ended before the watermark was reached")


def served(items: list[PullItem]) -> list[tuple[str, int, str]]:
    """What a drainer gets: ("part", chunk, attempt) ... ("txn", chunks announced, "")."""
    out: list[tuple[str, int, str]] = []
    for item in items:
        if isinstance(item, ChunkPart):
            binlog = parse_binlog(item.commit_payload())
            assert binlog.tp == BinlogType.PrewriteChunk and binlog.commit_ts == item.commit_ts
            assert part_is_intact(binlog)
            out.append(("part", item.chunk, binlog.prewrite_key.decode()))
        elif isinstance(item, CommittedTxn):
            out.append(("txn", parse_binlog(item.commit_payload()).chunks, ""))
    return out


RETRIED = [("part", 1, "retry"), ("part", 2, "retry"), ("part", 3, "retry"), ("txn", 3, "")]


async def write_retried(storage: Storage) -> None:
    """Parts 1..5 (the first attempt, cut short), then parts 1..3, the Prewrite (chunks = 3)
    and the Commit (the retry)."""
    for chunk in range(1, 6):
        await storage.write(pairs([attempt_part(chunk, "first")]))
    await storage.write(pairs([attempt_part(chunk, "retry") for chunk in (1, 2, 3)]))
    await storage.write(pairs([final_binlog(S, 3)]))
    await storage.write(pairs([commit(S, C)]))


def test_the_pump_serves_exactly_the_parts_the_prewrite_announces(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> tuple[list[PullItem], list[int]]:
        storage = await Storage.open(tmp_path, SMALL)
        await write_retried(storage)
        items = await pulled(storage)
        indexed = [part.chunk for part in storage._index.parts(S)]
        await storage.close()
        return items, indexed

    with caplog.at_level(logging.WARNING, logger="pump.storage"):
        items, indexed = run(scenario())
    assert served(items) == RETRIED
    assert indexed == [1, 2, 3]  # parts 4 and 5 left the index with the Prewrite
    removed = [r.getMessage() for r in caplog.records if "stale parts" in r.getMessage()]
    assert removed == [
        f"start_ts {S}: its Prewrite announces 3 parts; removed 2 stale parts above them ([4, 5]), "
        "left by an earlier attempt of the producer"
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_the_slow_path_and_a_rebuilt_index_drop_the_stale_parts_too(tmp_path: Path) -> None:
    """index-queue-batches = 0: every record is read back from the log (``_record_of``); then
    kv/ is deleted and the index rebuilt from the log on open."""
    config = StorageConfig(segment_size=64 * 1024, index_queue_batches=0)

    async def write() -> list[PullItem]:
        storage = await Storage.open(tmp_path, config)
        await write_retried(storage)
        await storage.wait_indexed()
        assert storage.stats().read_back == 10  # all of them through the slow path
        items = await pulled(storage)
        await storage.close()
        return items

    async def rebuilt() -> tuple[list[PullItem], list[int]]:
        storage = await Storage.open(tmp_path, config)
        await storage.wait_indexed()
        items = await pulled(storage)
        indexed = [part.chunk for part in storage._index.parts(S)]
        await storage.close()
        return items, indexed

    assert served(run(write())) == RETRIED
    shutil.rmtree(tmp_path / "kv")
    items, indexed = run(rebuilt())
    assert served(items) == RETRIED and indexed == [1, 2, 3]


def test_parts_above_the_count_arriving_after_the_prewrite_are_ignored_by_the_pull(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A late copy of an old attempt's parts 4 and 5, stored after the Prewrite: the index
    keeps them (until GC), the pull never sends them, also when batches cut the transaction."""

    async def scenario() -> tuple[list[PullItem], list[PullItem], list[int]]:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.write(pairs([attempt_part(chunk, "retry", 5_000) for chunk in (1, 2, 3)]))
        await storage.write(pairs([final_binlog(S, 3)]))
        await storage.write(pairs([attempt_part(chunk, "first", 5_000) for chunk in (4, 5)]))
        await storage.write(pairs([commit(S, C)]))
        whole = await pulled(storage)
        one_by_one = await pulled(storage, max_bytes=1)  # a batch per binlog
        indexed = [part.chunk for part in storage._index.parts(S)]
        await storage.close()
        return whole, one_by_one, indexed

    with caplog.at_level(logging.WARNING, logger="pump.storage"):
        whole, one_by_one, indexed = run(scenario())
    assert indexed == [1, 2, 3, 4, 5]
    assert served(whole) == RETRIED
    assert served(one_by_one) == RETRIED
    ignored = [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()]
    assert ignored and ignored[0] == (
        f"transaction start_ts {S}, commit_ts {C}: ignoring 2 stale parts above the 3 its Prewrite "
        "announces (chunks [4, 5]), left by an earlier attempt of the producer"
    )
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_retry_that_came_whole_leaves_no_part_behind(tmp_path: Path) -> None:
    """The first attempt wrote parts, the retry the whole transaction (chunks = 0)."""

    async def scenario() -> tuple[list[PullItem], list[int]]:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.write(pairs([attempt_part(chunk, "first") for chunk in (1, 2)]))
        await storage.write(pairs([final_binlog(S, 0), commit(S, C)]))
        items = await pulled(storage)
        indexed = [part.chunk for part in storage._index.parts(S)]
        await storage.close()
        return items, indexed

    items, indexed = run(scenario())
    assert served(items) == [("txn", 0, "")] and indexed == []


def test_a_prewrite_paired_with_an_orphan_commit_drops_the_stale_parts(tmp_path: Path) -> None:
    async def scenario() -> tuple[list[PullItem], list[int]]:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.write(pairs([attempt_part(chunk, "first") for chunk in range(1, 6)]))
        await storage.write(pairs([attempt_part(chunk, "retry") for chunk in (1, 2, 3)]))
        await storage.write(pairs([commit(S, C)]))  # the Commit before its Prewrite: an orphan
        await storage.write(pairs([final_binlog(S, 3)]))
        items = await pulled(storage)
        indexed = [part.chunk for part in storage._index.parts(S)]
        await storage.close()
        return items, indexed

    items, indexed = run(scenario())
    assert served(items) == RETRIED and indexed == [1, 2, 3]


def test_a_second_copy_of_the_prewrite_does_not_remove_the_parts_of_the_first(tmp_path: Path) -> None:
    """Only the Prewrite kept (the first) says which parts are the transaction's."""

    async def scenario() -> tuple[list[PullItem], list[int]]:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.write(pairs([attempt_part(chunk, "first") for chunk in range(1, 6)]))
        await storage.write(pairs([final_binlog(S, 5)]))
        await storage.write(pairs([final_binlog(S, 3)]))  # a stray second copy, another count
        await storage.write(pairs([commit(S, C)]))
        items = await pulled(storage)
        indexed = [part.chunk for part in storage._index.parts(S)]
        await storage.close()
        return items, indexed

    items, indexed = run(scenario())
    assert indexed == [1, 2, 3, 4, 5]
    assert served(items) == [("part", chunk, "first") for chunk in range(1, 6)] + [("txn", 5, "")]


def test_a_missing_part_is_still_logged_as_an_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> list[PullItem]:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.write(pairs([attempt_part(chunk, "only") for chunk in (1, 3)]))
        await storage.write(pairs([final_binlog(S, 3), commit(S, C)]))
        items = await pulled(storage)
        await storage.close()
        return items

    with caplog.at_level(logging.ERROR, logger="pump.storage"):
        items = run(scenario())
    assert served(items) == [("part", 1, "only"), ("part", 3, "only"), ("txn", 3, "")]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        f"transaction start_ts {S}, commit_ts {C}: its Prewrite announces 3 parts, stored are chunks "
        "[1, 3]; the drainer will refuse it"
    ]
