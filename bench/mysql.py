"""Rows per second a drainer applies to MariaDB through the MySQL sink, against a plain multi-row INSERT.

Starts ``binlog-bridge meta`` and three ``binlog-bridge pump`` children (a
temporary data dir; :func:`bench.drainer.start_cluster`), then preloads them
through the real client SDK: a CREATE TABLE DDL binlog for an 8-column table of
mixed types (:func:`bench.drainer.table_schema`, in a database of this run's
own), then ``--rows`` row changes in transactions of ``--rows-per-txn``, each drawn
from ``--mix`` (inserts of new rows, updates and deletes of live ones; with
``--txn-kind`` one draw per transaction). Each of
the ``--concurrency`` preloading tasks owns its keys and commits its
transactions one after another, so an update or delete always follows the
insert of its row in commit order. Every Commit is acknowledged before anything
is measured.

``value``: a ``binlog-bridge drainer`` child (``[sink] type = "mysql"`` into
``--dsn`` with ``--worker-count``, ``--worker-processes``, ``--batch-rows``, ``--txn-rows``; safe mode
off unless ``--safe-mode``, and no safe-mode window after the start unless
``--safe-mode-duration``, so the steady state is measured; file checkpoint;
``initial-commit-ts = 0``) catches up; row changes per
second from its ready line until ``GET /status`` shows ``checkpoint_ts`` at or
past the last commit_ts (start-up, the merge, decoding, translation, the
downstream's work and the checkpoint interval are all inside). The downstream
table is then checked against the preload's model (row count and column sums).

``ceiling``: in the same run, against the same server, one pymysql connection
inserting the same number of rows of the same shape (the preload's value
generator) into a fresh table with multi-row ``INSERT ... VALUES (..),(..)`` of
``--ceiling-rows`` rows per statement, committing each statement. ``ratio`` =
value / ceiling. The ceiling has no updates or deletes (they cost the server
more than inserts), so a mix with many of them bounds the ratio below 1.

``replay`` (a second reference, not the ceiling): one pymysql connection
applying the preload's own changes in the order they were made to a fresh table
— runs of inserts as multi-row INSERTs, runs of deletes as one ``DELETE ...
IN``, each update one ``UPDATE`` (a run sent as one multi-statement round
trip), a commit every ``--txn-rows`` — what a plain single-connection applier
of the same stream reaches; ``replay_ratio`` = value / replay. Its table is
checked against the model too.

The run's database (``bench_mysql_<random>``) is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pymysql
from pymysql.constants import CLIENT

from bench import mysql_workload as workload
from bench.calls import drainer_counters
from bench.cpu import Counters, CpuMeter, cpu_seconds, listener_pid, local_listener_pid
from bench.drainer import (
    DRAINER_READY,
    PUMPS,
    drainer_toml,
    fetch_metrics,
    mysql_sink_faults,
    peak_rss_mib,
    row_values,
    spawn,
    start_cluster,
    table_schema,
    wait_checkpoint,
    write_txn,
)
from bench.mysql_stages import Sample, server_costs, stage_costs
from bench.mysql_workload import KINDS, KeyOwner, Model, bench_row, parse_mix, txn_sizes
from bench.pump import TsoBatcher
from bridge import mysql
from bridge.binlog import ddl_prewrite, prewrite
from bridge.dsn import Dsn, parse_dsn
from bridge.errors import ConfigError
from bridge.proto import row_pb2
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig
from bridge.rowcodec import RowCodec

DSN_ENV = "BRIDGE_TEST_MYSQL_DSN"
DEFAULT_DSN = "mysql://root@127.0.0.1:3306/"
COLUMNS = ("id", "customer", "price", "weight", "sku", "created", "flag", "note")
CREATE_COLUMNS = (
    "`id` BIGINT NOT NULL PRIMARY KEY, `customer` INT NULL, `price` DECIMAL(12,2) NULL, "
    "`weight` DOUBLE NULL, `sku` VARCHAR(64) NULL, `created` DATETIME(6) NULL, `flag` TINYINT NULL, "
    "`note` TEXT NULL"
)
MYSQL_SINK_TOML = """\
type = "mysql"
[sink.mysql]
dsn = "{dsn}"
worker-count = {worker_count}
worker-processes = {worker_processes}
batch-rows = {batch_rows}
txn-rows = {txn_rows}
safe-mode = {safe_mode}
safe-mode-duration = "{safe_mode_duration}s"
progress-schema = "{database}"
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=200_000, help="row changes preloaded (default 200000)")
    parser.add_argument(
        "--rows-per-txn", type=int, default=10, help="row changes per transaction (default 10)"
    )
    parser.add_argument(
        "--mix",
        default="insert=60,update=30,delete=10",
        help="weights of the row changes (default insert=60,update=30,delete=10)",
    )
    parser.add_argument(
        "--txn-kind",
        action="store_true",
        help="every change of a transaction of one kind drawn from the mix (default: each change draws)",
    )
    parser.add_argument("--worker-count", type=int, default=16, help="sink.mysql.worker-count (default 16)")
    parser.add_argument(
        "--worker-processes",
        type=workload.processes_arg,
        default="auto",
        help="sink.mysql.worker-processes: child processes for the keyed workers, 0 for threads "
        '(default "auto", resolved here as the sink resolves it)',
    )
    parser.add_argument(
        "--flush-interval",
        type=float,
        default=0.1,
        help="the drainer's flush-interval in seconds (default 0.1: the tail of the run stays short)",
    )
    parser.add_argument("--batch-rows", type=int, default=500, help="sink.mysql.batch-rows (default 500)")
    parser.add_argument("--txn-rows", type=int, default=4096, help="sink.mysql.txn-rows (default 4096)")
    parser.add_argument(
        "--safe-mode",
        action="store_true",
        help="sink.mysql.safe-mode = true: every change as REPLACE / DELETE + REPLACE (default off)",
    )
    parser.add_argument(
        "--safe-mode-duration",
        type=float,
        default=0.0,
        help="sink.mysql.safe-mode-duration in seconds (default 0: the steady state, not the "
        "sink's start-up window, which defaults to 60 s and would cover the whole run)",
    )
    parser.add_argument(
        "--ceiling-rows", type=int, default=500, help="rows per INSERT statement of the ceiling (default 500)"
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get(DSN_ENV, DEFAULT_DSN),
        help=f"the downstream MariaDB/MySQL server (default ${DSN_ENV} or {DEFAULT_DSN})",
    )
    parser.add_argument("--concurrency", type=int, default=64, help="preloading tasks (default 64)")
    parser.add_argument("--seed", type=int, default=1, help="the preload's random seed (default 1)")
    parser.add_argument("--timeout", type=float, default=900.0, help="phase time limit (default 900 s)")


def progress(message: str) -> None:
    print(f"bench mysql: {message}", file=sys.stderr, flush=True)


async def preload(
    meta_addr: str,
    schema: row_pb2.TableSchema,
    args: argparse.Namespace,
    mix: dict[str, int],
    sample: Sample,
) -> tuple[int, Model]:
    """The CREATE TABLE, then every transaction; (the last commit_ts, the model of the result).
    The first transactions are kept in ``sample`` too (for the stage costs)."""
    config = PumpClientConfig(strategy="range", rpc_timeout=30, write_timeout=120)
    model = Model()
    codec = RowCodec(schema)
    began = time.perf_counter()
    async with AsyncPumpsClient(meta_addr, config) as client:
        tso = TsoBatcher(client)
        change = row_pb2.SchemaChange(
            kind=row_pb2.SchemaChange.CREATE_TABLE, db=schema.db, table=schema.table, table_schema=schema
        )
        query = f"CREATE TABLE `{schema.db}`.`{schema.table}` ({CREATE_COLUMNS})"
        ddl = ddl_prewrite(await tso.get(), query, 1, change)
        sample.add(ddl, await write_txn(client, tso, ddl))
        sizes = iter(txn_sizes(args.rows, args.rows_per_txn))

        async def task(owner: KeyOwner) -> int:
            last = 0
            for size in sizes:  # the tasks share the iterator: each takes the next transaction
                mutation = owner.txn(codec, schema.table_id, size, args.txn_kind)
                start_ts = await tso.get()
                binlog = prewrite(start_ts, [mutation.build()], b"k%d" % start_ts)
                commit_ts = await write_txn(client, tso, binlog)
                sample.add(binlog, commit_ts, size)
                last = max(last, commit_ts)
            return last

        owners = [KeyOwner(n, args.concurrency, args.seed, mix, model) for n in range(args.concurrency)]
        last = max(await asyncio.gather(*(task(owner) for owner in owners)))
    elapsed = time.perf_counter() - began
    counts = ", ".join(f"{model.changes[k]:,} {k}s" for k in KINDS)
    progress(f"preloaded {args.rows:,} row changes ({counts}) in {elapsed:.1f}s; last commit_ts {last}")
    return last, model


def dsn_text(dsn: Dsn) -> str:
    """The drainer's DSN: the server of ``--dsn`` with its parameters (ssl-mode, ...), no database."""
    auth = dsn.user + (f":{dsn.password}" if dsn.password else "")
    query = "&".join(f"{k}={v}" for k, v in dsn.params)
    return f"mysql://{auth}@{dsn.host}:{dsn.port}/" + (f"?{query}" if query else "")


def connect(dsn: Dsn, database: str | None = None) -> pymysql.connections.Connection[Any]:
    return mysql.connect(dsn, database=database, autocommit=True)


def server_pid(dsn: Dsn) -> int | None:
    """The MariaDB/MySQL server's pid when it runs on this machine (for its CPU seconds)."""
    return local_listener_pid(dsn.host, dsn.port)


async def measure_drainer(
    tmp: Path,
    cluster: tuple[str, list[str]],
    last_ts: int,
    args: argparse.Namespace,
    dsn: Dsn,
    database: str,
) -> tuple[float, float, CpuMeter, dict[str, Any]]:
    """(row changes/s of a drainer catching up from its ready line to a checkpoint at ``last_ts``,
    the seconds it took, the CPU the drainer, the pumps and the server spent meanwhile, the
    deadlocks and retries of the sink's workers and the drainer's peak RSS)."""
    meta_addr, pump_addrs = cluster
    config = tmp / "drainer.toml"
    sink = MYSQL_SINK_TOML.format(
        dsn=dsn_text(dsn),
        worker_count=args.worker_count,
        worker_processes=workload.worker_processes(args),
        batch_rows=args.batch_rows,
        txn_rows=args.txn_rows,
        safe_mode=str(args.safe_mode).lower(),
        safe_mode_duration=f"{args.safe_mode_duration:g}",
        database=database,  # the sink's progress table goes into the run's database
    )
    config.write_text(drainer_toml(meta_addr, tmp / "drainer", sink, f"{args.flush_interval:g}s"))
    async with spawn(["drainer", "--config", str(config)], DRAINER_READY, "drainer") as drainer:
        pumps = [listener_pid(int(addr.rpartition(":")[2])) for addr in pump_addrs]
        cpu = CpuMeter({"drainer": [drainer.proc.pid], "pumps": pumps, "server": [server_pid(dsn)]})
        counters = Counters(drainer_counters(drainer.match.group(1), dsn))
        cpu.start()
        counters.start()
        await wait_checkpoint(drainer, last_ts, args.timeout)
        elapsed = time.perf_counter() - drainer.ready_at
        cpu.stop()
        counted = counters.stop(args.rows, elapsed)
        if workload.worker_processes(args):  # its children, started with the sink after ready: all CPU
            tasks = Path(f"/proc/{drainer.proc.pid}/task").glob("*/children")
            pids = [int(pid) for task in tasks for pid in task.read_text().split()]
            cpu.spent["drainer_worker_processes"] = round(sum(cpu_seconds(p) or 0.0 for p in pids), 3)
        faults: dict[str, Any] = await asyncio.to_thread(mysql_sink_faults, drainer.match.group(1))
        faults["drainer_peak_rss_mib"] = peak_rss_mib(drainer.proc.pid)
        samples = await asyncio.to_thread(fetch_metrics, drainer.match.group(1), "bridge_sink_mysql_")
        faults["server_us_per_row"] = server_costs(samples, args.rows)
        faults.update(counted)
    rate = args.rows / elapsed
    progress(f"drainer (mysql sink): {args.rows:,} row changes in {elapsed:.2f}s = {rate:,.0f} rows/s")
    progress(f"drainer phase, CPU us per row change: {cpu.per_row_us(args.rows)}")
    progress(f"drainer phase, deadlocks, worker retries, peak RSS: {faults}")
    return rate, elapsed, cpu, faults


def verify(dsn: Dsn, schema: row_pb2.TableSchema, model: Model, table: str = "") -> dict[str, Any]:
    """A downstream table (default the replicated one) against the model: count and column sums
    must match."""
    table = table or schema.table
    checked = workload.check_table(dsn, schema.db, table, model.expected())
    progress(f"downstream {table} verified: {checked['rows']:,} live rows")
    return checked


def measure_ceiling(dsn: Dsn, database: str, args: argparse.Namespace) -> tuple[float, CpuMeter]:
    """Rows/s of one pymysql connection inserting ``--rows`` rows into a fresh table of the same
    shape, ``--ceiling-rows`` per multi-row INSERT, each statement committed."""
    conn = connect(dsn, database)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE TABLE `ceiling_orders` ({CREATE_COLUMNS})")
            names = ", ".join(f"`{c}`" for c in COLUMNS)
            placeholders = "(" + ", ".join(["%s"] * len(COLUMNS)) + ")"
            cpu = CpuMeter({"client": [os.getpid()], "server": [server_pid(dsn)]})
            cpu.start()
            began = time.perf_counter()
            for first in range(0, args.rows, args.ceiling_rows):
                rows = [row_values(i) for i in range(first, min(first + args.ceiling_rows, args.rows))]
                values = ", ".join([placeholders] * len(rows))
                sql = f"INSERT INTO `ceiling_orders` ({names}) VALUES {values}"  # noqa: S608 - placeholders
                cursor.execute(sql, [value for row in rows for value in row])
            elapsed = time.perf_counter() - began
            cpu.stop()
    finally:
        conn.close()
    rate: float = args.rows / elapsed
    progress(
        f"ceiling (pymysql, {args.ceiling_rows} rows per INSERT, one connection): "
        f"{args.rows:,} rows in {elapsed:.2f}s = {rate:,.0f} rows/s"
    )
    progress(f"ceiling, CPU us per row: {cpu.per_row_us(args.rows)}")
    return rate, cpu


def measure_replay(dsn: Dsn, schema: row_pb2.TableSchema, model: Model, args: argparse.Namespace) -> float:
    """Row changes/s of one pymysql connection applying the preload's changes, in the order they
    were made, to a fresh table: runs of inserts as multi-row INSERTs and runs of deletes as one
    ``DELETE ... IN`` (up to ``--ceiling-rows`` each), each update as one UPDATE of every column
    (a run of them sent as one multi-statement round trip), committing every ``--txn-rows``
    changes. What a plain single-connection applier of the same stream reaches."""
    names = ", ".join(f"`{c}`" for c in COLUMNS)
    row_marks = "(" + ", ".join(["%s"] * len(COLUMNS)) + ")"
    assign = ", ".join(f"`{c}` = %s" for c in COLUMNS[1:])
    conn = mysql.connect(dsn, database=schema.db, autocommit=False, client_flag=CLIENT.MULTI_STATEMENTS)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE TABLE `replay_orders` ({CREATE_COLUMNS})")
            began = time.perf_counter()
            ops, done, since_commit = model.ops, 0, 0
            while done < len(ops):
                kind = ops[done][0]
                end = done
                while end < len(ops) and end - done < args.ceiling_rows and ops[end][0] == kind:
                    end += 1
                run = ops[done:end]
                if kind == "insert":
                    values = [v for _, key, version in run for v in bench_row(key, version)]
                    marks = ", ".join([row_marks] * len(run))
                    cursor.execute(f"INSERT INTO `replay_orders` ({names}) VALUES {marks}", values)  # noqa: S608
                elif kind == "delete":
                    marks = ", ".join(["%s"] * len(run))
                    delete = f"DELETE FROM `replay_orders` WHERE `id` IN ({marks})"  # noqa: S608
                    cursor.execute(delete, [key for _, key, _ in run])
                else:
                    text = ";".join(
                        cursor.mogrify(
                            f"UPDATE `replay_orders` SET {assign} WHERE `id` = %s",  # noqa: S608
                            [*bench_row(key, version)[1:], key],
                        )
                        for _, key, version in run
                    )
                    cursor.execute(text)
                    while cursor.nextset():
                        pass
                done = end
                since_commit += len(run)
                if since_commit >= args.txn_rows:
                    conn.commit()
                    since_commit = 0
            conn.commit()
            elapsed = time.perf_counter() - began
    finally:
        conn.close()
    rate: float = len(model.ops) / elapsed
    progress(
        f"replay (one pymysql connection, the same changes in order): {elapsed:.2f}s = {rate:,.0f} rows/s"
    )
    verify(dsn, schema, model, "replay_orders")
    return rate


def drop_database(dsn: Dsn, database: str) -> None:
    conn = connect(dsn)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
    finally:
        conn.close()


async def measure(args: argparse.Namespace, dsn: Dsn, mix: dict[str, int]) -> dict[str, Any]:
    schema = table_schema()
    schema.db = f"bench_mysql_{secrets.token_hex(4)}"
    try:
        with tempfile.TemporaryDirectory(prefix="bench-mysql-") as name:
            tmp = Path(name)
            async with contextlib.AsyncExitStack() as stack:
                cluster = await start_cluster(stack, tmp, progress)
                sample = Sample()
                last_ts, model = await preload(cluster[0], schema, args, mix, sample)
                value, elapsed, drainer_cpu, faults = await measure_drainer(
                    tmp, cluster, last_ts, args, dsn, schema.db
                )
        checked = verify(dsn, schema, model)
        stages = stage_costs(sample, args.worker_count, args.batch_rows, batch_updates=True)
        progress(f"CPU us per row change of the drainer's stages, on {sample.rows:,} of them: {stages}")
        ceiling, ceiling_cpu = measure_ceiling(dsn, schema.db, args)
        replay = measure_replay(dsn, schema, model, args)
    finally:
        with contextlib.suppress(pymysql.err.MySQLError):
            drop_database(dsn, schema.db)
    return {
        "value": value,
        "ceiling": ceiling,
        "replay": replay,
        "elapsed": elapsed,
        "cpu_us_per_row": {
            "drainer_phase": drainer_cpu.per_row_us(args.rows),
            "ceiling": ceiling_cpu.per_row_us(args.rows),
        },
        "model": model,
        "checked": checked,
        "faults": faults,
        "stages": {**stages, **faults.pop("server_us_per_row"), "sample_rows": sample.rows},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    checks = (
        ("--rows", args.rows >= 1),
        ("--rows-per-txn", 1 <= args.rows_per_txn <= args.rows),
        ("--worker-count", args.worker_count >= 1),
        ("--worker-processes", 0 <= workload.worker_processes(args) <= args.worker_count),
        ("--flush-interval", args.flush_interval > 0),
        ("--batch-rows", args.batch_rows >= 1),
        ("--txn-rows", args.txn_rows >= 1),
        ("--ceiling-rows", args.ceiling_rows >= 1),
        ("--safe-mode-duration", args.safe_mode_duration >= 0),
        ("--concurrency", args.concurrency >= 1),
        ("--timeout", args.timeout > 0),
    )
    bad = [flag for flag, ok in checks if not ok]
    if bad:
        raise SystemExit(f"bench mysql: {', '.join(bad)} out of range")
    try:
        mix = parse_mix(args.mix)
        dsn = parse_dsn(args.dsn, key="--dsn")
    except ConfigError as exc:
        raise SystemExit(f"bench mysql: {exc}") from None
    if not dsn.is_mysql:
        raise SystemExit("bench mysql: --dsn must be a mysql:// DSN")
    result = asyncio.run(measure(args, dsn, mix))
    value, ceiling = result["value"], result["ceiling"]
    model: Model = result["model"]
    return {
        "name": "mysql",
        "value": round(value, 1),
        "unit": "rows/s",
        "ceiling": round(ceiling, 1),
        "ratio": float(f"{value / ceiling:.4g}") if ceiling else 0.0,
        "elapsed": round(result["elapsed"], 3),
        # a second reference: one connection applying the same changes in order (inserts and
        # deletes batched, one UPDATE per update); see measure_replay
        "replay": round(result["replay"], 1),
        "replay_ratio": float(f"{value / result['replay']:.4g}") if result["replay"] else 0.0,
        # per row change: CPU us of build, decode, plan (in this process, on a sample), and the
        # workers' wall us waiting for statements and COMMITs (the drainer's metrics); see
        # bench/mysql_stages.py
        "us_per_row_stages": result["stages"],
        # CPU microseconds per row of each process in each phase (None: not readable here); on a
        # 2-core machine the sum per row bounds rows/s more than any one process does
        "cpu_us_per_row": result["cpu_us_per_row"],
        "params": {
            "rows": args.rows,
            "rows_per_txn": args.rows_per_txn,
            "mix": mix,
            "txn_kind": args.txn_kind,
            "changes": model.changes,
            "worker_count": args.worker_count,
            "worker_processes": workload.worker_processes(args),
            "worker_processes_setting": args.worker_processes,
            "flush_interval": args.flush_interval,
            "batch_rows": args.batch_rows,
            "txn_rows": args.txn_rows,
            "safe_mode": args.safe_mode,
            "safe_mode_duration": args.safe_mode_duration,
            "ceiling_rows": args.ceiling_rows,
            "pumps": PUMPS,
            "columns": len(COLUMNS),
            "downstream": f"{dsn.host}:{dsn.port}",
        },
        "verified": result["checked"],
        # deadlocks (1213) among the sink's workers, retries of a worker's open transaction, and
        # the drainer child's peak RSS (VmHWM) when it had caught up
        **result["faults"],
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "ceiling_is": f"one pymysql connection, multi-row INSERT of {args.ceiling_rows} rows per statement "
        "(each committed) of the same table shape into the same server; inserts only",
    }
