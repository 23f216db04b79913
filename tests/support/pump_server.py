"""Real `binlog-bridge meta` and `binlog-bridge pump` children for pump server
tests, and a drainer-side reader of PullBinlogs that checks what it pulls."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bridge.binlog import Binlog, BinlogType, parse_binlog, prewrite
from bridge.grpcutil import aio_channel
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc
from pump.wire import checksum, response_entities
from tests.support.process import ChildProcess, bridge_cli, free_port

PUMP_TOML = """\
addr = "127.0.0.1:{port}"
node-id = "{node_id}"
meta = "{meta}"
data-dir = "{data_dir}"
status-addr = "127.0.0.1:{status_port}"
heartbeat-interval = "200ms"
fake-binlog-interval = "50ms"
stop-write-at-available-space = 0
{extra}
"""


def start_meta(workdir: Path) -> tuple[ChildProcess, str]:
    addr = f"127.0.0.1:{free_port()}"
    child = ChildProcess(
        bridge_cli("meta", "--data-dir", str(workdir / "meta"), "--addr", addr), workdir / "meta.out"
    )
    child.wait_for_line("meta ready")
    return child, addr


@dataclass
class PumpProcess:
    """One `binlog-bridge pump` child with a fixed node id, ports and data dir across restarts."""

    workdir: Path
    meta_addr: str
    node_id: str = "pump-1"
    extra_config: str = ""
    port: int = field(default_factory=free_port)
    status_port: int = field(default_factory=free_port)
    child: ChildProcess | None = None
    starts: int = 0

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.workdir / self.node_id

    @property
    def config_path(self) -> Path:
        return self.workdir / f"{self.node_id}.toml"

    def start(self, timeout: float = 60.0) -> ChildProcess:
        child = self.launch()
        child.wait_for_line(r"pump ready: node_id=", timeout=timeout)
        return child

    def launch(self) -> ChildProcess:
        """Start the child without waiting for it to be ready."""
        self.config_path.write_text(
            PUMP_TOML.format(
                port=self.port,
                node_id=self.node_id,
                meta=self.meta_addr,
                data_dir=self.data_dir,
                status_port=self.status_port,
                extra=self.extra_config,
            )
        )
        self.starts += 1
        log_path = self.workdir / f"{self.node_id}.{self.starts}.out"
        self.child = ChildProcess(bridge_cli("pump", "--config", str(self.config_path)), log_path)
        return self.child

    def kill(self) -> None:
        if self.child is not None:
            self.child.kill()

    def stop(self) -> int:
        assert self.child is not None
        return self.child.stop(timeout=30)

    @property
    def output(self) -> str:
        return self.child.output if self.child is not None else ""


def prewrite_of(start_ts: int) -> Binlog:
    """The Prewrite a test writes for ``start_ts``: one table mutation derived from it."""
    row = hashlib.sha256(start_ts.to_bytes(8, "big")).digest() * (1 + start_ts % 7)
    mutation = binlog_pb2.TableMutation(
        table_id=1 + start_ts % 5, inserted_rows=[row], sequence=[binlog_pb2.MutationType.Insert]
    )
    return prewrite(start_ts, [mutation], prewrite_key=b"k%d" % start_ts)


@dataclass
class Pulled:
    """What a PullBinlogs stream carried: committed transactions and watermarks."""

    txns: list[Binlog] = field(default_factory=list)
    watermarks: list[int] = field(default_factory=list)

    @property
    def watermark(self) -> int:
        return self.watermarks[-1] if self.watermarks else 0

    def add(self, entity: pump_pb2.Entity) -> None:
        assert entity.checksum == checksum(entity.payload), "entity checksum mismatch"
        binlog = parse_binlog(entity.payload)
        assert entity.pos.offset == entity.meta.commitTs
        if entity.meta.startTs == entity.meta.commitTs:
            assert (
                binlog.tp == BinlogType.Rollback and binlog.start_ts == binlog.commit_ts == entity.pos.offset
            )
            assert entity.pos.offset >= self.watermark, "a watermark went down"
            self.watermarks.append(entity.pos.offset)
            return
        assert binlog.tp == BinlogType.Commit
        assert (binlog.start_ts, binlog.commit_ts) == (entity.meta.startTs, entity.meta.commitTs)
        assert binlog.commit_ts > self.watermark, "a transaction at or below an announced watermark"
        self.txns.append(binlog)

    def check(self, expected: dict[int, int], payload_of=prewrite_of) -> None:
        """Exactly ``expected`` (start_ts -> commit_ts), each once, in strictly
        increasing commit_ts, each carrying its Prewrite re-typed as the Commit."""
        commit_ts = [b.commit_ts for b in self.txns]
        assert all(a < b for a, b in itertools.pairwise(commit_ts)), "commit_ts not strictly increasing"
        assert len(self.txns) == len(expected), (
            f"pulled {len(self.txns)} transactions, expected {len(expected)}"
        )
        assert {b.start_ts: b.commit_ts for b in self.txns} == expected
        for binlog in self.txns:
            want = Binlog()
            want.CopyFrom(payload_of(binlog.start_ts))
            want.tp, want.commit_ts = BinlogType.Commit, binlog.commit_ts
            assert binlog == want, f"start_ts {binlog.start_ts}: payload differs from its Prewrite"


async def pull_until(addr: str, cluster_id: int, until_ts: int, after: int = 0) -> Pulled:
    """PullBinlogs from ``after`` until a watermark at or past ``until_ts``."""
    pulled = Pulled()
    async with aio_channel(addr) as channel:
        stub = pump_pb2_grpc.PumpStub(channel)
        request = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=after))
        call = stub.PullBinlogs(request, wait_for_ready=True)  # a restarted pump may still be in backoff
        async for response in call:
            for entity in response_entities(response):
                pulled.add(entity)
            if pulled.watermark >= until_ts:
                call.cancel()
                return pulled
    raise AssertionError(f"the pull ended at watermark {pulled.watermark}, before {until_ts}")


def rpc_error_code(exc: BaseException) -> grpc.StatusCode | None:
    return exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None


def running_pumps(workdir: Path, meta_addr: str, count: int) -> Iterator[list[PumpProcess]]:
    """For a fixture: ``count`` pumps, pump-0 ..., registered with ``meta_addr``, started;
    SIGKILLed once the fixture resumes (``yield from running_pumps(...)``)."""
    started = [PumpProcess(workdir, meta_addr, node_id=f"pump-{i}") for i in range(count)]
    for pump in started:
        pump.start()
    yield started
    for pump in started:
        pump.kill()
