"""Commit → visible downstream latency at a fixed offered load, through pumps, one drainer and its sinks.

Starts ``binlog-bridge meta`` and three ``binlog-bridge pump`` children
(:func:`bench.drainer.start_cluster`) and one ``binlog-bridge drainer`` whose
``[sink] type`` lists ``--sinks`` (``mysql`` into ``--dsn``, ``kafka`` into
``--bootstrap-servers``; both by default: one drainer fans every event out to
both, as a user running both would). The drainer's ``flush-interval`` is
``--flush-interval`` (default 100 ms; the drainer's own default is 1 s, which
alone would put the MySQL sink's p50 near 0.5 s); the MySQL sink runs without
its safe-mode window after start (the steady state is measured).

First a CREATE TABLE of the 8-column ``orders`` table of ``bench drainer`` (in
a database and Kafka prefix of this run's own) goes through, untimed. Then the
load: for ``--duration`` seconds, transactions of ``--rows-per-txn`` inserted
rows are *offered* on a fixed schedule (``--rate`` rows/s; open loop: a
transaction starts when its time comes, whether or not the earlier ones have
finished, up to ``--in-flight`` at once) through the real client SDK, each a
Prewrite, a commit_ts, then the Commit. The rows' Python values come from a
pool made before the load (:class:`bench.rowpool.RowPool`: row ``i`` has id
``i`` and the other columns of row ``i % 6000``), so making them is not timed;
the SDK's row codec encodes every row inside the load, in its transaction. A transaction's **commit time** is
the wall clock when its commit_ts was handed out (before its Commit binlog
is written: the producer's commit point).

A row's **visible time**: for MySQL, when a ``SELECT id ... WHERE id >= <lowest
id not yet seen>`` on a connection of its own (every ``--poll-interval``)
first returned it; for Kafka, when a consumer assigned to every partition of
the table's topic (from the beginning, no group join) received its message,
matched to its transaction by the ``bridge.commit-ts`` header. Latency =
visible - commit, per row; p50, p99 and max per sink, in milliseconds. The
MySQL figure is an upper bound by up to one poll interval plus one query.

The run fails unless every row reaches every sink (row ids for MySQL,
``(commit_ts, pos)`` pairs for Kafka) within ``--timeout`` after the load ends.
``value`` is the worst p99 of the sinks, ``ceiling`` the issue's goal (p99 ≤
1000 ms at 10k rows/s): ``ratio`` ≤ 1 meets it. The offered and achieved rates,
the machine's cores and its load average before and after are in the JSON.
The run's database and topic are dropped at the end.

``budget``: CPU µs per row of every process (this one split into the producer
and the measuring watchers, meta, each pump, the drainer, MariaDB, the broker)
and calls, stream messages, fsyncs and Kafka produce requests (librdkafka's
statistics, every second) per second and per 1,000 rows, from the first offered
transaction until every row arrived, with ``during_load`` (the load alone) and
``idle_pct_core`` (2 s before it); see :class:`bench.cpu.Budget`.
``--sweep`` searches the highest rate each sink set keeps up with
(:mod:`bench.latency_sweep`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from prometheus_client import REGISTRY

from bench import latency_sweep
from bench.calls import server_status
from bench.cpu import Budget, broker_pid, local_listener_pid, scraped
from bench.drainer import (
    DRAINER_READY,
    PUMPS,
    drainer_toml,
    mysql_sink_faults,
    spawn,
    start_cluster,
    table_schema,
    wait_checkpoint,
)
from bench.drainer import txn_binlog as orders_txn
from bench.latency_watch import (
    PARTITIONS,
    KafkaWatcher,
    MySQLWatcher,
    Run,
    Txn,
    Watcher,
    kafka_summary,
    mysql_summary,
)
from bench.mysql import DEFAULT_DSN, DSN_ENV, dsn_text
from bench.rowpool import RowPool
from bridge import mysql
from bridge.binlog import commit, ddl_prewrite
from bridge.dsn import parse_dsn
from bridge.errors import ConfigError
from bridge.proto import row_pb2
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig
from bridge.rowcodec import RowCodec

DEFAULT_BOOTSTRAP = os.environ.get("BRIDGE_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
SINKS = ("mysql", "kafka")
GOAL_P99_MS = 1000.0
IDLE_SECONDS = 2.0
MYSQL_SINK = """\
[sink.mysql]
dsn = "{dsn}"
worker-count = {worker_count}
safe-mode-duration = "0s"
progress-schema = "{database}"
"""
KAFKA_SINK = """\
[sink.kafka]
bootstrap-servers = "{bootstrap}"
prefix = "{prefix}"
partitions = {partitions}

[sink.kafka.producer]
# the budget's produce requests come from librdkafka's statistics: every second, not every 5 s
"statistics.interval.ms" = 1000
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rate", type=float, default=10_000, help="offered rows/s (default 10000)")
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds of load (default 20; 10 per --sweep run)"
    )
    parser.add_argument("--rows-per-txn", type=int, default=10, help="rows per transaction (default 10)")
    parser.add_argument("--sinks", default="mysql,kafka", help="comma-separated: mysql, kafka (default both)")
    parser.add_argument(
        "--flush-interval", type=float, default=0.1, help="the drainer's flush-interval, s (default 0.1)"
    )
    parser.add_argument("--worker-count", type=int, default=16, help="sink.mysql.worker-count (default 16)")
    parser.add_argument(
        "--poll-interval", type=float, default=0.01, help="MySQL poll period, s (default 0.01)"
    )
    parser.add_argument(
        "--in-flight", type=int, default=1024, help="most transactions being written at once (default 1024)"
    )
    parser.add_argument(
        "--dsn",
        default=os.environ.get(DSN_ENV, DEFAULT_DSN),
        help=f"the downstream MariaDB/MySQL server (default ${DSN_ENV} or {DEFAULT_DSN})",
    )
    parser.add_argument("--bootstrap-servers", default=DEFAULT_BOOTSTRAP, help=f"default {DEFAULT_BOOTSTRAP}")
    parser.add_argument(
        "--batch-linger", type=float, default=0.02, help="the SDK's batch-linger, s (default 0.02; 0 = off)"
    )
    parser.add_argument(
        "--pull-interval",
        type=float,
        default=0.01,
        help="the pumps' pull-interval, s (default 0.01; 0 = off)",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="wait for the last rows after the load (default 120 s)"
    )
    latency_sweep.add_arguments(parser)


def progress(message: str) -> None:
    print(f"bench latency: {message}", file=sys.stderr, flush=True)


# -- the offered load ------------------------------------------------------------------------------


async def create_table(client: AsyncPumpsClient, schema: row_pb2.TableSchema) -> int:
    change = row_pb2.SchemaChange(
        kind=row_pb2.SchemaChange.CREATE_TABLE, db=schema.db, table=schema.table, table_schema=schema
    )
    ddl = ddl_prewrite(await client.get_timestamp(), f"CREATE TABLE `{schema.db}`.`orders` (...)", 1, change)
    await client.write_binlog(ddl)
    commit_ts = await client.get_timestamp()
    await client.write_binlog(commit(ddl.start_ts, commit_ts))
    return commit_ts


async def offer_load(
    client: AsyncPumpsClient, schema: row_pb2.TableSchema, args: argparse.Namespace, rows_from: RowPool
) -> tuple[list[Txn], float]:
    """Transactions on the fixed schedule of ``--rate``; (every transaction, seconds the load took).
    Each row's values come from ``rows_from`` (made before the load); the SDK's codec encodes each
    row in its transaction."""
    codec = RowCodec(schema)
    total = max(1, round(args.rate * args.duration))
    sizes = [min(args.rows_per_txn, total - first) for first in range(0, total, args.rows_per_txn)]
    interval = args.rows_per_txn / args.rate
    slots = asyncio.Semaphore(args.in_flight)
    txns: list[Txn] = []
    failures: list[BaseException] = []
    loop = asyncio.get_running_loop()

    async def one(first_id: int, rows: int) -> None:
        try:
            binlog = orders_txn(
                await client.get_timestamp(), codec, schema.table_id, first_id, rows, rows_from
            )
            await client.write_binlog(binlog)
            commit_ts = await client.get_timestamp()
            committed = time.time()
            await client.write_binlog(commit(binlog.start_ts, commit_ts))
            txns.append(Txn(first_id, rows, commit_ts, committed))
        except BaseException as exc:  # noqa: BLE001 - raised below, after the schedule
            failures.append(exc)
        finally:
            slots.release()

    began = loop.time()
    tasks = []
    for n, rows in enumerate(sizes):
        ahead = began + n * interval - loop.time()
        if ahead > 0.002:  # sleep only when well ahead: due slots go out together
            await asyncio.sleep(ahead)
        await slots.acquire()
        tasks.append(asyncio.create_task(one(n * args.rows_per_txn, rows)))
        if failures:
            break
    await asyncio.gather(*tasks)
    if failures:
        raise RuntimeError(f"a transaction failed: {failures[0]!r}") from failures[0]
    return txns, loop.time() - began


# -- the run ----------------------------------------------------------------------------------------


def make_budget(run: Run, watchers: list[Watcher], pump_statuses: list[str], drainer_status: str) -> Budget:
    """CPU per row of every process (this one split into the producer and the measuring
    watchers), and the calls, stream messages and fsyncs per second behind them."""
    pumps = [f"http://{addr}/metrics" for addr in pump_statuses]
    drainer = f"http://{drainer_status}/metrics"

    counters = {
        "write_binlogs_calls": lambda: _local("bridge_pump_client_batch_size_count"),
        "tso_calls": lambda: _local("bridge_pump_client_tso_calls_total"),
        "pump_write_calls": scraped("bridge_pump_write_calls_total", *pumps),
        "pump_group_commits": scraped("bridge_pump_write_batch_size_count", *pumps),
        "pump_fsyncs": scraped("bridge_pump_storage_fsyncs_total", *pumps),
        "pull_messages": scraped("bridge_pump_pull_messages_total", *pumps),
        "drainer_pulled_messages": scraped("bridge_drainer_pulled_messages_total", drainer),
    }
    if "kafka" in run.sinks:
        counters["kafka_produce_requests"] = scraped("bridge_sink_kafka_produce_requests_total", drainer)
    if "mysql" in run.sinks:
        counters["mariadb_fsyncs (server-wide)"] = lambda: server_status(
            run.dsn, ("Innodb_data_fsyncs", "Innodb_os_log_fsyncs")
        )
        counters["mariadb_statements (server-wide)"] = lambda: server_status(run.dsn, ("Questions",))
    servers = {"mariadb": local_listener_pid(run.dsn.host, run.dsn.port)}
    if "kafka" in run.sinks:
        servers["broker"] = broker_pid(run.args.bootstrap_servers)
    watcher_threads = [w.native_id for w in watchers if w.native_id is not None]
    return Budget(servers, counters, measuring=lambda: watcher_threads)


def _local(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


async def wait_for(what: str, done: Callable[[], bool], watchers: list[Watcher], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        for watcher in watchers:
            if watcher.error is not None:
                raise RuntimeError(f"the {watcher.sink} watcher failed: {watcher.error!r}") from watcher.error
            if not watcher.is_alive():
                raise RuntimeError(f"the {watcher.sink} watcher stopped")
        if time.monotonic() > deadline:
            counts = ", ".join(f"{w.sink}: {w.count():,} rows seen" for w in watchers)
            raise RuntimeError(f"{what} not within {timeout:g}s ({counts})")
        await asyncio.sleep(0.05)


def prepare_downstream(run: Run) -> None:
    """The Kafka topic made beforehand (so the consumer can be assigned before the first row)."""
    if "kafka" in run.sinks:
        admin = AdminClient({"bootstrap.servers": run.args.bootstrap_servers})
        futures = admin.create_topics([NewTopic(run.topic, num_partitions=PARTITIONS, replication_factor=1)])
        futures[run.topic].result(30)


def clean_downstream(run: Run) -> None:
    if "mysql" in run.sinks:
        with contextlib.suppress(pymysql.err.MySQLError):
            conn = mysql.connect(run.dsn, autocommit=True)
            try:
                with conn.cursor() as cursor:
                    cursor.execute(f"DROP DATABASE IF EXISTS `{run.database}`")
            finally:
                conn.close()
    if "kafka" in run.sinks:
        admin = AdminClient({"bootstrap.servers": run.args.bootstrap_servers})
        topics = [run.topic, f"{run.prefix}._ddl", f"{run.prefix}._schemas"]
        for future in admin.delete_topics(topics, operation_timeout=10).values():
            with contextlib.suppress(KafkaException):
                future.result(30)


def sink_toml(run: Run) -> str:
    text = f"type = {json.dumps(list(run.sinks))}\n"
    if "mysql" in run.sinks:
        text += MYSQL_SINK.format(
            dsn=dsn_text(run.dsn), worker_count=run.args.worker_count, database=run.database
        )
    if "kafka" in run.sinks:
        text += KAFKA_SINK.format(
            bootstrap=run.args.bootstrap_servers, prefix=run.prefix, partitions=PARTITIONS
        )
    return text


async def measure(run: Run) -> dict[str, Any]:
    args = run.args
    schema = table_schema()
    schema.db = run.database
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as name:
        tmp = Path(name)
        async with contextlib.AsyncExitStack() as stack:
            pump_statuses: list[str] = []
            meta_addr, _ = await start_cluster(stack, tmp, progress, pump_statuses, args.pull_interval)
            config = tmp / "drainer.toml"
            config.write_text(
                drainer_toml(meta_addr, tmp / "drainer", sink_toml(run), f"{args.flush_interval:g}s")
            )
            drainer = await stack.enter_async_context(
                spawn(["drainer", "--config", str(config)], DRAINER_READY, "drainer")
            )
            client_config = PumpClientConfig(
                strategy="range", rpc_timeout=30, write_timeout=120, batch_linger=args.batch_linger
            )
            client = await stack.enter_async_context(AsyncPumpsClient(meta_addr, client_config))
            await wait_checkpoint(drainer, await create_table(client, schema), args.timeout)
            progress(f"the CREATE TABLE reached {', '.join(run.sinks)}; offering {args.rate:,.0f} rows/s")
            watchers: list[Watcher] = []
            if "mysql" in run.sinks:
                watchers.append(MySQLWatcher(run))
            if "kafka" in run.sinks:
                watchers.append(KafkaWatcher(run))
            for watcher in watchers:
                watcher.start()
                watcher.ready.wait(30)
            faults: dict[str, int] = {}
            budget = make_budget(run, watchers, pump_statuses, drainer.match.group(1))
            rows_from = RowPool()  # the rows' values, made before the load (the SDK encodes them in it)
            try:
                budget.start()  # first 2 s without load: what each process spends idle
                await asyncio.sleep(IDLE_SECONDS)
                idle = budget.stop(1)["cpu_pct_core"]
                budget.start()
                txns, took = await offer_load(client, schema, args, rows_from)
                rows = sum(t.rows for t in txns)
                during_load = budget.stop(rows)  # the producer's, pumps' and meta's work is done by now
                progress(f"offered {rows:,} rows in {took:.2f}s = {rows / took:,.0f} rows/s; waiting for all")
                await wait_for(
                    "every row downstream",
                    lambda: all(w.count() >= rows for w in watchers),
                    [*watchers],
                    args.timeout,
                )
                spent = {**budget.stop(rows), "idle_pct_core": idle, "during_load": during_load}
                drainer.check_alive("binlog-bridge drainer")
                if "mysql" in run.sinks:
                    faults = await asyncio.to_thread(mysql_sink_faults, drainer.match.group(1))
            finally:
                for watcher in watchers:
                    watcher.stop.set()
                for watcher in watchers:
                    watcher.join(10)
    figures: dict[str, Any] = {"rows": rows, "seconds": took, "budget": spent}
    for watcher in watchers:
        if isinstance(watcher, MySQLWatcher):
            figures["mysql"] = {**mysql_summary(txns, watcher.seen), "polls": watcher.polls, **faults}
        elif isinstance(watcher, KafkaWatcher):
            figures["kafka"] = kafka_summary(txns, watcher.seen)
        progress(f"{watcher.sink}: {figures[watcher.sink]}")
    return figures


def parse(args: argparse.Namespace) -> Run:
    sinks = tuple(s.strip() for s in args.sinks.split(",") if s.strip())
    checks = (
        ("--rate", args.rate > 0),
        ("--duration", args.duration > 0),
        ("--rows-per-txn", args.rows_per_txn >= 1),
        ("--sinks", bool(sinks) and set(sinks) <= set(SINKS) and len(set(sinks)) == len(sinks)),
        ("--flush-interval", 0.001 <= args.flush_interval <= 600),
        ("--worker-count", args.worker_count >= 1),
        ("--poll-interval", args.poll_interval > 0),
        ("--in-flight", args.in_flight >= 1),
        ("--timeout", args.timeout > 0),
        ("--batch-linger", 0 <= args.batch_linger <= 1),
        ("--pull-interval", 0 <= args.pull_interval <= 1),
    )
    bad = [flag for flag, ok in checks if not ok]
    if bad:
        raise SystemExit(f"bench latency: {', '.join(bad)} out of range (--sinks: mysql and/or kafka)")
    try:
        dsn = parse_dsn(args.dsn, key="--dsn")
    except ConfigError as exc:
        raise SystemExit(f"bench latency: {exc}") from None
    if "mysql" in sinks and not dsn.is_mysql:
        raise SystemExit("bench latency: --dsn must be a mysql:// DSN")
    token = secrets.token_hex(4)
    return Run(args, sinks, dsn, f"bench_latency_{token}", f"bench-latency-{token}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.duration is None:
        args.duration = 10.0 if args.sweep else 20.0
    if args.sweep:
        return latency_sweep.sweep(args, run)
    setup = parse(args)
    load_before = [round(x, 2) for x in os.getloadavg()]
    try:
        prepare_downstream(setup)
        figures = asyncio.run(measure(setup))
    finally:
        clean_downstream(setup)
    worst = max(figures[s]["p99_ms"] for s in setup.sinks)
    return {
        "name": "latency",
        "value": worst,
        "unit": "ms",
        "ceiling": GOAL_P99_MS,
        "ratio": float(f"{worst / GOAL_P99_MS:.4g}"),
        "sinks": {s: figures[s] for s in setup.sinks},
        "offered_rate": args.rate,
        "achieved_rate": round(figures["rows"] / figures["seconds"], 1),
        "rows": figures["rows"],
        "every_row_arrived": True,  # measure() fails otherwise
        "budget": figures["budget"],
        "params": {
            "duration": args.duration,
            "rows_per_txn": args.rows_per_txn,
            "flush_interval": args.flush_interval,
            "worker_count": args.worker_count,
            "poll_interval": args.poll_interval,
            "batch_linger": args.batch_linger,
            "pull_interval": args.pull_interval,
            "pumps": PUMPS,
            "kafka_partitions": PARTITIONS,
        },
        "cores": os.cpu_count(),
        "load_avg": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]},
        "value_is": "the worst p99 of the sinks, commit (commit_ts handed out) to visible downstream",
        "ceiling_is": f"the goal of issue 16: p99 <= {GOAL_P99_MS:.0f} ms; ratio <= 1 meets it",
    }
