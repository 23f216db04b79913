"""The pump client writes a transaction larger than chunk-bytes as PrewriteChunk parts
then the Prewrite, all to one real `binlog-bridge pump`; the pump's pull returns the
parts (commit_ts set, in order) then the Commit carrying ``chunks``. A pump SIGKILLed
while it takes the parts: the client starts again from part 1 on the other pump."""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from bridge.binlog import DELETE_ROW, INSERT, UPDATE, iter_changes, parse_binlog
from bridge.errors import NoPumpAvailable
from bridge.grpcutil import aio_channel
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig, PumpsClient
from pump.wire import response_entities
from tests.support.process import ChildProcess, wait_until
from tests.support.pump_server import PumpProcess, start_meta

pytestmark = pytest.mark.timeout(300)

CHUNK_BYTES = 16384


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def big_value(rows: int, seed: int) -> binlog_pb2.PrewriteValue:
    """Inserts, updates and deletes over three tables, some table split across parts."""
    rng = random.Random(seed)
    value = binlog_pb2.PrewriteValue(schema_version=3)
    for table_id in (11, 12, 13):
        mutation = value.mutations.add(table_id=table_id)
        for i in range(rows // 3):
            kind = rng.choice([INSERT, INSERT, UPDATE, DELETE_ROW])
            row = b"%d:%d:" % (table_id, i) + rng.randbytes(rng.randint(20, 160))
            if kind == INSERT:
                mutation.inserted_rows.append(row)
            elif kind == UPDATE:
                mutation.updated_rows.extend((row, row + b"-new"))
            else:
                mutation.deleted_rows.append(row)
            mutation.sequence.append(kind)
    return value


def changes(values: list[binlog_pb2.PrewriteValue]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(m.table_id, *c) for v in values for m in v.mutations for c in iter_changes(m)]


@dataclass
class Txn:
    """What one pull carried for one start_ts: its parts and its final binlog."""

    parts: list[binlog_pb2.Binlog] = field(default_factory=list)
    final: binlog_pb2.Binlog | None = None


async def pull(addr: str, cluster_id: int, until_ts: int) -> dict[int, Txn]:
    """PullBinlogs from the start until a watermark at or past ``until_ts``; per start_ts."""
    txns: dict[int, Txn] = {}
    async with aio_channel(addr) as channel:
        stub = pump_pb2_grpc.PumpStub(channel)
        request = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=0))
        call = stub.PullBinlogs(request, wait_for_ready=True)
        async for response in call:
            for entity in response_entities(response):
                binlog = parse_binlog(entity.payload)
                if entity.meta.startTs == entity.meta.commitTs:  # a watermark
                    if entity.pos.offset >= until_ts:
                        call.cancel()
                        return txns
                    continue
                assert (binlog.start_ts, binlog.commit_ts) == (entity.meta.startTs, entity.meta.commitTs)
                txn = txns.setdefault(binlog.start_ts, Txn())
                assert txn.final is None, f"start_ts {binlog.start_ts}: a binlog after its final one"
                if binlog.tp == binlog_pb2.PrewriteChunk:
                    txn.parts.append(binlog)
                else:
                    assert binlog.tp == binlog_pb2.Commit
                    txn.final = binlog
    raise AssertionError(f"the pull ended before watermark {until_ts}")


def check_chunked(
    txn: Txn, value: binlog_pb2.PrewriteValue, prewrite_key: bytes, chunk_bytes: int = CHUNK_BYTES
) -> None:
    """The parts 1..n in order then the Commit with chunks = n; together exactly ``value``'s changes."""
    assert txn.final is not None
    n = len(txn.parts)
    assert n > 1
    assert [p.chunk for p in txn.parts] == list(range(1, n + 1))
    assert txn.final.chunks == n
    assert txn.final.prewrite_key == prewrite_key
    assert {p.commit_ts for p in txn.parts} == {txn.final.commit_ts}
    pieces = [binlog_pb2.PrewriteValue.FromString(b.prewrite_value) for b in [*txn.parts, txn.final]]
    assert {p.schema_version for p in pieces} == {value.schema_version}
    for piece in pieces[:-1]:
        assert piece.ByteSize() <= chunk_bytes
    assert changes(pieces) == changes([value])


def write_txn(client: PumpsClient, value: binlog_pb2.PrewriteValue) -> tuple[int, int, bytes]:
    start_ts = client.get_timestamp()
    key = b"key-%d" % start_ts
    prewrite = binlog_pb2.Binlog(
        tp=binlog_pb2.Prewrite, start_ts=start_ts, prewrite_key=key, prewrite_value=value.SerializeToString()
    )
    client.write_binlog(prewrite)
    commit_ts = client.get_timestamp()
    client.write_binlog(binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=commit_ts))
    return start_ts, commit_ts, key


def test_a_large_transaction_is_stored_in_parts_and_pulled_in_order(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    meta, meta_addr = start_meta(tmp_path)
    children.append(meta)
    pump = PumpProcess(tmp_path, meta_addr, node_id="pump-1")
    children.append(pump.start())
    value = big_value(3000, seed=1)
    small = big_value(9, seed=2)
    assert value.ByteSize() > 10 * CHUNK_BYTES
    txns_before = metric("bridge_pump_client_chunked_txns_total")
    parts_before = metric("bridge_pump_client_chunk_parts_total")
    config = PumpClientConfig(chunk_bytes=CHUNK_BYTES)
    with PumpsClient(meta_addr, config) as client:
        big_ts, big_commit, big_key = write_txn(client, value)
        small_ts, small_commit, _ = write_txn(client, small)
        cluster_id = client.cluster_id
    pulled = asyncio.run(pull(pump.addr, cluster_id, small_commit))
    assert set(pulled) == {big_ts, small_ts}
    check_chunked(pulled[big_ts], value, big_key)
    assert pulled[big_ts].final.commit_ts == big_commit  # type: ignore[union-attr]
    small_txn = pulled[small_ts]
    assert small_txn.parts == [] and small_txn.final is not None and not small_txn.final.HasField("chunks")
    assert binlog_pb2.PrewriteValue.FromString(small_txn.final.prewrite_value) == small
    parts = len(pulled[big_ts].parts)
    assert metric("bridge_pump_client_chunked_txns_total") - txns_before == 1
    assert metric("bridge_pump_client_chunk_parts_total") - parts_before == parts


def test_a_pump_killed_during_the_parts_the_transaction_starts_again_on_the_other(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    meta, meta_addr = start_meta(tmp_path)
    children.append(meta)
    pumps = {node_id: PumpProcess(tmp_path, meta_addr, node_id=node_id) for node_id in ("pump-a", "pump-b")}
    for pump in pumps.values():
        children.append(pump.start())
    # ~2.4 MB in parts of at most 4 KiB: ~600 parts, written one after another, so the
    # kill after the third lands long before the last
    value = big_value(24_000, seed=3)
    restarts_before = metric("bridge_pump_client_chunked_restarts_total")
    before = {
        node_id: metric("bridge_pump_client_writes_total", pump=node_id, type="prewritechunk", result="ok")
        for node_id in pumps
    }

    def parts_taken() -> dict[str, float]:
        return {
            node_id: metric(
                "bridge_pump_client_writes_total", pump=node_id, type="prewritechunk", result="ok"
            )
            - before[node_id]
            for node_id in pumps
        }

    config = PumpClientConfig(chunk_bytes=4096, write_timeout=60.0)
    with PumpsClient(meta_addr, config) as client:
        written: list[tuple[int, int, bytes]] = []
        failures: list[BaseException] = []

        def writer() -> None:
            try:
                written.append(write_txn(client, value))
            except BaseException as exc:  # handed to the test thread
                failures.append(exc)

        thread = threading.Thread(target=writer)
        thread.start()
        first = wait_until(
            lambda: next((n for n, count in parts_taken().items() if count >= 3), None),
            timeout=120,
            what="a pump took three parts",
        )
        pumps[first].kill()
        thread.join(timeout=240)
        assert not thread.is_alive()
        assert not failures, failures
        ((start_ts, commit_ts, key),) = written
        cluster_id = client.cluster_id
    (other,) = set(pumps) - {first}
    assert metric("bridge_pump_client_chunked_restarts_total") - restarts_before >= 1
    pulled = asyncio.run(pull(pumps[other].addr, cluster_id, commit_ts))
    assert set(pulled) == {start_ts}
    check_chunked(pulled[start_ts], value, key, chunk_bytes=4096)
    # the survivor took every part from part 1 on
    assert parts_taken()[other] >= len(pulled[start_ts].parts)


def test_small_transactions_are_not_held_behind_a_large_one(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    """The async client: while one transaction's ~600 parts go to the only pump, 50 small
    transactions written after it started all finish before it does, and all are stored."""
    meta, meta_addr = start_meta(tmp_path)
    children.append(meta)
    pump = PumpProcess(tmp_path, meta_addr, node_id="pump-1")
    children.append(pump.start())
    value = big_value(24_000, seed=4)
    small = big_value(3, seed=5)
    finished: list[str] = []

    async def scenario() -> tuple[int, dict[int, int], int]:
        config = PumpClientConfig(chunk_bytes=4096)
        async with AsyncPumpsClient(meta_addr, config) as client:

            async def txn(name: str, changes: binlog_pb2.PrewriteValue) -> tuple[int, int]:
                start_ts = await client.get_timestamp()
                await client.write_binlog(
                    binlog_pb2.Binlog(
                        tp=binlog_pb2.Prewrite,
                        start_ts=start_ts,
                        prewrite_key=b"key-%d" % start_ts,
                        prewrite_value=changes.SerializeToString(),
                    )
                )
                commit_ts = await client.get_timestamp()
                await client.write_binlog(
                    binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=commit_ts)
                )
                finished.append(name)
                return start_ts, commit_ts

            parts_before = metric("bridge_pump_client_chunk_parts_total")
            big = asyncio.create_task(txn("big", value))
            # until the big one is under way (or failed: then `await big` raises)
            while metric("bridge_pump_client_chunk_parts_total") == parts_before and not big.done():
                await asyncio.sleep(0.01)
            smalls = await asyncio.gather(*(txn(f"small-{i}", small) for i in range(50)))
            big_ts, _ = await big
            return big_ts, dict(smalls), client.cluster_id

    big_ts, smalls, cluster_id = asyncio.run(scenario())
    assert finished[-1] == "big", (
        f"the large transaction finished before {50 - finished.index('big') - 1} small ones"
    )
    pulled = asyncio.run(pull(pump.addr, cluster_id, max(smalls.values())))
    assert set(pulled) == {big_ts, *smalls}
    check_chunked(pulled[big_ts], value, b"key-%d" % big_ts, chunk_bytes=4096)
    for start_ts, commit_ts in smalls.items():
        final = pulled[start_ts].final
        assert final is not None and final.commit_ts == commit_ts and not pulled[start_ts].parts


def test_no_pump_takes_the_parts_raises_no_pump_available(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    meta, meta_addr = start_meta(tmp_path)
    children.append(meta)
    pump = PumpProcess(tmp_path, meta_addr, node_id="pump-1")
    children.append(pump.start())
    value = big_value(600, seed=6)
    config = PumpClientConfig(chunk_bytes=CHUNK_BYTES, write_timeout=2.0, retry_backoff_max=0.5)
    with PumpsClient(meta_addr, config) as client:
        start_ts = client.get_timestamp()
        pump.kill()
        prewrite = binlog_pb2.Binlog(
            tp=binlog_pb2.Prewrite, start_ts=start_ts, prewrite_value=value.SerializeToString()
        )
        with pytest.raises(NoPumpAvailable, match=f"chunked prewrite binlog of start_ts {start_ts}.*pump-1"):
            client.write_binlog(prewrite)
