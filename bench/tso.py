"""Timestamps per second through the meta service, against the oracle alone.

Starts ``binlog-bridge meta`` (local backend, a temporary data dir, its own
process) unless ``--meta`` names a running one, then runs ``--concurrency``
callers, each asking for ``--batch`` timestamps per GetTimestamps call, for
``--seconds``. The ceiling is the same loop calling the timestamp oracle
in-process (same batch, same concurrency, a local store in a temporary dir):
what allocation costs without gRPC. ``value`` and ``ceiling`` are
timestamps/s; ``ratio`` = value / ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from bridge.apps.meta.local_store import LocalStore
from bridge.apps.meta.oracle import TimestampOracle
from bridge.meta.client import MetaClient

READY = re.compile(r"meta ready: addr=(\S+)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=5.0, help="measuring time per phase (default 5)")
    parser.add_argument("--batch", type=int, default=1, help="timestamps per request (default 1)")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent callers (default 16)")
    parser.add_argument(
        "--meta", default="", help="measure this running meta service instead of starting one"
    )


def progress(message: str) -> None:
    print(f"bench tso: {message}", file=sys.stderr, flush=True)


async def drive(
    allocate: Callable[[int], Awaitable[int]], seconds: float, batch: int, concurrency: int, label: str
) -> float:
    """Run ``concurrency`` callers for ``seconds``; timestamps per second."""
    warmup_end = time.perf_counter() + min(1.0, seconds / 5)
    counts = [0] * concurrency

    async def caller(i: int) -> None:
        last = 0
        while time.perf_counter() < end:
            first = await allocate(batch)
            if first <= last:
                raise AssertionError(f"timestamps went backwards: {first} after {last}")
            last = first + batch - 1
            if time.perf_counter() >= warmup_end:
                counts[i] += batch

    end = warmup_end + seconds
    tasks = [asyncio.create_task(caller(i)) for i in range(concurrency)]
    while not all(t.done() for t in tasks):
        await asyncio.wait(tasks, timeout=1.0)
        progress(f"{label}: {sum(counts):,} timestamps so far")
    await asyncio.gather(*tasks)
    return sum(counts) / seconds


@contextlib.asynccontextmanager
async def meta_process(data_dir: str) -> AsyncIterator[str]:
    """A ``binlog-bridge meta`` child on a free port; yields its address."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bridge.cli", "--log-level", "warning", "meta",
        "--data-dir", data_dir, "--addr", "127.0.0.1:0",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        addr = await asyncio.wait_for(_ready_addr(proc.stderr), 30)
        drain = asyncio.create_task(_drain(proc.stderr))
        yield addr
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
    await drain


async def _ready_addr(stream: asyncio.StreamReader) -> str:
    lines: list[str] = []
    while line := (await stream.readline()).decode(errors="replace"):
        lines.append(line)
        if m := READY.search(line):
            return m.group(1)
    raise RuntimeError("binlog-bridge meta exited before it was ready:\n" + "".join(lines))


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def measure_service(addr: str, args: argparse.Namespace) -> float:
    async with MetaClient(addr, timeout=10) as client:
        return await drive(client.get_timestamps, args.seconds, args.batch, args.concurrency, "service")


async def measure_oracle(args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-tso-oracle-") as tmp:
        store = LocalStore(tmp)
        await store.open()
        oracle = TimestampOracle(store.save_tso_limit)
        await oracle.start(await store.load_tso_limit())
        try:
            return await drive(
                oracle.allocate, args.seconds, args.batch, args.concurrency, "oracle in-process"
            )
        finally:
            await oracle.stop()
            await store.close()


async def measure(args: argparse.Namespace) -> tuple[float, float]:
    if args.meta:
        value = await measure_service(args.meta, args)
    else:
        with tempfile.TemporaryDirectory(prefix="bench-tso-meta-") as tmp:
            async with meta_process(tmp) as addr:
                progress(f"meta service started at {addr}")
                value = await measure_service(addr, args)
    return value, await measure_oracle(args)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if not 1 <= args.batch <= 1 << 18 or args.concurrency < 1 or args.seconds <= 0:
        raise SystemExit("bench tso: --batch must be 1..262144, --concurrency >= 1, --seconds > 0")
    value, ceiling = asyncio.run(measure(args))
    return {
        "name": "tso",
        "value": round(value, 1),
        "unit": "timestamps/s",
        "ceiling": round(ceiling, 1),
        "ratio": float(f"{value / ceiling:.4g}") if ceiling else 0.0,  # 4 significant digits
        "requests_per_s": round(value / args.batch, 1),
        "params": {"seconds": args.seconds, "batch": args.batch, "concurrency": args.concurrency},
        "ceiling_is": "the same allocation loop on the TSO oracle in-process (no gRPC)",
    }
