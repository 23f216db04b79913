"""Rows per second a drainer replicates from three pumps to the file sink, against pull + decode alone.

Starts ``binlog-bridge meta`` and three ``binlog-bridge pump`` children
(a temporary data dir), then preloads them through the real client SDK
(:class:`bridge.pumpclient.AsyncPumpsClient`, round-robin over the pumps):
a CREATE TABLE DDL binlog for an 8-column table of mixed types, then
``--rows`` rows in transactions of ``--rows-per-txn`` inserted rows, each a
Prewrite and, once acknowledged, its Commit. Every Commit is acknowledged
before anything is measured.

``value``: a ``binlog-bridge drainer`` child (``[sink] type = "file"``, no
checkpoint, ``initial-commit-ts = 0``) catches up; rows/s from its ready
line until ``GET /status`` shows ``checkpoint_ts`` at or past the last
commit_ts (so its start-up, the merge, event building, the file sink's
writes and fsyncs and the checkpoint interval are all inside).

``ceiling``: in the same run and on the same data, the raw loop in this
process: ``PullBinlogs`` from each of the three pumps concurrently (plain
gRPC stubs, from commit_ts 0 until each stream passes the last commit_ts),
each binlog parsed, the DDL's schema read, and every row decoded with
:class:`bridge.rowcodec.RowCodec` — no merge, no sink. ``ratio`` = value /
ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.cpu import Budget
from bench.pump import TsoBatcher
from bridge.binlog import (
    Binlog,
    BinlogType,
    TableMutationBuilder,
    commit,
    ddl_prewrite,
    iter_changes,
    prewrite,
)
from bridge.grpcutil import aio_channel
from bridge.meta.client import MetaClient
from bridge.proto import binlog_pb2, pump_pb2, pump_pb2_grpc, row_pb2
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig
from bridge.rowcodec import RowCodec

T = row_pb2.ColumnType
PUMPS = 3
META_READY = r"meta ready: addr=(\S+)"
PUMP_READY = r"pump ready: node_id=\S+ addr=(\S+) status=(\S+)"
DRAINER_READY = r"drainer ready: node_id=\S+ addr=\S+ status=(\S+)"
PUMP_TOML = """\
addr = "127.0.0.1:0"
node-id = "bench-pump-{n}"
meta = "{meta}"
data-dir = "{data_dir}"
status-addr = "127.0.0.1:0"
fake-binlog-interval = "100ms"
pull-interval = "{pull_interval}s"
stop-write-at-available-space = 0
[storage]
sync = false
"""
DRAINER_TOML = """\
addr = "127.0.0.1:0"
node-id = "bench-drainer"
meta = "{meta}"
data-dir = "{data_dir}"
status-addr = "127.0.0.1:0"
initial-commit-ts = 0
flush-interval = "{flush_interval}"
checkpoint-interval = "100ms"
resolved-interval = "100ms"
[sink]
{sink}"""


def drainer_toml(
    meta: str, data_dir: Path, sink: str = 'type = "file"\n', flush_interval: str = "100ms"
) -> str:
    """The benchmarks' drainer config: catch up from commit_ts 0, checkpoints every 100 ms;
    ``sink`` is the body of the ``[sink]`` table."""
    return DRAINER_TOML.format(meta=meta, data_dir=data_dir, sink=sink, flush_interval=flush_interval)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=200_000, help="rows preloaded (default 200000)")
    parser.add_argument("--rows-per-txn", type=int, default=10, help="rows per transaction (default 10)")
    parser.add_argument("--concurrency", type=int, default=256, help="preloading tasks (default 256)")
    parser.add_argument("--timeout", type=float, default=900.0, help="phase time limit (default 900 s)")


def progress(message: str) -> None:
    print(f"bench drainer: {message}", file=sys.stderr, flush=True)


def table_schema() -> row_pb2.TableSchema:
    """``bench.orders``: 8 columns of mixed types, primary key ``id``."""
    schema = row_pb2.TableSchema(table_id=101, db="bench", table="orders")
    schema.columns.add(id=1, name="id", type=T.BIGINT)
    schema.columns.add(id=2, name="customer", type=T.INT, nullable=True)
    schema.columns.add(id=3, name="price", type=T.DECIMAL, precision=12, scale=2, nullable=True)
    schema.columns.add(id=4, name="weight", type=T.DOUBLE, nullable=True)
    schema.columns.add(id=5, name="sku", type=T.VARCHAR, length=64, nullable=True)
    schema.columns.add(id=6, name="created", type=T.DATETIME, fsp=6, nullable=True)
    schema.columns.add(id=7, name="flag", type=T.TINYINT, nullable=True)
    schema.columns.add(id=8, name="note", type=T.TEXT, nullable=True)
    schema.max_column_id = 8
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return schema


BASE_TIME = datetime(2026, 1, 1)


def row_values(i: int) -> tuple[object, ...]:
    return (
        i, i % 10_007, Decimal(i % 100_000) / 100, i * 0.25, f"sku-{i:010d}",
        BASE_TIME + timedelta(microseconds=i * 1_001), i % 2, None if i % 3 else f"note {i} " * 4,
    )  # fmt: skip


@dataclass
class Child:
    """A started child process: its ready line's match, when it was seen, its last stderr lines."""

    proc: asyncio.subprocess.Process
    match: re.Match[str]
    ready_at: float
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=40))

    def check_alive(self, what: str) -> None:
        if self.proc.returncode is not None:
            raise RuntimeError(f"{what} exited with {self.proc.returncode}:\n" + "".join(self.tail))


@contextlib.asynccontextmanager
async def spawn(argv: list[str], ready: str, what: str) -> AsyncIterator[Child]:
    """A ``binlog-bridge`` child, yielded once it printed ``ready``; stopped (killed if need be) on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bridge.cli", "--log-level", "warning", *argv,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    drain: asyncio.Task[None] | None = None
    try:
        child = await asyncio.wait_for(_await_ready(proc, re.compile(ready), what), 60)
        drain = asyncio.create_task(_drain(proc, child.tail))
        yield child
    finally:
        await _stop(proc)
        if drain is not None:
            await drain


async def _await_ready(proc: asyncio.subprocess.Process, ready: re.Pattern[str], what: str) -> Child:
    assert proc.stderr is not None
    lines: deque[str] = deque(maxlen=40)
    while line := (await proc.stderr.readline()).decode(errors="replace"):
        lines.append(line)
        if m := ready.search(line):
            return Child(proc, m, time.perf_counter(), lines)
    raise RuntimeError(f"{what} exited before it was ready:\n" + "".join(lines))


async def _drain(proc: asyncio.subprocess.Process, tail: deque[str]) -> None:
    assert proc.stderr is not None
    while line := await proc.stderr.readline():
        tail.append(line.decode(errors="replace"))


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
    await proc.wait()


async def start_cluster(
    stack: contextlib.AsyncExitStack,
    tmp: Path,
    say: Callable[[str], None] | None = None,
    statuses: list[str] | None = None,
    pull_interval: float = 0.01,
) -> tuple[str, list[str]]:
    """Meta and three pumps; their addresses (reported through ``say``, default this bench's progress).
    The pumps' HTTP status addresses (``/metrics``) are appended to ``statuses`` when given."""
    meta = await stack.enter_async_context(
        spawn(["meta", "--data-dir", str(tmp / "meta"), "--addr", "127.0.0.1:0"], META_READY, "meta")
    )
    meta_addr = meta.match.group(1)
    pumps = []
    for n in range(1, PUMPS + 1):
        config = tmp / f"pump-{n}.toml"
        config.write_text(
            PUMP_TOML.format(n=n, meta=meta_addr, data_dir=tmp / f"pump-{n}", pull_interval=pull_interval)
        )
        pump = await stack.enter_async_context(spawn(["pump", "--config", str(config)], PUMP_READY, "pump"))
        pumps.append(pump.match.group(1))
        if statuses is not None:
            statuses.append(pump.match.group(2))
    (say or progress)(f"meta at {meta_addr}, pumps at {', '.join(pumps)}")
    return meta_addr, pumps


async def write_txn(client: AsyncPumpsClient, tso: TsoBatcher, first: binlog_pb2.Binlog) -> int:
    """The Prewrite, then the Commit with a ts taken after its ack; the commit_ts."""
    await client.write_binlog(first)
    commit_ts = await tso.get()
    await client.write_binlog(commit(first.start_ts, commit_ts))
    return commit_ts


Values = Callable[[int], tuple[object, ...]]


def txn_binlog(
    start_ts: int, codec: RowCodec, table_id: int, first_row: int, rows: int, values: Values = row_values
) -> binlog_pb2.Binlog:
    """The Prewrite of rows ``first_row`` ..< ``first_row + rows`` (``values(i)``), encoded by the SDK."""
    mutation, encode = TableMutationBuilder(table_id), codec.encode
    mutation.insert_all([encode(values(i)) for i in range(first_row, first_row + rows)])
    return prewrite(start_ts, [mutation.build()], b"k%d" % first_row)


async def producer(
    client: AsyncPumpsClient, tso: TsoBatcher, txns: Iterator[int], args: argparse.Namespace
) -> int:
    """Transactions until ``txns`` runs out; the highest commit_ts written."""
    schema = table_schema()
    codec = RowCodec(schema)
    last = 0
    for txn in txns:
        first_row = txn * args.rows_per_txn
        rows = min(args.rows_per_txn, args.rows - first_row)
        binlog = txn_binlog(await tso.get(), codec, schema.table_id, first_row, rows)
        last = max(last, await write_txn(client, tso, binlog))
    return last


async def preload(meta_addr: str, args: argparse.Namespace) -> int:
    """The CREATE TABLE, then every transaction; the last commit_ts."""
    config = PumpClientConfig(strategy="range", rpc_timeout=30, write_timeout=120)
    began = time.perf_counter()
    async with AsyncPumpsClient(meta_addr, config) as client:
        tso = TsoBatcher(client)
        schema = table_schema()
        change = row_pb2.SchemaChange(
            kind=row_pb2.SchemaChange.CREATE_TABLE, db=schema.db, table=schema.table, table_schema=schema
        )
        ddl = ddl_prewrite(await tso.get(), "CREATE TABLE bench.orders (...)", 1, change)
        await write_txn(client, tso, ddl)
        txns = iter(range(-(-args.rows // args.rows_per_txn)))
        tasks = [producer(client, tso, txns, args) for _ in range(args.concurrency)]
        last = max(await asyncio.gather(*tasks))
    progress(f"preloaded {args.rows:,} rows in {time.perf_counter() - began:.1f}s; last commit_ts {last}")
    return last


def fetch_status(status_addr: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{status_addr}/status", timeout=10) as reply:
        return dict(json.loads(reply.read()))


def fetch_metrics(status_addr: str, prefix: str) -> dict[str, float]:
    """The drainer's Prometheus samples whose name starts with ``prefix`` (``GET /metrics``), by
    their full text before the value (name and labels)."""
    with urllib.request.urlopen(f"http://{status_addr}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def peak_rss_mib(pid: int) -> float | None:
    """The peak resident set of process ``pid`` so far (``VmHWM``), in MiB; None where unreadable."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def mysql_sink_faults(status_addr: str) -> dict[str, int]:
    """Deadlocks (error 1213) the MySQL sink's workers met, and every retry of a worker's open
    transaction (deadlocks, lock wait timeouts, lost connections)."""
    samples = fetch_metrics(status_addr, "bridge_sink_mysql_")
    return {
        "deadlocks": int(samples.get("bridge_sink_mysql_deadlocks_total", 0)),
        "worker_retries": int(samples.get('bridge_sink_mysql_retries_total{scope="worker"}', 0)),
    }


async def wait_checkpoint(drainer: Child, last_ts: int, timeout: float) -> None:
    """Poll the drainer child's ``/status`` (every 50 ms) until its checkpoint reaches ``last_ts``;
    fails when it dies, reports a halt or takes longer than ``timeout`` from its ready line."""
    status_addr = drainer.match.group(1)
    deadline = drainer.ready_at + timeout
    checkpoint = 0
    while checkpoint < last_ts:
        drainer.check_alive("binlog-bridge drainer")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"drainer checkpoint at {checkpoint} after {timeout}s, not {last_ts}")
        await asyncio.sleep(0.05)
        with contextlib.suppress(OSError):
            status = await asyncio.to_thread(fetch_status, status_addr)
            halted = (status.get("errors") or {}).get("halted")
            if halted:
                raise RuntimeError(f"the drainer halted replication: {halted}")
            checkpoint = int(status.get("checkpoint_ts") or 0)


async def measure_drainer(
    tmp: Path, meta_addr: str, last_ts: int, args: argparse.Namespace
) -> tuple[float, dict[str, object]]:
    """Rows/s of a drainer catching up from its ready line to a checkpoint at ``last_ts``, and the
    CPU budget of every process meanwhile (:class:`bench.cpu.Budget`)."""
    config = tmp / "drainer.toml"
    config.write_text(drainer_toml(meta_addr, tmp / "drainer"))
    async with spawn(["drainer", "--config", str(config)], DRAINER_READY, "drainer") as drainer:
        budget = Budget()
        budget.start()
        await wait_checkpoint(drainer, last_ts, args.timeout)
        elapsed = time.perf_counter() - drainer.ready_at
        spent = budget.stop(args.rows)
    rate: float = args.rows / elapsed
    progress(f"drainer: {args.rows:,} rows in {elapsed:.2f}s = {rate:,.0f} rows/s")
    return rate, spent


def decode_binlog(payload: bytes, codecs: dict[int, RowCodec], decode_rows: bool) -> tuple[int, int]:
    """Parse one pulled binlog and its mutations, decode all its rows unless not ``decode_rows``;
    (its commit_ts or watermark, its rows)."""
    binlog = Binlog.FromString(payload)
    if binlog.tp == BinlogType.Rollback:
        return binlog.commit_ts, 0
    if binlog.ddl_job_id:
        schema = binlog_schema(binlog)
        codecs[schema.table_id] = RowCodec(schema)
        return binlog.commit_ts, 0
    rows = 0
    for mutation in binlog_pb2.PrewriteValue.FromString(binlog.prewrite_value).mutations:
        if not decode_rows:
            rows += len(mutation.sequence)
            continue
        codec = codecs[mutation.table_id]
        for change in iter_changes(mutation):
            for image in (change.before, change.after):
                if image is not None:
                    codec.decode(image)
            rows += 1
    return binlog.commit_ts, rows


def binlog_schema(binlog: binlog_pb2.Binlog) -> row_pb2.TableSchema:
    change = row_pb2.SchemaChange.FromString(binlog.ddl_schema_change)
    return change.table_schema


async def pull_and_decode(
    addr: str, cluster_id: int, last_ts: int, codecs: dict[int, RowCodec], decode_rows: bool
) -> int:
    """One pump's binlogs from the start until its stream passes ``last_ts``; rows decoded."""
    rows = 0
    channel = aio_channel(addr)
    try:
        stub = pump_pb2_grpc.PumpStub(channel)  # type: ignore[no-untyped-call]
        request = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=0))
        call = stub.PullBinlogs(request)
        async for response in call:
            entities = list(response.entities) or [response.entity]
            for entity in entities:
                ts, decoded = decode_binlog(entity.payload, codecs, decode_rows)
                rows += decoded
                if ts >= last_ts:
                    call.cancel()
                    return rows
        raise RuntimeError(f"pump {addr} ended its stream before commit_ts {last_ts}")
    finally:
        await channel.close()


async def measure_raw(
    cluster_id: int, pumps: list[str], last_ts: int, args: argparse.Namespace, decode_rows: bool
) -> float:
    """Rows/s of the raw loop: three PullBinlogs streams, each binlog and its mutations parsed,
    every row decoded (unless not ``decode_rows``)."""
    codecs = await ddl_codecs(pumps, cluster_id)
    began = time.perf_counter()
    pulls = [pull_and_decode(addr, cluster_id, last_ts, codecs, decode_rows) for addr in pumps]
    rows = sum(await asyncio.wait_for(asyncio.gather(*pulls), args.timeout))
    elapsed = time.perf_counter() - began
    if rows != args.rows:
        raise RuntimeError(f"the raw loop decoded {rows:,} rows, {args.rows:,} were written")
    rate = rows / elapsed
    what = "pull + parse + decode" if decode_rows else "pull + parse, rows not decoded"
    progress(f"raw loop ({what}): {rows:,} rows in {elapsed:.2f}s = {rate:,.0f} rows/s")
    return rate


async def ddl_codecs(pumps: list[str], cluster_id: int) -> dict[int, RowCodec]:
    """The table's codec, from the DDL binlog one pump holds first (the raw loop does no merge:
    each stream decodes from its first row on, so the schema is read before timing starts)."""
    codecs: dict[int, RowCodec] = {}
    for addr in pumps:
        binlog = await first_binlog(addr, cluster_id)
        if binlog.ddl_job_id:
            schema = binlog_schema(binlog)
            codecs[schema.table_id] = RowCodec(schema)
    if not codecs:
        raise RuntimeError("no pump's first binlog is the CREATE TABLE")
    return codecs


async def first_binlog(addr: str, cluster_id: int) -> binlog_pb2.Binlog:
    """The first binlog of a pump that is not a watermark."""
    channel = aio_channel(addr)
    try:
        stub = pump_pb2_grpc.PumpStub(channel)  # type: ignore[no-untyped-call]
        request = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=0))
        call = stub.PullBinlogs(request, timeout=30)
        async for response in call:
            for entity in list(response.entities) or [response.entity]:
                binlog = Binlog.FromString(entity.payload)
                if binlog.tp != BinlogType.Rollback:
                    call.cancel()
                    return binlog
        raise RuntimeError(f"pump {addr} ended its stream with no binlog")
    finally:
        await channel.close()


async def measure(args: argparse.Namespace) -> tuple[float, float, float, dict[str, object]]:
    """(drainer rows/s, raw pull + decode rows/s, raw pull without row decoding rows/s, the
    drainer phase's CPU budget)."""
    with tempfile.TemporaryDirectory(prefix="bench-drainer-") as name:
        tmp = Path(name)
        async with contextlib.AsyncExitStack() as stack:
            meta_addr, pumps = await start_cluster(stack, tmp)
            last_ts = await preload(meta_addr, args)
            value, budget = await measure_drainer(tmp, meta_addr, last_ts, args)
            async with MetaClient(meta_addr, timeout=10) as meta:
                cluster_id = await meta.cluster_id()
            ceiling = await measure_raw(cluster_id, pumps, last_ts, args, decode_rows=True)
            pull_only = await measure_raw(cluster_id, pumps, last_ts, args, decode_rows=False)
    return value, ceiling, pull_only, budget


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.rows < 1 or not 1 <= args.rows_per_txn <= args.rows or args.concurrency < 1 or args.timeout <= 0:
        raise SystemExit(
            "bench drainer: --rows >= 1, --rows-per-txn 1..rows, --concurrency >= 1, --timeout > 0"
        )
    value, ceiling, pull_only, budget = asyncio.run(measure(args))
    return {
        "name": "drainer",
        "value": round(value, 1),
        "unit": "rows/s",
        "ceiling": round(ceiling, 1),
        "ratio": float(f"{value / ceiling:.4g}") if ceiling else 0.0,
        # the file sink stores binlog bytes and never decodes rows: the same raw loop without decoding
        "pull_only": round(pull_only, 1),
        "pull_only_ratio": float(f"{value / pull_only:.4g}") if pull_only else 0.0,
        "budget": budget,  # the drainer phase: CPU per row of every process, from /proc
        "params": {
            "rows": args.rows,
            "rows_per_txn": args.rows_per_txn,
            "pumps": PUMPS,
            "columns": len(table_schema().columns),
            "sink": "file",
        },
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "ceiling_is": "PullBinlogs from the 3 pumps in one process, each binlog parsed and every row "
        "decoded with RowCodec; no merge, no sink",
    }
