"""Hardening seen from the drainer's sink (issue 15), with real `binlog-bridge
meta`, `pump` and `drainer` children and raw gRPC clients.

Timestamp poisoning: binlogs whose timestamps the TSO never issued are refused
by the pump, and every transaction written after them reaches the sink, equal
to what was written.

A ghost pump: a raw gRPC Heartbeat registers an ONLINE pump at an
address where nothing listens. The drainer waits for it (never skips it), marks
it unreachable after ``pump-unreachable-timeout`` and says so in its log and
``/status``; ``ctl nodes`` shows it; once an operator lets it go (``ctl
offline``) the drainer delivers everything, equal to what was written."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from bridge import tso
from bridge.binlog import TableMutationBuilder, commit, prewrite
from bridge.grpcutil import aio_channel
from bridge.proto import binlog_pb2, meta_pb2, meta_pb2_grpc, pump_pb2, pump_pb2_grpc
from bridge.rowcodec import RowCodec
from tests.support.drainer_cluster import (
    DrainerProcess,
    Producer,
    Written,
    delivered,
    expected_records,
    strip_ddl_details,
    table,
)
from tests.support.process import free_port, run_cli, wait_until
from tests.support.pump_server import PumpProcess

pytestmark = pytest.mark.timeout(180)

GHOST_TTL_MS = 1500


@pytest.fixture
def pump(tmp_path: Path, meta_addr: str) -> Iterator[PumpProcess]:
    pump = PumpProcess(tmp_path, meta_addr)
    pump.start()
    yield pump
    pump.kill()


def register_ghost(meta_addr: str) -> None:
    async def heartbeat() -> None:
        async with grpc.aio.insecure_channel(meta_addr) as channel:
            status = meta_pb2.NodeStatus(
                node_id="ghost",
                kind=meta_pb2.PUMP,
                addr=f"127.0.0.1:{free_port()}",  # nothing listens there
                state=meta_pb2.ONLINE,
                ttl_ms=GHOST_TTL_MS,
            )
            await meta_pb2_grpc.MetaStub(channel).Heartbeat(meta_pb2.HeartbeatRequest(status=status))

    asyncio.run(asyncio.wait_for(heartbeat(), 30))


def inserts(producer: Producer, start: int, count: int) -> int:
    for i in range(start, start + count):
        last = producer.txn([("insert", "users", None, (i, f"u{i}"))])
    return last.commit_ts


def test_a_ghost_pump_is_waited_for_shown_unreachable_and_let_go_by_an_operator(
    pump: PumpProcess, tmp_path: Path, meta_addr: str
) -> None:
    drainer = DrainerProcess(tmp_path, meta_addr, extra_config='pump-unreachable-timeout = "1s"')
    drainer.start()
    producer = Producer(meta_addr)
    try:
        producer.create(table("users", 10))
        drainer.wait_checkpoint(inserts(producer, 0, 3))
        register_ghost(meta_addr)
        wait_until(
            lambda: any(p["node_id"] == "ghost" for p in drainer.status()["pumps"]),
            timeout=60,
            what="the drainer to merge the ghost pump",
        )
        last = inserts(producer, 3, 3)
        wait_until(
            lambda: "the merge waits for pump ghost" in drainer.output,
            timeout=60,
            what=f"the drainer to say it waits for the ghost; output:\n{drainer.output[-3000:]}",
        )
        (ghost,) = [p for p in drainer.status()["pumps"] if p["node_id"] == "ghost"]
        assert ghost["unreachable"] is True and ghost["connected"] is False
        assert drainer.checkpoint()["commitTS"] < last  # it waits: nothing past the ghost's watermark
        listed = run_cli("ctl", "--meta", meta_addr, "nodes")
        assert listed.returncode == 0, listed.stderr
        assert "pump ghost is unreachable" in listed.stdout, listed.stdout
        assert "pump pump-1 is unreachable" not in listed.stdout
        # Once its heartbeat has expired an operator lets it go; everything is delivered.
        wait_until(
            lambda: run_cli("ctl", "--meta", meta_addr, "offline", "ghost", "--yes").returncode == 0,
            timeout=60,
            what="ctl offline ghost to succeed once the ghost is not alive",
        )
        drainer.wait_checkpoint(last)
        assert strip_ddl_details(delivered(drainer.records())) == expected_records(producer.written)
    finally:
        producer.close()
        drainer.kill()
    assert "Traceback" not in drainer.output


def poison(pump_addr: str, cluster_id: int, binlogs: list[binlog_pb2.Binlog]) -> list[str]:
    """Write each binlog with a raw WriteBinlog; the status code (or errmsg) of each."""

    async def write_all() -> list[str]:
        answers = []
        async with aio_channel(pump_addr) as channel:
            stub = pump_pb2_grpc.PumpStub(channel)
            for binlog in binlogs:
                request = pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=binlog.SerializeToString())
                try:
                    answers.append((await stub.WriteBinlog(request)).errmsg or "OK")
                except grpc.aio.AioRpcError as exc:
                    answers.append(exc.code().name)
        return answers

    return asyncio.run(asyncio.wait_for(write_all(), 30))


def test_poisoned_timestamps_are_refused_and_every_later_transaction_reaches_the_sink(
    pump: PumpProcess, tmp_path: Path, meta_addr: str
) -> None:
    drainer = DrainerProcess(tmp_path, meta_addr)
    drainer.start()
    producer = Producer(meta_addr)
    try:
        schema = table("users", 10)
        producer.create(schema)
        inserts(producer, 0, 3)
        # A transaction whose Prewrite is real; a raw client tries to commit it an hour ahead.
        mutation = TableMutationBuilder(schema.table_id)
        mutation.insert(RowCodec(schema).encode((100, "real")))
        start_ts = producer.client.get_timestamp()
        producer.client.write_binlog(prewrite(start_ts, [mutation.build()]))
        hour_ahead = tso.compose(tso.physical_ms(producer.client.get_timestamp()) + 3_600_000, 0)
        cluster_id = producer.client.cluster_id
        answers = poison(
            pump.addr,
            cluster_id,
            [
                prewrite(1 << 62, [mutation.build()]),
                commit(start_ts, hour_ahead),
                commit(1 << 62, (1 << 62) + 1),
            ],
        )
        assert answers == ["OUT_OF_RANGE"] * 3
        commit_ts = producer.client.get_timestamp()
        producer.client.write_binlog(commit(start_ts, commit_ts))
        change = {"kind": "insert", "table": "shop.users", "before": None, "after": [100, "real"]}
        producer.written.append(Written(commit_ts, start_ts, "txn", [change]))
        last = inserts(producer, 3, 3)
        drainer.wait_checkpoint(last)
        assert strip_ddl_details(delivered(drainer.records())) == expected_records(producer.written)
        # The drainer's control endpoint refuses what a browser page could send (and a bad length).
        form = "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 0"
        assert http_status(drainer.status_port, f"POST /state/close HTTP/1.1\r\nHost: x\r\n{form}") == 403
        assert (
            http_status(drainer.status_port, "POST /state/close HTTP/1.1\r\nHost: x\r\nContent-Length: ²")
            == 400
        )
        assert drainer.status()["state"] == "ONLINE"
    finally:
        producer.close()
        drainer.kill()
    assert "Traceback" not in drainer.output and "Traceback" not in pump.output


def http_status(port: int, head: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall((head + "\r\n\r\n").encode())
        reply = sock.recv(65536)
    return int(reply.split(b" ")[1])
