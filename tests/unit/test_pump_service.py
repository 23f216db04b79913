"""PumpService over a real in-process gRPC server with stand-in admission and storage:
what is stored, what is refused, how a storage failure is reported; wire helpers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import pytest

from bridge.binlog import Binlog, commit, fake_binlog, parse_binlog, prewrite, probe
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc
from pump.service import PumpService, add_to_server
from pump.storage import CommittedTxn, PullItem, StorageClosed, StorageFailed, Watermark
from pump.wire import checksum, pack_responses, response_entities, txn_entity, watermark_entity

CLUSTER = 42


class Admission:
    def __init__(self, refusal: str = "") -> None:
        self.refusal = refusal
        self.in_flight = 0
        self.entered = 0
        self.enter_calls: list[tuple[int, int]] = []

    def write_refusal(self, prewrite: bool) -> str:
        return self.refusal

    def enter_writes(self, prewrites: int, others: int) -> None:
        assert not self.refusal, "entered writes it refuses"
        self.enter_calls.append((prewrites, others))
        self.in_flight += prewrites + others
        self.entered += prewrites + others

    def exit_writes(self, prewrites: int, others: int) -> None:
        self.in_flight -= prewrites + others


class Store:
    def __init__(self, error: Exception | None = None, batches: Sequence[list[PullItem]] = ()) -> None:
        self.error = error
        self.batches = list(batches)
        self.stored: list[Binlog] = []

    async def write(self, binlogs: Sequence[tuple[Binlog, bytes]]) -> None:
        if self.error is not None:
            raise self.error
        self.stored += [binlog for binlog, _ in binlogs]

    async def pull(
        self, after_commit_ts: int, *, max_entries: int = 0, max_bytes: int = 0, interval: float = 0.0
    ) -> AsyncIterator[list[PullItem]]:
        for batch in self.batches:
            yield batch
        await asyncio.Event().wait()  # a pull follows new data until the call ends


def run(scenario: Any, admission: Admission, store: Store) -> Any:
    async def serve() -> Any:
        server = grpc.aio.server()
        service = PumpService(CLUSTER, admission, store, max_message_bytes=4 << 20)
        add_to_server(service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                return await asyncio.wait_for(scenario(pump_pb2_grpc.PumpStub(channel), service), 30)
        finally:
            service.end_pulls()
            await server.stop(None)

    return asyncio.run(serve())


def batch(*binlogs: Binlog) -> pump_pb2.WriteBinlogsReq:
    return pump_pb2.WriteBinlogsReq(clusterID=CLUSTER, payloads=[b.SerializeToString() for b in binlogs])


def test_admitted_binlogs_are_stored_refused_and_probes_are_not() -> None:
    store, admission = Store(), Admission()

    async def scenario(stub: Any, service: PumpService) -> None:
        answer = await stub.WriteBinlogs(batch(prewrite(10, []), probe(), commit(10, 11)))
        assert list(answer.errmsgs) == ["", "", ""]
        admission.refusal = "pump p is paused"
        answer = await stub.WriteBinlogs(batch(prewrite(20, []), probe()))
        assert list(answer.errmsgs) == ["pump p is paused", "pump p is paused"]

    run(scenario, admission, store)
    assert [(b.tp, b.start_ts) for b in store.stored] == [(0, 10), (1, 10)]
    assert admission.entered == 2 and admission.in_flight == 0


def test_a_call_enters_its_admitted_binlogs_once_counted_by_kind() -> None:
    store, admission = Store(), Admission()
    binlogs = [prewrite(ts, []) for ts in range(10, 40, 2)] + [commit(ts, ts + 1) for ts in range(10, 30, 2)]

    async def scenario(stub: Any, service: PumpService) -> None:
        answer = await stub.WriteBinlogs(
            batch(*binlogs, Binlog(tp=binlog_pb2.Commit, start_ts=5, commit_ts=5))
        )
        assert list(answer.errmsgs)[:-1] == [""] * len(binlogs) and answer.errmsgs[-1]

    run(scenario, admission, store)
    assert admission.enter_calls == [(15, 10)] and admission.in_flight == 0
    assert len(store.stored) == 25


@pytest.mark.parametrize("error", [StorageClosed("the storage is closing"), StorageFailed("fsync failed")])
def test_a_storage_failure_ends_the_call_unavailable(error: Exception) -> None:
    admission = Admission()

    async def scenario(stub: Any, service: PumpService) -> str:
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await stub.WriteBinlogs(batch(prewrite(10, [])))
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        assert f"pump storage failed: {error}" == failed.value.details()
        probe_request = pump_pb2.WriteBinlogReq(clusterID=CLUSTER, payload=probe().SerializeToString())
        return str((await stub.WriteBinlog(probe_request)).errmsg)

    probe_answer = run(scenario, admission, Store(error=error))
    assert admission.in_flight == 0
    # Closing passes; a failed fsync stays until the pump restarts, and probes say so.
    expected = "" if isinstance(error, StorageClosed) else "unavailable: pump storage failed: fsync failed"
    assert probe_answer == expected


def test_pull_streams_transactions_and_watermarks_in_batches() -> None:
    prewrite_bytes = prewrite(10, [binlog_pb2.TableMutation(table_id=1)]).SerializeToString()
    store = Store(batches=[[CommittedTxn(10, 12, prewrite_bytes), Watermark(15)], [Watermark(20)]])

    async def scenario(stub: Any, service: PumpService) -> list[list[pump_pb2.Entity]]:
        call = stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER))
        messages = [response_entities(await call.read()), response_entities(await call.read())]
        call.cancel()
        return messages

    first, second = run(scenario, Admission(), store)
    txn, mark = first
    pulled = parse_binlog(txn.payload)
    assert (pulled.tp, pulled.start_ts, pulled.commit_ts) == (binlog_pb2.Commit, 10, 12)
    assert (txn.meta.startTs, txn.meta.commitTs, txn.pos.offset) == (10, 12, 12)
    assert txn.checksum == checksum(txn.payload) and len(txn.checksum) == 4
    assert mark.payload == fake_binlog(15).SerializeToString()
    assert (mark.meta.startTs, mark.meta.commitTs, mark.pos.offset) == (15, 15, 15)
    assert [e.pos.offset for e in second] == [20]


def test_pack_responses_keeps_each_message_under_the_limit() -> None:
    entities = [txn_entity(CommittedTxn(s, s + 1, bytes(1000))) for s in range(1, 11)]
    entities.append(watermark_entity(100))
    messages = list(pack_responses(entities, limit=3000))
    assert [len(m.entities) for m in messages] == [2, 2, 2, 2, 3]
    assert [e for m in messages for e in m.entities] == entities
    huge = txn_entity(CommittedTxn(1, 2, bytes(10_000)))
    assert [len(m.entities) for m in pack_responses([huge, huge], limit=3000)] == [1, 1]
    single = pump_pb2.PullBinlogResp(entity=watermark_entity(7))
    assert response_entities(single) == [watermark_entity(7)]
    assert response_entities(pump_pb2.PullBinlogResp()) == []
