"""The pump's disk fails under it (issue 15, item 7): it fills up (a small tmpfs), or it returns
EIO (an LD_PRELOAD shim compiled here from tests/support/eio_shim.c). Either way the pump
refuses writes with a clear error and never acknowledges a write it could not persist; a full
disk recovers once space returns; and at the end the drainer's sink holds exactly every
acknowledged transaction (the recording sink compared with what the producer was told was
written). Run time: ~25 s for the module.

The fault suite (tests/e2e/test_faults_*.py, 7 cases, all @pytest.mark.slow) ran in 69 s
on a 2-core machine (up to ~2 min while other work shared it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge.binlog import prewrite
from bridge.errors import BridgeError
from bridge.grpcutil import channel_options
from bridge.meta.client import MetaClient
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc, row_pb2
from bridge.pumpclient import PumpClientConfig, PumpsClient
from tests.support.drainer_cluster import (
    DrainerProcess,
    Producer,
    delivered,
    expected_records,
    strip_ddl_details,
    table,
)
from tests.support.pump_server import PumpProcess, start_meta

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
log = logging.getLogger(__name__)

ROW_BYTES = 16 * 1024
SHIM_SOURCE = Path(__file__).resolve().parents[1] / "support" / "eio_shim.c"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted on a fresh directory (root only; skipped where mount is refused)."""
    mountpoint = tmp_path / "small-disk"
    mountpoint.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def short_timeout_producer(meta_addr: str) -> Producer:
    """The test producer with a client that gives up on a write after 2 s (the pump stays
    unavailable while its disk is full; the test wants the error, not the retries)."""
    producer = Producer(meta_addr)
    producer.client.close()
    config = PumpClientConfig(write_timeout=2.0, probe_interval=0.2)
    producer.client = PumpsClient(meta_addr, config)
    producer.client.start()
    return producer


def body() -> str:
    """A row's TEXT column: ROW_BYTES of incompressible text."""
    return os.urandom(ROW_BYTES // 2).hex()


def files_table() -> row_pb2.TableSchema:
    """``files (id BIGINT primary key, name VARCHAR(64), body TEXT)``."""
    body_column = row_pb2.Column(id=3, name="body", type=row_pb2.ColumnType.TEXT, nullable=True)
    return table("files", 1, extra=[body_column])


async def meta_cluster_id(meta_addr: str) -> int:
    async with MetaClient(meta_addr) as meta:
        return await meta.cluster_id()


def raw_write(addr: str, cluster_id: int, start_ts: int) -> tuple[grpc.StatusCode, str]:
    """One Prewrite of ROW_BYTES through a plain gRPC channel (what any client sees):
    the status code and the message (or the errmsg of an OK answer)."""
    mutation = binlog_pb2.TableMutation(
        table_id=1, inserted_rows=[os.urandom(ROW_BYTES)], sequence=[binlog_pb2.MutationType.Insert]
    )
    binlog = prewrite(start_ts, [mutation], b"raw")
    with grpc.insecure_channel(addr, options=channel_options(64 << 20)) as channel:
        stub = pump_pb2_grpc.PumpStub(channel)
        request = pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=binlog.SerializeToString())
        try:
            answer = stub.WriteBinlog(request, timeout=10)
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
    return grpc.StatusCode.OK, answer.errmsg


def fill_until_refused(producer: Producer, first_row: int) -> tuple[int, str]:
    """Insert rows of ROW_BYTES until a transaction is refused; returns the next row and why."""
    row = first_row
    while True:
        try:
            producer.txn([("insert", "files", None, [row, f"file {row}", body()])])
        except BridgeError as exc:
            return row + 1, str(exc)
        row += 1
        assert row - first_row < 2000, "the small disk never filled up"


def test_a_full_disk_refuses_writes_and_recovers_when_space_returns(tmp_path: Path, small_disk: Path) -> None:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(
        tmp_path,
        meta_addr,
        # the disk guard off (it would refuse Prewrites first): this is about ENOSPC itself
        extra_config='max-txn-timeout = "1s"\n[storage]\nsegment-size = 1048576\n',
    )
    (small_disk / "pump").mkdir()
    pump.data_dir.symlink_to(small_disk / "pump")  # its data dir on the small disk, its log beside
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (5 << 20))  # 5 of the 8 MiB
    pump.start()
    drainer = DrainerProcess(tmp_path, meta_addr)
    drainer.start()
    producer = short_timeout_producer(meta_addr)
    try:
        producer.create(files_table())
        row, why = fill_until_refused(producer, 1)
        acked_before = len(producer.written)
        log.warning("disk full after %d transactions; the producer was told: %s", acked_before, why)
        pump.child.wait_for_line(r"value log write refused, the disk is full: .*No space left on device")  # type: ignore[union-attr]
        assert "refusing writes until reopened" not in pump.output

        cluster_id = asyncio.run(meta_cluster_id(meta_addr))
        code, message = raw_write(pump.addr, cluster_id, producer.client.get_timestamp())
        log.warning("a raw WriteBinlog on the full disk: %s %s", code, message)
        assert code != grpc.StatusCode.OK and "No space left on device" in message

        filler.unlink()  # space returns: writes go through again
        for i in range(20):
            producer.txn([("insert", "files", None, [row + i, f"file {row + i}", body()])])
        last = producer.written[-1].commit_ts
        drainer.wait_checkpoint(last)
        assert strip_ddl_details(delivered(drainer.records())) == expected_records(producer.written)
        assert pump.child is not None and pump.child.proc.poll() is None  # it never crashed
    finally:
        producer.close()
        drainer.kill()
        pump.kill()
        meta.kill()


@pytest.fixture(scope="module")
def eio_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/support/eio_shim.c built into a shared object for LD_PRELOAD."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the EIO shim")
    shim = tmp_path_factory.mktemp("eio-shim") / "eio_shim.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(shim), str(SHIM_SOURCE), "-ldl"],
        check=True,
        capture_output=True,
    )
    return shim


def row_id(record: dict[str, Any]) -> int | None:
    """The id of the row a delivered/expected transaction record inserted (None for DDL)."""
    changes = record.get("changes")
    return int(changes[0]["after"][0]) if changes else None


@pytest.mark.parametrize("calls", ["write", "fsync"])
def test_a_failing_disk_stops_writes_and_loses_nothing_acknowledged(
    tmp_path: Path, eio_shim: Path, calls: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr, extra_config='max-txn-timeout = "1s"\n')
    trigger = tmp_path / "disk-fails-now"
    with monkeypatch.context() as env:  # the pump alone runs with the shim
        env.setenv("LD_PRELOAD", str(eio_shim))
        env.setenv("EIO_SHIM_CALLS", calls)
        env.setenv("EIO_SHIM_PATH", str(pump.data_dir / "value"))
        env.setenv("EIO_SHIM_TRIGGER", str(trigger))
        pump.start()
    drainer = DrainerProcess(tmp_path, meta_addr)
    drainer.start()
    producer = short_timeout_producer(meta_addr)
    refused: set[int] = set()
    try:
        producer.create(files_table())
        for row in range(1, 31):
            producer.txn([("insert", "files", None, [row, f"file {row}", body()])])
        acked_before = len(producer.written)

        trigger.touch()  # the disk fails from now on
        for row in range(31, 33):
            try:
                producer.txn([("insert", "files", None, [row, f"file {row}", body()])])
            except BridgeError as exc:
                refused.add(row)
                why = str(exc)
        assert refused == {31, 32} and len(producer.written) == acked_before
        log.warning("with EIO on %s the producer was told: %s", calls, why)
        assert "Input/output error" in why
        pump.child.wait_for_line(r"refusing writes until reopened")  # type: ignore[union-attr]
        cluster_id = asyncio.run(meta_cluster_id(meta_addr))
        code, message = raw_write(pump.addr, cluster_id, producer.client.get_timestamp())
        assert code != grpc.StatusCode.OK and "refuses writes after an earlier failure" in message, message
        assert pump.child.proc.poll() is None  # type: ignore[union-attr]

        trigger.unlink()  # the disk is replaced; the pump is restarted and re-reads its log
        pump.kill()
        pump.start()
        for row in range(33, 43):
            producer.txn([("insert", "files", None, [row, f"file {row}", body()])])
        drainer.wait_checkpoint(producer.written[-1].commit_ts)
        got = strip_ddl_details(delivered(drainer.records()))
        extra = [r for r in got if row_id(r) in refused]  # refused, yet on disk: allowed, never required
        log.warning(
            "refused transactions the drainer still got (durable after all): %s", [row_id(r) for r in extra]
        )
        assert [r for r in got if row_id(r) not in refused] == expected_records(producer.written)
    finally:
        producer.close()
        drainer.kill()
        pump.kill()
        meta.kill()
