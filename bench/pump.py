"""Binlogs per second one pump acknowledges through the SDK, against a batched ceiling.

Starts ``binlog-bridge meta`` and ``binlog-bridge pump`` (children, a
temporary data dir, ``storage.sync = true``: every acknowledged binlog is
fsynced), then runs ``--concurrency`` producer tasks through the real client
SDK (:class:`bridge.pumpclient.AsyncPumpsClient`) for ``--seconds``. Each
task writes transactions as a producer does: a start_ts from the TSO, the
Prewrite (``--size`` bytes, a valid row mutation), then a commit_ts taken
after the Prewrite was acknowledged, then the Commit. Timestamps come from
the meta service through the SDK, whose concurrent requests share one
GetTimestamps call.

With ``--threads N`` the producers are N threads sharing one blocking
:class:`bridge.pumpclient.PumpsClient` instead (how the project's own
producers write).

``value`` is binlogs acknowledged per second (Prewrites and Commits),
``p50_ms``/``p99_ms`` the latency of one ``write_binlog`` call, and
``cpu_us_per_binlog`` the CPU each process spent per binlog (``bench`` is
this process: the producers and the SDK).

The ceiling, measured in the same run with its own meta service, is
:mod:`bench.pump_ceiling`: a minimal gRPC server whose ``WriteBinlogs``
appends the payloads to a file and fsyncs once per call (no parsing, no
index, no sorting), driven without the SDK by pre-encoded binlogs,
``--ceiling-batch`` per call, ``--ceiling-inflight`` calls at a time.
``ratio`` = value / ceiling. ``sdk_ceiling`` is the same producers and SDK
driving that minimal server: what the producer side alone allows. With
``--repeat N`` the pump and the ceiling are measured N times, alternating,
and the best run of each is reported (``runs`` lists them all).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from bench.cpu import Counters, CpuMeter, listener_pid, scraped
from bench.pump_ceiling import drive_batched
from bench.result import best_of, machine
from bench.tso import meta_process
from bridge.binlog import Binlog, BinlogType, commit, prewrite
from bridge.proto import binlog_pb2
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig, PumpsClient

INSERT = binlog_pb2.MutationType.Insert
PREWRITE = binlog_pb2.Prewrite  # a module constant: the enum wrapper's lookup costs ~1 us per binlog
READY = re.compile(r"(?:pump|ceiling) ready: node_id=\S+ addr=(\S+)(?: status=(\S+))?")
PUMP_TOML = """\
addr = "127.0.0.1:0"
node-id = "bench-pump"
meta = "{meta}"
data-dir = "{data_dir}"
status-addr = "127.0.0.1:0"
stop-write-at-available-space = 0
[storage]
sync = true
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring time per phase (default 10)")
    parser.add_argument("--concurrency", type=int, default=1024, help="producer tasks (default 1024)")
    parser.add_argument("--size", type=int, default=1024, help="Prewrite binlog bytes (default 1024)")
    parser.add_argument(
        "--ceiling-batch",
        type=int,
        default=100,
        help="binlogs per call of the ceiling's driver (default 100)",
    )
    parser.add_argument(
        "--ceiling-inflight", type=int, default=1, help="concurrent calls of the ceiling's driver (default 1)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="producer threads through one PumpsClient instead of --concurrency asyncio tasks (default 0)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of pump then ceiling; the best of each is kept (default 1)",
    )
    parser.add_argument(
        "--no-sdk-ceiling", action="store_true", help="skip the SDK drive against the ceiling server"
    )


def progress(message: str) -> None:
    print(f"bench pump: {message}", file=sys.stderr, flush=True)


class TsoBatcher:
    """Fresh timestamps for many tasks: requests waiting together share one call.

    (The other benchmarks' producers use it; the SDK now does the same itself.)"""

    def __init__(self, client: AsyncPumpsClient) -> None:
        self._client = client
        self._waiting: list[asyncio.Future[int]] = []
        self._busy = False
        self._server: asyncio.Future[None] | None = None

    async def get(self) -> int:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        if not self._busy:
            self._busy = True
            self._server = asyncio.ensure_future(self._serve())
        return await future

    async def _serve(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    first = await self._client.get_timestamps(len(batch))
                except Exception as exc:  # noqa: BLE001 - handed to every waiting caller
                    for future in batch:
                        future.set_exception(exc)
                    continue
                for offset, future in enumerate(batch):
                    future.set_result(first + offset)
        finally:
            self._busy = False


def prewrite_value_of_size(size: int) -> bytes:
    """A serialized PrewriteValue (one inserted row) that makes a Prewrite of about ``size`` bytes."""
    empty = prewrite(1 << 60, [binlog_pb2.TableMutation(table_id=1, inserted_rows=[b""], sequence=[INSERT])])
    row = b"r" * max(size - empty.ByteSize(), 0)
    mutation = binlog_pb2.TableMutation(table_id=1, inserted_rows=[row], sequence=[INSERT])
    return binlog_pb2.PrewriteValue(mutations=[mutation]).SerializeToString()


@dataclass
class Tally:
    measuring: bool = False
    acked: int = 0
    latencies: list[float] = field(default_factory=list)

    def record(self, began: float, measuring: bool) -> None:
        """Count one acknowledged binlog that took since ``began``, if ``measuring``."""
        if measuring:
            self.acked += 1
            self.latencies.append(time.perf_counter() - began)


async def producer(client: AsyncPumpsClient, value: bytes, tally: Tally, end: list[float]) -> None:
    """Transactions until ``end[0]``: the Prewrite, then the Commit with a ts taken after its ack."""
    while time.perf_counter() < end[0]:
        start_ts = await client.get_timestamp()
        began = time.perf_counter()
        await client.write_binlog(Binlog(tp=PREWRITE, start_ts=start_ts, prewrite_value=value))
        tally.record(began, tally.measuring)
        commit_ts = await client.get_timestamp()
        began = time.perf_counter()
        await client.write_binlog(commit(start_ts, commit_ts))
        tally.record(began, tally.measuring)


def thread_producer(client: PumpsClient, value: bytes, shared: Tally, mine: Tally, end: list[float]) -> None:
    """:func:`producer` for a thread: the same transactions through the blocking client."""
    while time.perf_counter() < end[0]:
        start_ts = client.get_timestamp()
        began = time.perf_counter()
        client.write_binlog(Binlog(tp=PREWRITE, start_ts=start_ts, prewrite_value=value))
        mine.record(began, shared.measuring)
        commit_ts = client.get_timestamp()
        began = time.perf_counter()
        client.write_binlog(commit(start_ts, commit_ts))
        mine.record(began, shared.measuring)


def drive_threads(
    meta_addr: str, args: argparse.Namespace, label: str, meter: CpuMeter | None, counters: Counters
) -> dict[str, Any]:
    """:func:`drive` with ``--threads`` producer threads sharing one :class:`PumpsClient`."""
    shared, tallies = Tally(), [Tally() for _ in range(args.threads)]
    with PumpsClient(meta_addr, PumpClientConfig()) as client:
        warmup = min(2.0, args.seconds / 4)
        end = [time.perf_counter() + warmup + args.seconds + 3600]
        value = prewrite_value_of_size(args.size)
        threads = [
            threading.Thread(target=thread_producer, args=(client, value, shared, mine, end), daemon=True)
            for mine in tallies
        ]
        for thread in threads:
            thread.start()
        time.sleep(warmup)
        shared.measuring = True
        calls_before = batch_calls()
        if meter is not None:
            meter.start()
        counters.start()
        measured_from = time.perf_counter()
        time.sleep(args.seconds)
        shared.measuring = False
        elapsed = time.perf_counter() - measured_from
        if meter is not None:
            meter.stop()
        counted = counters.stop(0, elapsed)
        calls, binlogs = (a - b for a, b in zip(batch_calls(), calls_before, strict=True))
        end[0] = 0.0
        for thread in threads:
            thread.join()
    acked = sum(t.acked for t in tallies)
    latencies = [x for t in tallies for x in t.latencies]
    return figures_of(label, acked, elapsed, latencies, calls, binlogs, meter, counted)


async def drive(
    meta_addr: str,
    args: argparse.Namespace,
    label: str,
    meter: CpuMeter | None = None,
    pump_status: str = "",
) -> dict[str, Any]:
    """Run the producers against whatever pump the registry lists; figures after warm-up, with the
    calls and fsyncs behind them per second (:func:`call_counters`)."""
    counters = Counters(call_counters(pump_status))
    if args.threads:
        return await asyncio.to_thread(drive_threads, meta_addr, args, label, meter, counters)
    config = PumpClientConfig()  # the defaults a producer gets
    tally = Tally()
    async with AsyncPumpsClient(meta_addr, config) as client:
        warmup = min(2.0, args.seconds / 4)
        end = [time.perf_counter() + warmup + args.seconds + 3600]
        value = prewrite_value_of_size(args.size)
        tasks = [asyncio.ensure_future(producer(client, value, tally, end)) for _ in range(args.concurrency)]
        await asyncio.sleep(warmup)
        tally.measuring = True
        calls_before = batch_calls()
        if meter is not None:
            meter.start()
        counters.start()
        measured_from = time.perf_counter()
        await asyncio.sleep(args.seconds)
        tally.measuring = False
        elapsed = time.perf_counter() - measured_from
        if meter is not None:
            meter.stop()
        counted = counters.stop(0, elapsed)
        calls, binlogs = (a - b for a, b in zip(batch_calls(), calls_before, strict=True))
        end[0] = 0.0
        await asyncio.gather(*tasks)
    return figures_of(label, tally.acked, elapsed, tally.latencies, calls, binlogs, meter, counted)


def figures_of(
    label: str,
    acked: int,
    elapsed: float,
    latencies: Sequence[float],
    calls: float,
    binlogs: float,
    meter: CpuMeter | None,
    counted: dict[str, dict[str, float | None]],
) -> dict[str, Any]:
    rate = acked / elapsed
    progress(f"{label}: {acked:,} binlogs in {elapsed:.1f}s = {rate:,.0f}/s")
    figures: dict[str, Any] = {"rate": rate, **percentiles(latencies)}
    figures["binlogs_per_call"] = round(binlogs / calls, 1) if calls else 0.0
    if meter is not None:
        figures["cpu_us_per_binlog"] = meter.per_row_us(max(acked, 1))
    figures["per_second"] = counted["per_second"]
    return figures


def call_counters(pump_status: str) -> dict[str, Callable[[], float | None]]:
    """What the producers' binlogs cost in calls: the SDK's WriteBinlogs and TSO calls (this
    process), and with the pump's status address its write calls, group commits and fsyncs."""
    counters: dict[str, Callable[[], float | None]] = {
        "write_binlogs_calls": lambda: REGISTRY.get_sample_value("bridge_pump_client_batch_size_count"),
        "tso_calls": lambda: REGISTRY.get_sample_value("bridge_pump_client_tso_calls_total"),
    }
    if pump_status:
        url = f"http://{pump_status}/metrics"
        for name, metric in (
            ("pump_write_calls", "bridge_pump_write_calls_total"),
            ("pump_group_commits", "bridge_pump_write_batch_size_count"),
            ("pump_fsyncs", "bridge_pump_storage_fsyncs_total"),
        ):
            counters[name] = scraped(metric, url)
    return counters


def batch_calls() -> tuple[float, float]:
    """WriteBinlogs calls the SDK made in this process so far, and the binlogs they carried."""
    calls = REGISTRY.get_sample_value("bridge_pump_client_batch_size_count") or 0.0
    return calls, REGISTRY.get_sample_value("bridge_pump_client_batch_size_sum") or 0.0


def percentiles(latencies: Sequence[float]) -> dict[str, float]:
    if len(latencies) < 2:
        return {"p50_ms": 0.0, "p99_ms": 0.0}
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"p50_ms": round(cuts[49] * 1000, 3), "p99_ms": round(cuts[98] * 1000, 3)}


@contextlib.asynccontextmanager
async def child(argv: list[str], what: str) -> AsyncIterator[tuple[str, int, str]]:
    """A child process that prints a ready line naming its address; yields the address, the pid
    and the status address (empty when the line names none)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        while line := (await asyncio.wait_for(proc.stderr.readline(), 60)).decode(errors="replace"):
            lines.append(line)
            if m := READY.search(line):
                break
        else:
            raise RuntimeError(f"{what} exited before it was ready:\n" + "".join(lines[-30:]))
        drain = asyncio.ensure_future(_drain(proc.stderr))
        yield m.group(1), proc.pid, m.group(2) or ""
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
    await drain


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


def meter_for(**pids: int | None) -> CpuMeter:
    return CpuMeter({"bench": [os.getpid()], **{name: [pid] for name, pid in pids.items()}})


def meta_pid(meta_addr: str) -> int | None:
    return listener_pid(int(meta_addr.rpartition(":")[2]))


async def measure_pump(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    async with meta_process(str(tmp / "meta")) as meta_addr:
        config = tmp / "pump.toml"
        config.write_text(PUMP_TOML.format(meta=meta_addr, data_dir=tmp / "pump"))
        argv = [sys.executable, "-m", "bridge.cli", "--log-level", "warning", "pump", "--config", str(config)]
        async with child(argv, "binlog-bridge pump") as (addr, pid, status):
            progress(f"pump at {addr}, data in {tmp / 'pump'}")
            meter = meter_for(pump=pid, meta=meta_pid(meta_addr))
            return await drive(meta_addr, args, "pump", meter, pump_status=status)


async def measure_ceiling(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The batched drive of the minimal server, then (unless skipped) the SDK's drive of it."""
    async with meta_process(str(tmp / "meta-ceiling")) as meta_addr:
        argv = [
            sys.executable,
            "-m",
            "bench.pump_ceiling",
            "--meta",
            meta_addr,
            "--file",
            str(tmp / "ceiling.log"),
        ]
        async with child(argv, "the ceiling server") as (addr, pid, _):
            progress(f"ceiling server at {addr}")
            value = prewrite_value_of_size(args.size)
            payloads = [
                Binlog(tp=BinlogType.Prewrite, start_ts=ts, prewrite_value=value).SerializeToString()
                for ts in range(1, args.ceiling_batch + 1)
            ]
            meter = meter_for(server=pid)
            count, elapsed = await drive_batched(
                addr,
                payloads,
                batch=args.ceiling_batch,
                inflight=args.ceiling_inflight,
                seconds=args.seconds,
                warmup=min(1.0, args.seconds / 4),
                meter=meter,
            )
            rate = count / elapsed
            shape = f"{args.ceiling_batch} binlogs per call, {args.ceiling_inflight} in flight"
            progress(f"ceiling ({shape}): {count:,} binlogs in {elapsed:.1f}s = {rate:,.0f}/s")
            ceiling: dict[str, Any] = {"rate": rate, "cpu_us_per_binlog": meter.per_row_us(max(count, 1))}
            if not args.no_sdk_ceiling:
                ceiling["sdk"] = await drive(
                    meta_addr, args, "SDK against the ceiling server", meter_for(server=pid)
                )
            return ceiling


async def measure(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``--repeat`` rounds of the pump's drive then the ceiling's, each in fresh processes and dirs."""
    pumps, ceilings = [], []
    for round_no in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix=f"bench-pump-{round_no}-") as tmp:
            pumps.append(await measure_pump(args, Path(tmp)))
            ceilings.append(await measure_ceiling(args, Path(tmp)))
    return pumps, ceilings


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.seconds <= 0 or args.concurrency < 1 or not 64 <= args.size <= 64 << 20 or args.repeat < 1:
        raise SystemExit("bench pump: --seconds > 0, --concurrency >= 1, --size 64..67108864, --repeat >= 1")
    if args.threads < 0:
        raise SystemExit("bench pump: --threads >= 0")
    if args.ceiling_batch < 1 or args.ceiling_inflight < 1:
        raise SystemExit("bench pump: --ceiling-batch >= 1, --ceiling-inflight >= 1")
    pumps, ceilings = asyncio.run(measure(args))
    result = best_of(
        "pump", "binlogs/s", [p["rate"] for p in pumps], [c["rate"] for c in ceilings], "ceiling"
    )
    result["runs"]["pump"] = result["runs"].pop("sink")
    pump = max(pumps, key=lambda p: float(p["rate"]))
    ceiling = max(ceilings, key=lambda c: float(c["rate"]))
    result.update(
        p50_ms=pump["p50_ms"],
        p99_ms=pump["p99_ms"],
        binlogs_per_call=pump["binlogs_per_call"],
        cpu_us_per_binlog={"sdk_to_pump": pump["cpu_us_per_binlog"], "ceiling": ceiling["cpu_us_per_binlog"]},
        per_second={"sdk_to_pump": pump["per_second"]},
    )
    sdk_runs = [c["sdk"] for c in ceilings if "sdk" in c]
    if sdk_runs:
        sdk = max(sdk_runs, key=lambda s: float(s["rate"]))
        result["sdk_ceiling"] = round(sdk["rate"], 1)
        result["sdk_ceiling_ratio"] = float(f"{result['value'] / sdk['rate']:.4g}") if sdk["rate"] else 0.0
        result["sdk_ceiling_p50_ms"], result["sdk_ceiling_p99_ms"] = sdk["p50_ms"], sdk["p99_ms"]
        result["cpu_us_per_binlog"]["sdk_to_ceiling_server"] = sdk["cpu_us_per_binlog"]
        result["per_second"]["sdk_to_ceiling_server"] = sdk["per_second"]
        result["runs"]["sdk_ceiling"] = [round(s["rate"], 1) for s in sdk_runs]
    params = {
        k: getattr(args, k)
        for k in ("seconds", "concurrency", "threads", "size", "ceiling_batch", "ceiling_inflight", "repeat")
    }
    result["params"] = params
    result.update(machine())
    result["ceiling_is"] = (
        f"pre-encoded binlogs, {args.ceiling_batch} per WriteBinlogs call, {args.ceiling_inflight} call(s) "
        "in flight, over plain gRPC stubs to a server that appends them to a file and fsyncs once per call"
    )
    return result
