"""``binlog-bridge load``: a transactional workload through the writer, for demos, tests and benchmarks.

Prints a progress line on stderr every ``--progress-interval`` seconds and,
at the end, one JSON line on stdout::

    {"upstream": "sqlite", "seed": 1, "concurrency": 4, "elapsed": 10.01, "transactions": 5123,
     "rows": 21034, "ddl": 14, "rollbacks": 3, "errors": 0, "txn_per_s": 511.8, "rows_per_s": 2101.3}

Exit status 0 when no transaction was given up (``errors`` = 0), 1 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from typing import Any

from bridge.apps.load.options import LoadOptions, parse_mix
from bridge.apps.load.runner import LoadRunner, create_schema
from bridge.apps.load.stats import Progress, Stats, summary
from bridge.dsn import PASSWORD_ENV, parse_dsn
from bridge.errors import BridgeError
from bridge.grpcutil import SecurityConfig
from bridge.producer.open import open_upstream
from bridge.producer.writer import TxnWriter
from bridge.pumpclient import PumpClientConfig, PumpsClient
from bridge.startup import stop_on_signals

log = logging.getLogger(__name__)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "load",
        help="run a transactional workload (with DDL) through the writer into the pumps",
        description=(
            "Create the load tables through the writer's DDL, then run multi-table transactions "
            "(inserts, updates including key changes, deletes, large transactions) and schema changes "
            f"for --seconds. The MySQL password may come from ${PASSWORD_ENV}. See docs/producers.md."
        ),
    )
    parser.add_argument("--meta", required=True, help="meta service address(es), host:port[,host:port]")
    parser.add_argument(
        "--upstream", required=True, help="sqlite:///path/file.db or mysql://user@host:port/database"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to run (default 10)")
    parser.add_argument("--rate", type=float, default=0.0, help="transactions/s over all workers (0 = max)")
    parser.add_argument("--concurrency", type=int, default=4, help="worker threads (default 4)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument(
        "--mix", default="", help="kind=weight,... of transfer order edit remove rekey doc large"
    )
    parser.add_argument("--txn-size", type=int, default=4, help="most row changes of an ordinary transaction")
    parser.add_argument("--large-size", type=int, default=500, help="row changes of a large transaction")
    parser.add_argument("--no-ddl", dest="ddl", action="store_false", help="no schema changes during the run")
    parser.add_argument("--ddl-interval", type=float, default=1.0, help="seconds between schema changes")
    parser.add_argument("--accounts", type=int, default=200, help="shared accounts transfers conflict on")
    parser.add_argument("--progress-interval", type=float, default=1.0, help="seconds between progress lines")
    parser.add_argument(
        "--write-timeout", type=float, default=15.0, help="pump client write-timeout, seconds"
    )
    parser.add_argument("--ssl-ca", default="", help="CA bundle for TLS to the meta service and pumps")
    parser.add_argument("--ssl-cert", default="", help="client certificate (role producer) for mutual TLS")
    parser.add_argument("--ssl-key", default="", help="its private key")
    parser.set_defaults(func=run)
    return parser


def options_from(args: argparse.Namespace) -> LoadOptions:
    options = LoadOptions(
        seconds=args.seconds,
        rate=args.rate,
        concurrency=args.concurrency,
        seed=args.seed,
        mix=parse_mix(args.mix),
        txn_size=args.txn_size,
        large_size=args.large_size,
        ddl=args.ddl,
        ddl_interval=args.ddl_interval,
        accounts=args.accounts,
    )
    options.validate()
    return options


def run(args: argparse.Namespace) -> int:
    options = options_from(args)
    dsn = parse_dsn(args.upstream, key="--upstream").with_password_from_env()
    if dsn.is_mysql:
        from bridge.producer.mysql import create_database

        if create_database(dsn):
            log.info("created database %s", dsn.database)
    stats = Stats()
    security = SecurityConfig(ssl_ca=args.ssl_ca, ssl_cert=args.ssl_cert, ssl_key=args.ssl_key)
    security.validate()
    config = PumpClientConfig(write_timeout=args.write_timeout, security=security)
    with stop_on_signals("load") as stop, PumpsClient(args.meta, config) as pumps:
        writer = TxnWriter(open_upstream(dsn), pumps)
        try:
            runner, elapsed = _run(writer, options, stats, stop, args.progress_interval)
        finally:
            writer.close()
    print(summary(stats, elapsed, upstream=dsn.scheme, seed=options.seed, concurrency=options.concurrency))
    sys.stdout.flush()
    if runner.crashed is not None:
        raise BridgeError(f"a load thread crashed: {runner.crashed!r}")
    return 1 if stats.snapshot().errors else 0


def _run(
    writer: TxnWriter, options: LoadOptions, stats: Stats, stop: threading.Event, interval: float
) -> tuple[LoadRunner, float]:
    log.info(
        "load: %s, %d workers, %gs, seed %d",
        writer.upstream.describe(),
        options.concurrency,
        options.seconds,
        options.seed,
    )
    bases = create_schema(writer, options, stats)
    progress = Progress(stats, interval)
    runner = LoadRunner(writer, options, stats, stop)
    progress.start()
    try:
        elapsed = runner.run(bases)
    finally:
        progress.stop()
    return runner, elapsed
