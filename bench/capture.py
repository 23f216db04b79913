"""Row changes per second `binlog-bridge capture` moves from a MariaDB binlog into the pumps,
against ``mysql-replication`` decoding the same binlog without forwarding it.

Needs a binlog source (``--source``, a server started with ``--log-bin --server-id=1
--binlog-format=ROW --binlog-row-image=FULL --binlog-row-metadata=FULL``). Starts
``binlog-bridge meta`` and three pumps (:func:`bench.drainer.start_cluster`, a temporary data
dir) and creates a database of this run's own (``bench_capture_<random>``, dropped at the end)
with one 8-column table of mixed types.

1. A ``binlog-bridge capture`` child (``snapshot = "never"``) announces the table and is
   stopped: its journal now holds the position P0 the measured binlog starts at.
2. A plain pymysql client writes ``--rows`` inserts, then updates every row, then deletes
   every row, ``--rows-per-txn`` rows per statement and transaction: 3 x ``--rows`` row
   changes in the binlog after P0, up to the end position E.

``value``: the capture child started again on its journal: row changes per second from the
moment its ``GET /status`` says ``streaming`` until its position reaches E (each transaction
read, decoded, converted, encoded and written to the pumps two-phase with its journal records).

``ceiling``: in the same run, ``BinLogStreamReader`` reading P0..E of the same binlog with
the capture's event selection, decoding every row (``event.rows``) and doing nothing with
it; measured before and after the value, the faster counts. ``ratio`` = value / ceiling.

``cpu_us_per_row`` (informational): CPU µs per row change of the capture child (all its threads)
and of the decoder (its thread, the less of its two runs); ``cpu_ratio`` = decoder / capture, the
share of the capture's CPU that is decoding. On a busy 2-core machine the rates swing with what
else runs; the CPU per row moves much less, and for a reader bound to one core (the GIL) it is the
ratio the rates tend to when the cores are free.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader  # type: ignore[import-untyped]

from bench.cpu import Counters, CpuMeter, scraped
from bench.drainer import start_cluster
from bridge import mysql
from bridge.apps.capture.shadow import shadow_name
from bridge.apps.capture.source import EVENTS
from bridge.apps.demo.cluster import free_port
from bridge.dsn import Dsn, parse_dsn
from bridge.errors import ConfigError

COLUMNS = (
    "(id INT NOT NULL PRIMARY KEY, a BIGINT NOT NULL, b VARCHAR(40), c DECIMAL(12,2), "
    "d DATETIME(3), e DOUBLE, f TEXT, g INT)"
)
CAPTURE_TOML = """\
[capture]
upstream = "{upstream}"
meta = "{meta}"
data-dir = "{data_dir}"
server-id = {server_id}
databases = ["{db}"]
snapshot = "never"
status-addr = "127.0.0.1:{status_port}"
fsync = {fsync}
"""


POLL_NEAR, POLL_FAR = 0.05, 0.25  # seconds between two GET /status (near the end, before)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", default="mysql://root@127.0.0.1:3306/", help="a binlog-enabled server")
    parser.add_argument("--rows", type=int, default=50_000, help="rows inserted, updated, deleted")
    parser.add_argument("--rows-per-txn", type=int, default=500, help="rows per statement/transaction")
    parser.add_argument("--no-fsync", action="store_true", help="capture.fsync = false")
    parser.add_argument("--timeout", type=float, default=600.0, help="hang guard, seconds")


def progress(message: str) -> None:
    print(f"bench capture: {message}", file=sys.stderr, flush=True)


def source_sql(dsn: Dsn, *statements: str) -> list[Any]:
    conn = mysql.connect(dsn, database=None, autocommit=True)
    try:
        with conn.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
            return list(cursor.fetchall())
    finally:
        conn.close()


def binlog_end(dsn: Dsn) -> tuple[str, int]:
    row = source_sql(dsn, "SHOW MASTER STATUS")[0]
    return str(row[0]), int(row[1])


def write_changes(dsn: Dsn, db: str, rows: int, per_txn: int) -> int:
    """Inserts, updates and deletes of ``rows`` rows; the number of row changes."""
    conn = mysql.connect(dsn, database=db, autocommit=True)
    try:
        with conn.cursor() as cursor:
            for first in range(0, rows, per_txn):
                last = min(rows, first + per_txn)
                values = ", ".join(
                    f"({i}, {i * 7}, 'name-{i}', {i}.25, '2024-01-02 03:04:05.{i % 1000:03d}', {i}.5, "
                    f"'text of row {i}', {i % 97})"
                    for i in range(first, last)
                )
                cursor.execute(f"INSERT INTO t VALUES {values}")  # noqa: S608 - generated numbers and text
            for first in range(0, rows, per_txn):
                between = f"id BETWEEN {first} AND {first + per_txn - 1}"
                cursor.execute(f"UPDATE t SET a = a + 1, g = g + 1 WHERE {between}")  # noqa: S608
            for first in range(0, rows, per_txn):
                cursor.execute(f"DELETE FROM t WHERE id BETWEEN {first} AND {first + per_txn - 1}")  # noqa: S608
    finally:
        conn.close()
    return 3 * rows


def measure_ceiling(dsn: Dsn, db: str, start: tuple[str, int], end: tuple[str, int]) -> tuple[float, float]:
    """Row changes/s of the bare decoder over ``start``..``end``, and its CPU µs per row change
    (this thread's: the decoding, not the server's work)."""
    args = dsn.pymysql_args(database=None)
    settings = {k: v for k, v in args.items() if k != "database" and v is not None}
    stream = BinLogStreamReader(
        connection_settings=settings, server_id=secrets.randbelow(1 << 30) + 1000, blocking=True,
        only_events=EVENTS, only_schemas=[db], is_mariadb=False, resume_stream=True,
        log_file=start[0], log_pos=start[1], enable_logging=False,
    )  # fmt: skip
    changes = 0
    began, cpu = time.perf_counter(), time.thread_time()
    try:
        for event in stream:
            rows = getattr(event, "rows", None)
            if rows is not None:
                changes += len(rows)
            if (stream.log_file, stream.log_pos) >= end:
                break
    finally:
        stream.close()
    elapsed, cpu = time.perf_counter() - began, time.thread_time() - cpu
    return changes / elapsed, round(cpu * 1e6 / max(changes, 1), 1)


def status(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as reply:
        return dict(json.loads(reply.read()))


def run_capture(
    config: Path,
    port: int,
    until: tuple[str, int] | None,
    timeout: float,
    start: tuple[str, int] | None = None,
    pump_statuses: Sequence[str] = (),
    rows: int = 0,
) -> tuple[float, Any, dict[str, Any]]:
    """Run the capture child until it streams (and, with ``until``, reached it, from ``start``); seconds,
    CPU and the calls behind the rows (:func:`call_counters`) over the same window."""
    child = subprocess.Popen(
        [sys.executable, "-m", "bridge.cli", "--log-level", "warning", "capture", "--config", str(config)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    meter = CpuMeter({"capture": [child.pid]})
    counters = Counters(call_counters(port, pump_statuses))
    deadline = time.monotonic() + timeout
    try:
        began = _wait(port, child, deadline, lambda s: s["state"] == "streaming")
        meter.start()
        counters.start()
        if until is not None:
            reached = lambda s: (s["position"]["file"], s["position"]["offset"]) >= until  # noqa: E731
            _wait(port, child, deadline, reached, lambda s: _pause(s, start, until))
        elapsed = time.perf_counter() - began
        meter.stop()
        counted = counters.stop(rows, elapsed)  # read while the capture still answers
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=60)
    return elapsed, meter, counted


def call_counters(port: int, pump_statuses: Sequence[str]) -> dict[str, Any]:
    """The capture's transactions and the SDK calls it made for them (its ``/metrics``), and the
    pumps' write calls and fsyncs (theirs)."""
    capture = f"http://127.0.0.1:{port}/metrics"
    pumps = [f"http://{addr}/metrics" for addr in pump_statuses]
    return {
        "capture_transactions": scraped("bridge_capture_transactions_total", capture),
        "write_binlogs_calls": scraped("bridge_pump_client_batch_size_count", capture),
        "tso_calls": scraped("bridge_pump_client_tso_calls_total", capture),
        "pump_write_calls": scraped("bridge_pump_write_calls_total", *pumps),
        "pump_fsyncs": scraped("bridge_pump_storage_fsyncs_total", *pumps),
    }


def _pause(state: dict[str, Any], start: tuple[str, int] | None, end: tuple[str, int]) -> float:
    """Seconds to the next poll: 0.05 in the last tenth of the range (and when the capture's position
    is not in the end's binlog file), 0.25 before. Each poll costs the capture ~1 ms of CPU in its
    status thread; at 20 polls/s that was ~3 µs per row change of its measured CPU."""
    file, offset = state["position"]["file"], state["position"]["offset"]
    if start is None or file != end[0] or start[0] != end[0]:
        return POLL_NEAR
    return POLL_FAR if offset < start[1] + 0.9 * (end[1] - start[1]) else POLL_NEAR


def _wait(
    port: int,
    child: subprocess.Popen[bytes],
    deadline: float,
    done: Any,
    pause: Any = lambda state: POLL_NEAR,
) -> float:
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise SystemExit(f"bench capture: the capture exited with {child.returncode}")
        wait = POLL_NEAR
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            state = status(port)
            if done(state):
                return time.perf_counter()
            wait = pause(state)
        time.sleep(wait)  # the capture answers each poll: keep them rare
    raise SystemExit("bench capture: timed out (raise --timeout)")


async def measure(args: argparse.Namespace, dsn: Dsn) -> dict[str, Any]:
    db = f"bench_capture_{secrets.token_hex(4)}"
    server_id = secrets.randbelow(1 << 30) + 1000
    source_sql(dsn, f"CREATE DATABASE `{db}`", f"CREATE TABLE `{db}`.t {COLUMNS}")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-capture-") as tmp:
            async with contextlib.AsyncExitStack() as stack:
                pump_statuses: list[str] = []
                meta_addr, _ = await start_cluster(stack, Path(tmp), statuses=pump_statuses)
                port = free_port()
                config = Path(tmp) / "capture.toml"
                config.write_text(
                    CAPTURE_TOML.format(
                        upstream=f"mysql://{dsn.user}@{dsn.host}:{dsn.port}/?ssl-mode=disabled",
                        meta=meta_addr, data_dir=Path(tmp) / "capture", server_id=server_id,
                        db=db, status_port=port, fsync="false" if args.no_fsync else "true",
                    )
                )  # fmt: skip
                run_capture(config, port, None, args.timeout)
                start = binlog_end(dsn)
                changes = write_changes(dsn, db, args.rows, args.rows_per_txn)
                end = binlog_end(dsn)
                progress(f"{changes} row changes in the binlog from {start} to {end}")
                decoded = [measure_ceiling(dsn, db, start, end)]
                elapsed, meter, calls = run_capture(
                    config, port, end, args.timeout, start, pump_statuses, changes
                )
                decoded.append(measure_ceiling(dsn, db, start, end))
    finally:
        shadow = shadow_name(server_id, db)
        source_sql(dsn, f"DROP DATABASE IF EXISTS `{db}`", f"DROP DATABASE IF EXISTS `{shadow}`")
    cpu = {**meter.per_row_us(changes), "decode_only": min(c for _, c in decoded)}
    ceilings = [rate for rate, _ in decoded]
    return {"value": changes / elapsed, "ceilings": ceilings, "elapsed": elapsed, "cpu": cpu, "calls": calls}


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.rows < 1 or args.rows_per_txn < 1 or args.timeout <= 0:
        raise SystemExit("bench capture: --rows, --rows-per-txn and --timeout must be positive")
    try:
        dsn = parse_dsn(args.source, key="--source").with_password_from_env()
    except ConfigError as exc:
        raise SystemExit(f"bench capture: {exc}") from None
    try:
        result = asyncio.run(measure(args, dsn))
    except pymysql.err.MySQLError as exc:
        raise SystemExit(f"bench capture: the source failed: {exc}") from None
    value, ceiling = result["value"], max(result["ceilings"])
    return {
        "name": "capture",
        "value": round(value, 1),
        "unit": "row changes/s",
        "ceiling": round(ceiling, 1),
        "ratio": float(f"{value / ceiling:.4g}") if ceiling else 0.0,
        "elapsed": round(result["elapsed"], 3),
        "runs": {"capture": round(value, 1), "decode_only": [round(c, 1) for c in result["ceilings"]]},
        "cpu_us_per_row": result["cpu"],
        # informational, less sensitive to a busy machine than the rates: the decoder's CPU per row
        # change over the capture child's (every thread: decoding, converting, encoding, writing)
        "cpu_ratio": _cpu_ratio(result["cpu"]),
        **result["calls"],  # per_second, per_1000_rows
        "params": {"rows": args.rows, "rows_per_txn": args.rows_per_txn, "fsync": not args.no_fsync},
        "ceiling_is": "mysql-replication decoding the same binlog range (every row event's rows), "
        "nothing forwarded",
    }


def _cpu_ratio(cpu: dict[str, Any]) -> float | None:
    capture, decode = cpu.get("capture"), cpu.get("decode_only")
    return round(decode / capture, 3) if capture and decode else None
