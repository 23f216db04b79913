"""Chunked transactions in the pump storage, on real files: parts are stored beside
the Prewrite, pulled in chunk order before the final binlog with commit_ts set, a
pull batch may end between them, the index finds them after a rebuild from the log
(slow path) and after SIGKILL, a rolled-back transaction's parts are never pulled
and GC removes them; the gRPC service takes parts through WriteBinlog(s)."""

from __future__ import annotations

import re
import shutil
import sys
import urllib.request
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from bridge.binlog import BinlogType, commit, parse_binlog, rollback
from bridge.errors import ProtocolError
from bridge.grpcutil import aio_channel
from bridge.proto import pump_pb2, pump_pb2_grpc
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig
from pump.storage import ChunkPart, CommittedTxn, PullItem, Storage, StorageConfig, Watermark
from pump.wire import response_entities
from tests.support.chunk_writer import CONFIG as CHILD_CONFIG
from tests.support.chunk_writer import final_binlog, part_binlog, part_is_intact
from tests.support.process import ChildProcess, wait_until
from tests.support.pump_server import PumpProcess, start_meta
from tests.support.storage_calls import pairs, run_guarded

ROOT = Path(__file__).resolve().parents[2]
HANG_GUARD = 120.0  # seconds; a safety net against hangs, never a performance assertion
SMALL = StorageConfig(segment_size=1 << 20)
WRITERS = 4  # concurrent writers in the SIGKILL child


run = partial(run_guarded, guard=HANG_GUARD)


async def write_chunked(
    storage: Storage, start_ts: int, n: int, *, size: int = 200, one_call: bool = False
) -> None:
    """The n parts of ``start_ts`` (acknowledged one by one, or in one call), then its Prewrite."""
    parts = [part_binlog(start_ts, chunk, size) for chunk in range(1, n + 1)]
    if one_call:
        await storage.write(pairs(parts))
    else:
        for part in parts:
            await storage.write(pairs([part]))
    await storage.write(pairs([final_binlog(start_ts, n)]))


async def pull_items(storage: Storage, after: int, until_ts: int, **limits: int) -> list[list[PullItem]]:
    """The pull's batches from ``after`` until a watermark at or past ``until_ts``."""
    batches: list[list[PullItem]] = []
    async for items in storage.pull(after, **limits):
        batches.append(items)
        if any(isinstance(item, Watermark) and item.ts >= until_ts for item in items):
            return batches
    raise AssertionError("the pull ended before the watermark was reached")


def transactions(items: list[PullItem]) -> dict[int, tuple[int, int]]:
    """start_ts -> (commit_ts, parts) of the pulled transactions, checking each one's form:
    parts 1..n in order with commit_ts set and tp PrewriteChunk, each as written, then the
    final binlog re-typed Commit; commit_ts strictly increasing."""
    out: dict[int, tuple[int, int]] = {}
    parts: list[ChunkPart] = []
    last_commit = 0
    for item in items:
        if isinstance(item, Watermark):
            assert not parts, "a watermark inside a chunked transaction"
            continue
        assert item.commit_ts > last_commit or (parts and item.commit_ts == last_commit)
        last_commit = item.commit_ts
        if isinstance(item, ChunkPart):
            assert not parts or (parts[-1].start_ts, parts[-1].commit_ts) == (item.start_ts, item.commit_ts)
            assert item.chunk == len(parts) + 1, f"part {item.chunk} after {len(parts)} parts"
            pulled = parse_binlog(item.commit_payload())
            assert pulled.tp == BinlogType.PrewriteChunk and pulled.commit_ts == item.commit_ts
            assert (pulled.start_ts, pulled.chunk) == (item.start_ts, item.chunk)
            assert part_is_intact(pulled), f"start_ts {item.start_ts} part {item.chunk}: other contents"
            parts.append(item)
            continue
        assert isinstance(item, CommittedTxn)
        assert not parts or parts[-1].start_ts == item.start_ts, "parts of another transaction"
        final = parse_binlog(item.commit_payload())
        assert final.tp == BinlogType.Commit and final.commit_ts == item.commit_ts
        assert final.chunks == len(parts), (
            f"start_ts {item.start_ts}: {len(parts)} parts, chunks {final.chunks}"
        )
        assert item.start_ts not in out, "a transaction pulled twice"
        out[item.start_ts] = (item.commit_ts, len(parts))
        parts = []
    assert not parts, "parts without their final binlog"
    return out


def flat(batches: list[list[PullItem]]) -> list[PullItem]:
    return [item for batch in batches for item in batch]


def test_parts_are_pulled_in_chunk_order_before_the_final_binlog(tmp_path: Path) -> None:
    async def scenario() -> list[list[PullItem]]:
        storage = await Storage.open(tmp_path, SMALL)
        await write_chunked(storage, 100, 3)  # parts acknowledged one by one
        await write_chunked(storage, 110, 4, one_call=True)
        await storage.write(pairs([final_binlog(120, 0)]))  # an ordinary transaction between them
        await storage.write(pairs([commit(110, 130), commit(120, 131), commit(100, 132)]))
        batches = await pull_items(storage, 0, 132)
        from_inside = await pull_items(storage, 131, 132)  # offset < commit_ts: from part 1
        await storage.close()
        return [flat(batches), flat(from_inside)]

    everything, from_inside = run(scenario())
    assert transactions(everything) == {110: (130, 4), 120: (131, 0), 100: (132, 3)}
    assert transactions(from_inside) == {100: (132, 3)}
    kinds = [type(item).__name__ for item in everything]
    assert kinds[:5] == ["ChunkPart"] * 4 + ["CommittedTxn"]


def test_a_batch_cut_inside_a_chunked_transaction_continues_with_its_next_part(tmp_path: Path) -> None:
    part_size = 10_000

    async def scenario() -> list[list[PullItem]]:
        storage = await Storage.open(tmp_path, SMALL)
        await write_chunked(storage, 100, 7, size=part_size)
        await write_chunked(storage, 101, 2, size=part_size)
        await storage.write(pairs([commit(100, 200), commit(101, 201)]))
        batches = await pull_items(storage, 0, 201, max_bytes=25_000)
        await storage.close()
        return batches

    batches = run(scenario())
    assert transactions(flat(batches)) == {100: (200, 7), 101: (201, 2)}
    ends = [(batch[-1].start_ts, batch[-1].chunk) for batch in batches if isinstance(batch[-1], ChunkPart)]
    assert (100, 3) in ends, "no batch ended between two parts"
    assert (101, 2) in ends, "no batch ended between the last part and the final binlog"
    for batch in batches:  # bounded: max_bytes plus one binlog
        size = sum(len(item.payload) for item in batch if not isinstance(item, Watermark))
        assert size < 25_000 + part_size + 1000


def test_the_index_finds_the_parts_after_a_rebuild_from_the_log(tmp_path: Path) -> None:
    """index-queue-batches = 0: every record goes through the slow path (read back from the
    log); then kv/ is deleted and the index rebuilt from the log on open."""
    config = StorageConfig(segment_size=64 * 1024, index_queue_batches=0)

    async def write() -> None:
        storage = await Storage.open(tmp_path, config)
        await write_chunked(storage, 100, 5, size=20_000)  # across segments
        await storage.write(pairs([commit(100, 200)]))
        await storage.wait_indexed()
        assert storage.stats().read_back == 7  # the slow path indexed every record
        await storage.close()

    async def reopen(read_back: int) -> dict[int, tuple[int, int]]:
        storage = await Storage.open(tmp_path, config)
        await storage.wait_indexed()
        pulled = transactions(flat(await pull_items(storage, 0, 200)))
        assert storage.stats().read_back == read_back
        await storage.close()
        return pulled

    run(write())
    assert run(reopen(0)) == {100: (200, 5)}  # the index as the slow path left it
    assert len(list((tmp_path / "value").iterdir())) > 1
    shutil.rmtree(tmp_path / "kv")
    assert run(reopen(7)) == {100: (200, 5)}  # rebuilt from the log on open


def test_a_duplicate_part_is_sent_once_and_the_last_copy_wins(tmp_path: Path) -> None:
    async def scenario() -> list[PullItem]:
        storage = await Storage.open(tmp_path, SMALL)
        await storage.write(pairs([part_binlog(100, 1), part_binlog(100, 2)]))
        retried = part_binlog(100, 2)
        retried.prewrite_key = b"second copy"
        await storage.write(pairs([part_binlog(100, 1), retried]))  # a producer's retry
        await storage.write(pairs([final_binlog(100, 2), commit(100, 200)]))
        items = flat(await pull_items(storage, 0, 200))
        await storage.close()
        return items

    items = run(scenario())
    parts = [item for item in items if isinstance(item, ChunkPart)]
    assert [part.chunk for part in parts] == [1, 2]
    assert parse_binlog(parts[1].payload).prewrite_key == b"second copy"
    assert transactions(items) == {100: (200, 2)}


def test_a_rolled_back_chunked_transaction_is_never_pulled_and_gc_removes_its_parts(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = await Storage.open(tmp_path, SMALL)
        await write_chunked(storage, 100, 3)
        await storage.write(pairs([rollback(100)]))
        await storage.write(pairs([part_binlog(105, 1)]))  # never committed: no Prewrite came
        await write_chunked(storage, 110, 2)
        await storage.write(pairs([commit(110, 120)]))
        assert transactions(flat(await pull_items(storage, 0, 120))) == {110: (120, 2)}
        index = storage._index
        assert [p.chunk for p in index.parts(100)] == [1, 2, 3]
        assert await storage.gc(110) == 110
        assert index.parts(100) == [] and index.parts(105) == []
        assert [p.chunk for p in index.parts(110)] == [1, 2]
        await storage.gc(121)
        assert not index.has_parts()
        await storage.close()

    run(scenario())


def test_the_storage_refuses_a_part_without_start_ts_or_chunk(tmp_path: Path) -> None:
    async def scenario() -> None:
        storage = await Storage.open(tmp_path, SMALL)
        no_chunk = part_binlog(100, 1)
        no_chunk.ClearField("chunk")
        with pytest.raises(ProtocolError, match="a PrewriteChunk needs chunk >= 1"):
            await storage.write(pairs([no_chunk]))
        with_commit = part_binlog(100, 1)
        with_commit.commit_ts = 200
        with pytest.raises(ProtocolError, match="a PrewriteChunk needs start_ts > 0 and no commit_ts"):
            await storage.write(pairs([with_commit]))
        assert storage.stats().records == 0
        await storage.close()

    run(scenario())


# --- SIGKILL -------------------------------------------------------------------

_COMPLETE_ACK = re.compile(r"^ACK [^\n]*\n", re.MULTILINE)


def test_sigkill_keeps_every_acknowledged_chunked_transaction(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    child = ChildProcess(
        [sys.executable, "-m", "tests.support.chunk_writer", str(data_dir), "1000000", str(WRITERS)],
        tmp_path / "child.log",
        env={"PYTHONPATH": str(ROOT)},
    )
    try:
        child.wait_for_line("^READY$", timeout=HANG_GUARD)
        # complete lines only: the 40th may still be half written when counted
        wait_until(lambda: len(_COMPLETE_ACK.findall(child.output)) >= 40, timeout=HANG_GUARD, what="40 acks")
    finally:
        child.kill()
        child.stop()
    acked = {}
    # the SIGKILL may cut the last line short: only complete lines were acknowledged
    for line in child.output.splitlines(keepends=True):
        if line.startswith("ACK ") and line.endswith("\n"):
            start_ts, commit_ts, n = map(int, line.split()[1:])
            acked[start_ts] = (commit_ts, n)
    assert len(acked) >= 40

    async def verify() -> dict[int, tuple[int, int]]:
        storage = await Storage.open(data_dir, CHILD_CONFIG)
        await storage.wait_indexed()
        for start_ts in storage.unpaired_before(2**62):  # the transaction the kill interrupted
            assert start_ts not in acked
            await storage.resolve(start_ts, None)
        fake_ts = max(commit_ts for commit_ts, _ in acked.values()) + 1_000_000
        await storage.write_fake(fake_ts)
        pulled = transactions(flat(await pull_items(storage, 0, fake_ts)))
        await storage.close()
        return pulled

    pulled = run(verify())
    assert {s: v for s, v in pulled.items() if s in acked} == acked
    assert len(set(pulled) - set(acked)) <= WRITERS  # Commits durable but not yet acknowledged


# --- the gRPC service -------------------------------------------------------------


@pytest.fixture
def pump_server(tmp_path: Path) -> Iterator[tuple[PumpProcess, str]]:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr)
    try:
        pump.start()
        yield pump, meta_addr
    finally:
        pump.kill()
        meta.kill()


def test_the_service_takes_parts_by_write_binlog_and_write_binlogs(
    pump_server: tuple[PumpProcess, str],
) -> None:
    pump, meta_addr = pump_server

    async def scenario() -> tuple[list[pump_pb2.Entity], int, int, list[str]]:
        async with AsyncPumpsClient(meta_addr, PumpClientConfig()) as client:
            cluster_id = client.cluster_id
            start_ts = await client.get_timestamp()
            async with aio_channel(pump.addr) as channel:
                stub = pump_pb2_grpc.PumpStub(channel)
                single = await stub.WriteBinlog(
                    pump_pb2.WriteBinlogReq(
                        clusterID=cluster_id, payload=part_binlog(start_ts, 1).SerializeToString()
                    )
                )
                assert single.errmsg == ""
                bad = part_binlog(start_ts, 3)
                bad.chunk = 0
                batch = await stub.WriteBinlogs(
                    pump_pb2.WriteBinlogsReq(
                        clusterID=cluster_id,
                        payloads=[
                            part_binlog(start_ts, 2).SerializeToString(),
                            bad.SerializeToString(),
                            final_binlog(start_ts, 2).SerializeToString(),
                        ],
                    )
                )
                commit_ts = await client.get_timestamp()
                done = await stub.WriteBinlog(
                    pump_pb2.WriteBinlogReq(
                        clusterID=cluster_id, payload=commit(start_ts, commit_ts).SerializeToString()
                    )
                )
                assert done.errmsg == ""
                entities: list[pump_pb2.Entity] = []
                request = pump_pb2.PullBinlogReq(
                    clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=start_ts)
                )
                call = stub.PullBinlogs(request)
                async for response in call:
                    entities += response_entities(response)
                    if any(
                        e.meta.commitTs == commit_ts and parse_binlog(e.payload).tp == BinlogType.Commit
                        for e in entities
                    ):
                        call.cancel()
                        break
        return entities, start_ts, commit_ts, list(batch.errmsgs)

    entities, start_ts, commit_ts, errmsgs = run(scenario())
    assert errmsgs[0] == "" and errmsgs[2] == ""
    assert "a PrewriteChunk needs chunk >= 1, got 0" in errmsgs[1]
    txn = [e for e in entities if e.meta.startTs == start_ts]
    binlogs = [parse_binlog(e.payload) for e in txn]
    assert [(b.tp, b.chunk) for b in binlogs] == [
        (BinlogType.PrewriteChunk, 1),
        (BinlogType.PrewriteChunk, 2),
        (BinlogType.Commit, 0),
    ]
    assert all(e.meta.commitTs == commit_ts == e.pos.offset for e in txn)
    assert all(b.commit_ts == commit_ts for b in binlogs) and binlogs[-1].chunks == 2
    assert metric(pump, "bridge_pump_writes_total", type="chunk", result="ok") == 2
    assert metric(pump, "bridge_pump_writes_total", type="unknown", result="invalid") == 1
    assert metric(pump, "bridge_pump_pull_entities_total", kind="chunk") == 2


def metric(pump: PumpProcess, name: str, **labels: str) -> float:
    url = f"http://127.0.0.1:{pump.status_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    selector = ",".join(f'{key}="{value}"' for key, value in sorted(labels.items()))  # as exposed
    found = re.search(rf"^{name}\{{{re.escape(selector)}\}} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0
