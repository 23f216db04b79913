"""10,000 malformed requests against a real `binlog-bridge pump`: each is answered
with an error, the pump stays up, and what it stored before is intact."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge.binlog import Binlog, BinlogType, commit, fake_binlog, prewrite
from bridge.grpcutil import DEFAULT_MAX_MESSAGE_BYTES, aio_channel
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc
from bridge.pumpclient import AsyncPumpsClient
from tests.support.pump_server import PumpProcess, prewrite_of, pull_until, start_meta

pytestmark = pytest.mark.timeout(300)

REQUESTS = 10_000
CONCURRENCY = 64
HANG_GUARD = 240.0  # seconds: a safety net against hangs, never a performance bound
INVALID_TAGS = (0x00, 0x01, 0x06, 0x07, 0x0E, 0x0F)  # field number 0 or wire type 6/7: never valid
WRITE_BINLOG = "/binlog.Pump/WriteBinlog"
WRITE_BINLOGS = "/binlog.Pump/WriteBinlogs"
PULL_BINLOGS = "/binlog.Pump/PullBinlogs"
UNHANDLED = {"UNKNOWN", "INTERNAL"}  # what gRPC answers when a handler raised


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


class Malformed:
    """Generators of payloads no pump may store, each named for the report."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def random_bytes(self) -> bytes:
        return bytes([self.rng.choice(INVALID_TAGS)]) + self.rng.randbytes(self.rng.randint(0, 300))

    def truncated(self) -> bytes:
        value = self.rng.randbytes(self.rng.randint(20, 2000))
        whole = Binlog(tp=BinlogType.Prewrite, start_ts=self.ts(), prewrite_value=value).SerializeToString()
        return whole[: len(whole) - self.rng.randint(1, len(value) - 1)]  # cut inside prewrite_value

    def absurd_length(self) -> bytes:
        field = self.rng.choice((0x22, 0x2A, 0x32))  # prewrite_key, prewrite_value, ddl_query
        return (
            b"\x08\x00\x10"
            + varint(self.ts())
            + bytes([field])
            + varint(self.rng.randint(1 << 30, 1 << 62))
            + b"xy"
        )

    def invalid_structure(self) -> bytes:
        ts = self.ts()
        choices: list[Callable[[], Binlog]] = [
            lambda: Binlog(tp=BinlogType.Commit, start_ts=ts, commit_ts=ts - self.rng.randint(0, 5)),
            lambda: Binlog(tp=BinlogType.Prewrite, start_ts=ts, commit_ts=ts + 1),
            lambda: Binlog(tp=BinlogType.Rollback, start_ts=ts, commit_ts=ts + 7),
            lambda: Binlog(tp=BinlogType.Prewrite, start_ts=-self.rng.randint(1, 1 << 40)),
            lambda: fake_binlog(ts),
            lambda: Binlog(tp=BinlogType.PostDDL, start_ts=ts, ddl_job_id=3, ddl_query=b"drop table t"),
            lambda: Binlog(tp=BinlogType.Prewrite, start_ts=ts, ddl_job_id=-2),
            lambda: Binlog(tp=BinlogType.Prewrite, start_ts=ts, ddl_job_id=4),  # a DDL without its query
            lambda: Binlog(tp=BinlogType.Prewrite, start_ts=ts, prewrite_value=self.random_bytes()),
            lambda: Binlog(
                tp=BinlogType.Prewrite, start_ts=ts, ddl_job_id=5, ddl_query=b"x", ddl_schema_change=b"\x07"
            ),
            lambda: prewrite(
                ts,
                [
                    binlog_pb2.TableMutation(
                        table_id=1, inserted_rows=[b"a", b"b"], sequence=[binlog_pb2.Insert]
                    )
                ],
            ),
            lambda: prewrite(
                ts,
                [binlog_pb2.TableMutation(table_id=2, updated_rows=[b"old"], sequence=[binlog_pb2.Update])],
            ),
        ]
        payload = self.rng.choice(choices)().SerializeToString()
        if self.rng.random() < 0.1:
            payload = b"\x08" + varint(9) + payload[2:]  # an unknown binlog type
        return payload

    def ts(self) -> int:
        return self.rng.randint(1 << 40, 1 << 60)

    def any(self) -> bytes:
        make = self.rng.choice(
            (self.random_bytes, self.truncated, self.absurd_length, self.invalid_structure)
        )
        return make()


def identity(data: bytes) -> bytes:
    return data


class Fuzzer:
    """Sends one malformed request per call; returns the kind sent and an error seen ("" = none)."""

    def __init__(self, channel: grpc.aio.Channel, cluster_id: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.bad = Malformed(self.rng)
        self.cluster_id = cluster_id
        self.stub = pump_pb2_grpc.PumpStub(channel)
        self.raw_calls = {
            name: channel.unary_unary(name, identity, identity) for name in (WRITE_BINLOG, WRITE_BINLOGS)
        }
        self.raw_pull = channel.unary_stream(PULL_BINLOGS, identity, identity)

    async def one(self) -> tuple[str, str]:
        kind = self.rng.choice(("write", "batch", "cluster", "raw", "raw-batch", "pull"))
        try:
            return kind, await getattr(self, kind.replace("-", "_"))()
        except grpc.aio.AioRpcError as exc:
            return kind, exc.code().name

    async def write(self) -> str:
        response = await self.stub.WriteBinlog(
            pump_pb2.WriteBinlogReq(clusterID=self.cluster_id, payload=self.bad.any())
        )
        return str(response.errmsg)

    async def batch(self) -> str:
        payloads = [self.bad.any() for _ in range(self.rng.randint(1, 20))]
        response = await self.stub.WriteBinlogs(
            pump_pb2.WriteBinlogsReq(clusterID=self.cluster_id, payloads=payloads)
        )
        assert not response.errmsg and len(response.errmsgs) == len(payloads)
        return "" if not all(response.errmsgs) else str(response.errmsgs[0])

    async def cluster(self) -> str:
        good = prewrite_of(self.bad.ts()).SerializeToString()
        wrong = self.cluster_id ^ self.rng.randint(1, (1 << 64) - 1)
        if self.rng.random() < 0.5:
            return str(
                (await self.stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=wrong, payload=good))).errmsg
            )
        request = pump_pb2.WriteBinlogsReq(clusterID=wrong, payloads=[good] * 3)
        return str((await self.stub.WriteBinlogs(request)).errmsg)

    async def raw(self) -> str:
        """Request bytes that are no WriteBinlogReq at all (or one with an unknown cluster id)."""
        answer = await self.raw_calls[WRITE_BINLOG](self.bad.random_bytes())
        return str(pump_pb2.WriteBinlogResp.FromString(answer).errmsg)

    async def raw_batch(self) -> str:
        body = self.bad.truncated() if self.rng.random() < 0.5 else self.bad.absurd_length()
        answer = await self.raw_calls[WRITE_BINLOGS](body)
        response = pump_pb2.WriteBinlogsResp.FromString(answer)
        return str(response.errmsg) or ("" if not all(response.errmsgs) else str(response.errmsgs[0]))

    async def pull(self) -> str:
        body = self.bad.random_bytes() if self.rng.random() < 0.5 else self.bad.absurd_length()
        async for _ in self.raw_pull(body):
            return ""
        return ""


def run(coro: Awaitable[Any]) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, HANG_GUARD)

    return asyncio.run(guarded())


@pytest.fixture
def pump(tmp_path: Path) -> Iterator[tuple[str, PumpProcess]]:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr)
    try:
        pump.start()
        yield meta_addr, pump
    finally:
        pump.kill()
        meta.kill()


async def write_transactions(client: AsyncPumpsClient, count: int) -> dict[int, int]:
    committed: dict[int, int] = {}
    for _ in range(count):
        start_ts = await client.get_timestamp()
        await client.write_binlog(prewrite_of(start_ts))
        committed[start_ts] = await client.get_timestamp()
        await client.write_binlog(commit(start_ts, committed[start_ts]))
    return committed


def test_10000_malformed_requests_are_each_refused_and_stored_data_survives(
    pump: tuple[str, PumpProcess],
) -> None:
    meta_addr, server = pump
    tally: Counter[tuple[str, str]] = Counter()

    async def scenario() -> None:
        async with AsyncPumpsClient(meta_addr) as client:
            before = await write_transactions(client, 50)
            async with aio_channel(server.addr) as channel:
                fuzzers = [Fuzzer(channel, client.cluster_id, seed) for seed in range(CONCURRENCY)]
                for round_start in range(0, REQUESTS, CONCURRENCY):
                    count = min(CONCURRENCY, REQUESTS - round_start)
                    for kind, error in await asyncio.gather(*(f.one() for f in fuzzers[:count])):
                        assert error, f"a malformed {kind} request was accepted"
                        assert error not in UNHANDLED, f"a malformed {kind} request hit an unhandled error"
                        tally[kind, error.split("(")[0].split(":")[0][:50]] += 1
                await oversized(server.addr, client.cluster_id)
            after = await write_transactions(client, 5)
            until = max(after.values())
            pulled = await pull_until(server.addr, client.cluster_id, until)
            pulled.check(before | after)

    run(scenario())
    assert server.child is not None and server.child.proc.poll() is None, "the pump went down"
    assert "Traceback" not in server.output
    assert sum(tally.values()) == REQUESTS
    kinds = Counter(kind for kind, _ in tally.elements())
    assert set(kinds) == {"write", "batch", "cluster", "raw", "raw-batch", "pull"}
    print("answers:", dict(tally.most_common(20)))


async def oversized(addr: str, cluster_id: int) -> None:
    """A message past the pump's max-message-size is refused by gRPC itself; the pump stays up.
    (This client may send more than the pump takes.)"""
    limit = 2 * DEFAULT_MAX_MESSAGE_BYTES
    options = [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)]
    async with grpc.aio.insecure_channel(addr, options=options) as channel:
        stub = pump_pb2_grpc.PumpStub(channel)
        payload = bytes(DEFAULT_MAX_MESSAGE_BYTES + 1)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=payload))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
