"""Peak memory of a drainer (and of ``consume --apply``) replicating one very large transaction.

Starts ``binlog-bridge meta`` and three pumps (:func:`bench.drainer.start_cluster`),
then writes through the real client SDK a CREATE TABLE for the 8-column
``orders`` table of ``bench drainer`` (in a database of this run's own,
``bench_bigtxn_<random>``) and ONE transaction inserting ``--rows`` rows
(the SDK writes it in parts when it is larger than the client's
``chunk-bytes``). Then a ``binlog-bridge drainer`` child replicates it:

- ``--sink mysql``: into ``--dsn`` through the MySQL sink (``--worker-count``,
  ``--worker-processes``);
- ``--sink kafka``: to the broker of ``--bootstrap-servers`` through the Kafka
  sink (topics ``bench-bigtxn-<random>.*``); then ``binlog-bridge consume
  --apply`` reads them back into ``--dsn`` (``--until-ts`` the transaction),
  so the downstream check covers the Kafka path too (``--no-consume``: only
  the count of row messages the broker acknowledged, from the drainer's
  ``bridge_sink_kafka_messages_total``, is checked).

``value``: the drainer child's peak RSS (``VmHWM``) once its checkpoint passed
the transaction, in MiB; ``ceiling``: 512 MiB, the goal of issue 16 item 7
(``ratio`` < 1 meets it). With ``--sink mysql`` and worker processes, their
peak RSS is reported apart. ``consume_peak_rss_mib``: the consume child's
highest ``VmHWM`` read while it ran (every 0.2 s). The downstream table is
checked: row count, ``SUM(customer)`` and ``SUM(weight)`` equal those of the
rows written. The run's database (and topics) are dropped at the end.
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
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from bench import mysql_workload as workload
from bench.drainer import (
    DRAINER_READY,
    drainer_toml,
    fetch_metrics,
    peak_rss_mib,
    row_values,
    spawn,
    start_cluster,
    table_schema,
    txn_binlog,
    wait_checkpoint,
    write_txn,
)
from bench.mysql import DEFAULT_DSN, DSN_ENV, MYSQL_SINK_TOML, dsn_text
from bench.pump import TsoBatcher
from bench.result import machine
from bridge import mysql
from bridge.binlog import ddl_prewrite
from bridge.dsn import Dsn, parse_dsn
from bridge.errors import ConfigError
from bridge.proto import row_pb2
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig
from bridge.rowcodec import RowCodec

GOAL_MIB = 512.0
DEFAULT_BOOTSTRAP = os.environ.get("BRIDGE_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
KAFKA_SINK_TOML = """\
type = "kafka"
[sink.kafka]
bootstrap-servers = "{bootstrap}"
prefix = "{prefix}"
partitions = {partitions}
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rows", type=int, default=1_000_000, help="rows of the transaction (default 1000000)"
    )
    parser.add_argument("--sink", choices=("mysql", "kafka"), default="mysql", help="default mysql")
    parser.add_argument(
        "--dsn",
        default=os.environ.get(DSN_ENV, DEFAULT_DSN),
        help=f"the downstream MariaDB/MySQL server (default ${DSN_ENV} or {DEFAULT_DSN})",
    )
    parser.add_argument("--bootstrap-servers", default=DEFAULT_BOOTSTRAP, help=f"default {DEFAULT_BOOTSTRAP}")
    parser.add_argument("--partitions", type=int, default=3, help="kafka topics' partitions (default 3)")
    parser.add_argument("--worker-count", type=int, default=16, help="sink.mysql.worker-count (default 16)")
    parser.add_argument(
        "--worker-processes",
        type=workload.processes_arg,
        default="auto",
        help='sink.mysql.worker-processes (default "auto")',
    )
    parser.add_argument(
        "--consume-worker-count", type=int, default=4, help="consume --apply --worker-count (default 4)"
    )
    parser.add_argument(
        "--no-consume",
        action="store_true",
        help="kafka: skip consume --apply; the check is then only the count of row messages the "
        "broker acknowledged (the drainer's bridge_sink_kafka_messages_total)",
    )
    parser.add_argument(
        "--chunk-bytes",
        type=int,
        default=PumpClientConfig().chunk_bytes,
        help="the producer's pump-client chunk-bytes (default %(default)s; 0 = one binlog, at most "
        "gRPC's 128 MiB message)",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="phase time limit (default 3600 s)")


def progress(message: str) -> None:
    print(f"bench bigtxn: {message}", file=sys.stderr, flush=True)


def expected(rows: int) -> tuple[int, int, float]:
    """(rows, SUM(customer), SUM(weight)) of rows 0..rows-1 (:func:`bench.drainer.row_values`)."""
    customers = weights = 0
    for i in range(rows):
        values = row_values(i)
        customers += int(values[1])  # type: ignore[call-overload]
        weights += values[3]  # type: ignore[operator]
    return rows, customers, float(weights)


async def preload(
    meta_addr: str, schema: row_pb2.TableSchema, rows: int, chunk_bytes: int
) -> tuple[int, int]:
    """The CREATE TABLE, then one transaction of ``rows`` inserts; (its commit_ts, its bytes)."""
    config = PumpClientConfig(strategy="range", rpc_timeout=120, write_timeout=600, chunk_bytes=chunk_bytes)
    config.validate()
    began = time.perf_counter()
    async with AsyncPumpsClient(meta_addr, config) as client:
        tso = TsoBatcher(client)
        change = row_pb2.SchemaChange(
            kind=row_pb2.SchemaChange.CREATE_TABLE, db=schema.db, table=schema.table, table_schema=schema
        )
        query = f"CREATE TABLE `{schema.db}`.`{schema.table}` (...)"
        await write_txn(client, tso, ddl_prewrite(await tso.get(), query, 1, change))
        binlog = txn_binlog(await tso.get(), RowCodec(schema), schema.table_id, 0, rows)
        size = len(binlog.prewrite_value)
        built = time.perf_counter()
        commit_ts = await write_txn(client, tso, binlog)
        del binlog
    progress(
        f"one transaction of {rows:,} rows ({size / 2**20:.1f} MiB of rows) built in {built - began:.1f}s, "
        f"written in {time.perf_counter() - built:.1f}s; commit_ts {commit_ts}"
    )
    return commit_ts, size


def sink_toml(args: argparse.Namespace, dsn: Dsn, database: str, prefix: str) -> str:
    if args.sink == "kafka":
        return KAFKA_SINK_TOML.format(
            bootstrap=args.bootstrap_servers, prefix=prefix, partitions=args.partitions
        )
    return MYSQL_SINK_TOML.format(
        dsn=dsn_text(dsn),
        worker_count=args.worker_count,
        worker_processes=workload.worker_processes(args),
        batch_rows=500,
        txn_rows=4096,
        safe_mode="false",
        safe_mode_duration="0",
        database=database,
    )


def children_peak_rss_mib(pid: int) -> float | None:
    """The highest ``VmHWM`` of ``pid``'s child processes (the MySQL sink's worker processes)."""
    peaks = [
        peak_rss_mib(int(child))
        for task in Path(f"/proc/{pid}/task").glob("*/children")
        for child in task.read_text().split()
    ]
    found = [p for p in peaks if p is not None]
    return max(found) if found else None


async def run_drainer(
    tmp: Path, meta_addr: str, last_ts: int, args: argparse.Namespace, dsn: Dsn, database: str, prefix: str
) -> dict[str, Any]:
    config = tmp / "drainer.toml"
    config.write_text(drainer_toml(meta_addr, tmp / "drainer", sink_toml(args, dsn, database, prefix)))
    async with spawn(["drainer", "--config", str(config)], DRAINER_READY, "drainer") as drainer:
        await wait_checkpoint(drainer, last_ts, args.timeout)
        elapsed = time.perf_counter() - drainer.ready_at
        out: dict[str, Any] = {
            "drainer_seconds": round(elapsed, 2),
            "drainer_peak_rss_mib": peak_rss_mib(drainer.proc.pid),
        }
        if args.sink == "mysql" and workload.worker_processes(args):
            out["worker_processes_peak_rss_mib"] = children_peak_rss_mib(drainer.proc.pid)
        if args.sink == "kafka":
            samples = await asyncio.to_thread(
                fetch_metrics, drainer.match.group(1), "bridge_sink_kafka_messages_total"
            )
            rows = sum(v for k, v in samples.items() if f'topic="{prefix}.' in k and 'kind="row"' in k)
            out["kafka_row_messages_acknowledged"] = int(rows)
    progress(f"drainer ({args.sink} sink): {args.rows:,} rows in {elapsed:.1f}s; {out}")
    return out


async def run_consume(
    args: argparse.Namespace, dsn: Dsn, prefix: str, last_ts: int, database: str
) -> dict[str, Any]:
    """``consume --apply`` of the Kafka topics into ``dsn`` up to ``last_ts``: its seconds and peak RSS."""
    argv = [
        sys.executable, "-m", "bridge.cli", "--log-level", "warning", "consume",
        "--bootstrap-servers", args.bootstrap_servers, "--prefix", prefix, "--apply", dsn_text(dsn),
        "--until-ts", str(last_ts), "--idle-timeout", "300", "--worker-count", str(args.consume_worker_count),
        "--progress-schema", database,
    ]  # fmt: skip
    began = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    peak = 0.0
    try:
        waiting = asyncio.ensure_future(proc.communicate())
        while not waiting.done():
            peak = max(peak, peak_rss_mib(proc.pid) or 0.0)
            if time.perf_counter() - began > args.timeout:
                raise RuntimeError(f"consume --apply took longer than {args.timeout}s")
            await asyncio.wait([waiting], timeout=0.2)
        stdout, stderr = waiting.result()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    elapsed = time.perf_counter() - began
    if proc.returncode != 0:
        raise RuntimeError(f"consume --apply exited with {proc.returncode}:\n{stderr.decode()[-4000:]}")
    summary = stdout.decode().strip().splitlines()[-1:]
    progress(f"consume --apply: {elapsed:.1f}s, peak RSS {peak:.1f} MiB; {' '.join(summary)}")
    return {"consume_seconds": round(elapsed, 2), "consume_peak_rss_mib": round(peak, 1)}


def verify(dsn: Dsn, schema: row_pb2.TableSchema, rows: int) -> dict[str, Any]:
    checked = workload.check_table(dsn, schema.db, schema.table, expected(rows))
    progress(f"downstream {schema.db}.{schema.table} verified: {rows:,} rows")
    return checked


def delete_topics(bootstrap: str, prefix: str) -> None:
    """The run's topics (the test broker may keep them in memory)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    with contextlib.suppress(KafkaException):
        names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + ".")]
        if names:
            for future in admin.delete_topics(names, operation_timeout=10).values():
                with contextlib.suppress(KafkaException):
                    future.result(30)


def drop_database(dsn: Dsn, database: str) -> None:
    conn = mysql.connect(dsn, autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
    finally:
        conn.close()


async def measure(args: argparse.Namespace, dsn: Dsn) -> dict[str, Any]:
    schema = table_schema()
    token = secrets.token_hex(4)
    schema.db = f"bench_bigtxn_{token}"
    prefix = f"bench-bigtxn-{token}"
    out: dict[str, Any] = {}
    began = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-bigtxn-") as name:
            tmp = Path(name)
            async with contextlib.AsyncExitStack() as stack:
                meta_addr, _pumps = await start_cluster(stack, tmp, progress)
                last_ts, size = await preload(meta_addr, schema, args.rows, args.chunk_bytes)
                out["payload_mib"] = round(size / 2**20, 1)
                out.update(await run_drainer(tmp, meta_addr, last_ts, args, dsn, schema.db, prefix))
        if args.sink == "kafka" and args.no_consume:
            acked = out["kafka_row_messages_acknowledged"]
            if acked != args.rows:
                raise RuntimeError(f"the broker acknowledged {acked} row messages, not {args.rows}")
            out["verified"] = {"rows": acked, "checked": "row messages acknowledged (no consume)"}
        else:
            if args.sink == "kafka":
                out.update(await run_consume(args, dsn, prefix, last_ts, schema.db))
            out["verified"] = verify(dsn, schema, args.rows)
    finally:
        with contextlib.suppress(pymysql.err.MySQLError):
            drop_database(dsn, schema.db)
        if args.sink == "kafka":
            delete_topics(args.bootstrap_servers, prefix)
    out["total_seconds"] = round(time.perf_counter() - began, 1)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.rows < 1 or args.timeout <= 0 or args.partitions < 1 or args.worker_count < 1:
        raise SystemExit("bench bigtxn: --rows, --timeout, --partitions and --worker-count must be positive")
    try:
        dsn = parse_dsn(args.dsn, key="--dsn")
    except ConfigError as exc:
        raise SystemExit(f"bench bigtxn: {exc}") from None
    if not dsn.is_mysql:
        raise SystemExit("bench bigtxn: --dsn must be a mysql:// DSN")
    result = asyncio.run(measure(args, dsn))
    peak = result.get("drainer_peak_rss_mib") or 0.0
    return {
        "name": "bigtxn",
        "value": peak,
        "unit": "MiB drainer peak RSS",
        "ceiling": GOAL_MIB,
        "ratio": float(f"{peak / GOAL_MIB:.4g}"),
        "params": {
            "rows": args.rows,
            "sink": args.sink,
            "chunk_bytes": args.chunk_bytes,
            "worker_count": args.worker_count,
            "worker_processes": workload.worker_processes(args) if args.sink == "mysql" else None,
            "partitions": args.partitions if args.sink == "kafka" else None,
        },
        **result,
        **machine(),
    }
