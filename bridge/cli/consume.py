"""``binlog-bridge consume``: read the Kafka sink's change topics; print them, or apply them to SQL.

Without ``--apply``: one JSON line per message on stdout — row changes
(topic, partition, offset, key, op, before, after, source, ts_ms; decimals
as strings, bytes as base64, times in ISO 8601), DDL events, tombstones,
and with ``--resolved`` the resolved-ts watermarks — in the order read.

With ``--apply DSN`` (``sqlite:///dir``: one SQLite file per upstream
database, as the sqlite sink writes; ``mysql://user@host:port/``: a MySQL
server, tables in their upstream databases, through the mysql sink): every
table topic of ``--prefix`` and its DDL topic are read from the beginning,
buffered, and applied in commit order once every partition's watermark
passes them (duplicates from an at-least-once re-delivery are dropped). The
target remembers what it applied: run again, it goes on where it stopped.
``--until-ts TS`` exits 0 once everything up to TS is applied. Table
schemas come from the DDL topic: a table created before the drainer
started has none (see docs/consume.md).

With ``--group NAME`` (printing only) the offsets of the messages printed
are committed to the consumer group NAME after each batch is written out,
and a run with the same NAME starts each partition where the group stopped
(a partition the group never committed starts as without ``--group``), so a
restarted consumer neither misses nor repeats a message it printed.

Progress goes to stderr; SIGTERM or SIGINT stops after the batch at hand.
A run that ends without any topic matching ``--prefix`` (a typo, another
sink's prefix) warns so and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bridge.errors import UserError


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "consume",
        help="read the Kafka sink's change topics: print JSON lines or apply to a SQL database",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT", help="Kafka brokers")
    parser.add_argument(
        "--topic", action="append", default=[], metavar="T", help="a topic to read (repeatable)"
    )
    parser.add_argument(
        "--prefix", default=None, metavar="P", help="read every topic P.* (the sink's prefix) and P._ddl"
    )
    parser.add_argument(
        "--from-beginning", action="store_true", help="print from the start of each partition (default: new)"
    )
    parser.add_argument(
        "--group",
        default=None,
        metavar="NAME",
        help="commit the offsets printed to consumer group NAME; a run with the same NAME resumes there",
    )
    parser.add_argument(
        "--consumer-config",
        default=None,
        metavar="FILE",
        help="librdkafka settings, key=value a line (security.protocol, sasl.*, ssl.*; ${VAR} reads the "
        "environment)",
    )
    parser.add_argument("--schema-registry-url", default=None, metavar="URL", help="registry encoding")
    parser.add_argument(
        "--schema-registry-config",
        default=None,
        metavar="FILE",
        help="SchemaRegistryClient settings, key=value a line (basic.auth.user.info, ssl.ca.location, ...)",
    )
    parser.add_argument("--apply", default=None, metavar="DSN", help="apply to this SQL database")
    parser.add_argument(
        "--until-ts", type=int, default=None, metavar="TS", help="stop once everything <= TS is complete"
    )
    parser.add_argument(
        "--idle-timeout", type=float, default=None, metavar="S", help="stop after S seconds with no message"
    )
    parser.add_argument(
        "--max-messages", type=int, default=None, metavar="N", help="stop after N changes printed/applied"
    )
    parser.add_argument("--resolved", action="store_true", help="also print resolved-ts watermarks")
    parser.add_argument(
        "--schema-wait",
        type=float,
        default=10.0,
        metavar="S",
        help="how long to wait for an unknown schema on the schemas topic (default 10)",
    )
    parser.add_argument(
        "--worker-count", type=int, default=4, help="mysql targets: the sink's workers (default 4)"
    )
    parser.add_argument(
        "--progress-schema",
        default="bridge_consume",
        help="mysql targets: database of the sink's progress table (default bridge_consume; "
        "keep it apart from a drainer's own mysql sink on the same server)",
    )
    parser.set_defaults(func=run)
    return parser


def check(args: argparse.Namespace) -> None:
    if not args.topic and not args.prefix:
        raise UserError("give --topic (one or more) or --prefix")
    if args.apply is not None and not args.prefix:
        raise UserError("--apply needs --prefix: it reads every table topic and the DDL topic of the prefix")
    if args.apply is not None and args.topic:
        raise UserError("--apply reads every topic of --prefix; drop --topic")
    if args.group is not None and args.apply is not None:
        raise UserError(
            "--group is for printing: --apply reads every topic from the beginning (the table schemas come "
            "from the DDL topic) and the target remembers what it applied"
        )
    if args.group is not None and not args.group.strip():
        raise UserError("--group: must not be empty")
    if args.until_ts is not None and args.until_ts < 0:
        raise UserError("--until-ts: must be a commit_ts (>= 0)")
    if args.idle_timeout is not None and args.idle_timeout <= 0:
        raise UserError("--idle-timeout: must be positive")
    if args.max_messages is not None and args.max_messages < 1:
        raise UserError("--max-messages: must be at least 1")
    if args.schema_wait < 0:
        raise UserError("--schema-wait: must be >= 0")
    if args.worker_count < 1:
        raise UserError("--worker-count: must be at least 1")


def run(args: argparse.Namespace) -> int:
    from bridge.apps.consume.runner import Limits, run_apply, run_print
    from bridge.apps.consume.settings import consumer_settings, registry_settings

    check(args)
    if args.schema_registry_config is not None and not args.schema_registry_url:
        raise UserError("--schema-registry-config needs --schema-registry-url")
    client_settings = consumer_settings(args.consumer_config)
    schema_registry = registry_settings(args.schema_registry_config)
    limits = Limits(args.until_ts, args.idle_timeout, args.max_messages)
    applier = None
    if args.apply is not None:
        from bridge.apps.consume.apply import Applier, sink_for

        applier = Applier(
            sink_for(args.apply, worker_count=args.worker_count, progress_schema=args.progress_schema)
        )
    from bridge.apps.consume.reader import ChangeReader

    reader = ChangeReader(
        args.bootstrap_servers,
        topics=args.topic,
        prefix=args.prefix,
        registry_url=args.schema_registry_url,
        from_beginning=args.from_beginning or applier is not None,
        decode_keys=applier is None,
        schema_wait=args.schema_wait,
        consumer_settings=client_settings,
        registry_settings=schema_registry,
        group=args.group,
    )
    try:
        if applier is None:
            summary = run_print(reader, limits, sys.stdout, show_resolved=args.resolved)
            print(summary.line(), file=sys.stderr, flush=True)
        else:
            try:
                summary = run_apply(reader, applier, limits)
            finally:
                applier.close()
            print(summary.line(), flush=True)
    finally:
        reader.close()
    if args.prefix and not args.topic and not reader.assigned:
        print(
            f"consume: warning: no topic matched --prefix {args.prefix} (looked for {args.prefix}.* on "
            f"{args.bootstrap_servers}); is the prefix the kafka sink's?",
            file=sys.stderr,
        )
        return 1
    return 0
