"""``binlog-bridge replay``: apply a range of the file sink's binlog files to a SQL downstream.

The range is bounded by commit_ts (``--start-ts``/``--stop-ts``, both
inclusive) or by time (``--start-time``/``--stop-time``: ISO 8601, the
machine's local time when no offset is given; a time covers its whole
millisecond). ``--to`` is ``sqlite:DIR`` (a directory laid out like the
sqlite sink's: one file per database; created when missing) or
``mysql://USER[:PASSWORD]@HOST:PORT/`` (a MySQL-compatible server, written
as the mysql sink writes). The databases and tables of the first file's
schema that the target lacks are created before the first transaction (a
dead-letter directory holds no CREATE TABLE of its own), and the DDLs in the
range are applied in order. The target remembers what it applied, so a
replay interrupted and run again goes on where it stopped: SQLite in the
directory, MySQL in ``--progress-schema``'s ``sink_progress`` table (default
``bridge_replay``): give a replay of another directory into the same server
a progress schema of its own, or it skips what the first one applied.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from bridge.errors import UserError
from bridge.tso import compose

_LOGICAL_MAX = (1 << 18) - 1


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "replay", help="apply binlog files written by the file sink to a SQL downstream", description=__doc__
    )
    parser.add_argument("--dir", required=True, type=Path, help="directory of binlog-*.bbf files")
    parser.add_argument(
        "--to", required=True, metavar="DSN", help="target: sqlite:DIR or mysql://USER@HOST:PORT/"
    )
    parser.add_argument(
        "--progress-schema",
        default="bridge_replay",
        metavar="DB",
        help="mysql targets: database of the table that remembers what was applied (default bridge_replay)",
    )
    parser.add_argument("--start-ts", type=int, default=None, help="first commit_ts to apply (inclusive)")
    parser.add_argument("--stop-ts", type=int, default=None, help="last commit_ts to apply (inclusive)")
    parser.add_argument("--start-time", default=None, help="apply commits from this ISO time on")
    parser.add_argument("--stop-time", default=None, help="apply commits up to this ISO time")
    parser.set_defaults(func=run)
    return parser


def time_to_ts(text: str, key: str, end: bool) -> int:
    """A commit_ts bound from an ISO time: the first (or, with ``end``, last) ts of its millisecond."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"{key}: expected an ISO time such as 2026-01-31T12:00:00, got {text!r}") from None
    physical = int(moment.timestamp() * 1000)
    return compose(physical, _LOGICAL_MAX if end else 0)


def bounds(args: argparse.Namespace) -> tuple[int, int]:
    from drainer.relay.replay import MAX_TS

    if args.start_ts is not None and args.start_time is not None:
        raise UserError("--start-ts and --start-time: give one of them")
    if args.stop_ts is not None and args.stop_time is not None:
        raise UserError("--stop-ts and --stop-time: give one of them")
    start = args.start_ts if args.start_ts is not None else 0
    if args.start_time is not None:
        start = time_to_ts(args.start_time, "--start-time", end=False)
    stop = args.stop_ts if args.stop_ts is not None else MAX_TS
    if args.stop_time is not None:
        stop = time_to_ts(args.stop_time, "--stop-time", end=True)
    if stop < start:
        raise UserError(f"the range is empty: start {start} is after stop {stop}")
    return start, stop


def run(args: argparse.Namespace) -> int:
    from bridge.dsn import parse_dsn
    from bridge.sink.contract import Sink
    from drainer.relay.replay import replay
    from drainer.relay.tables import create_tables
    from drainer.sinks.file.binlogfile import BinlogFileReader

    start, stop = bounds(args)
    target = parse_dsn(args.to)
    sink: Sink
    if target.is_sqlite:
        from drainer.sinks.sqlite.sink import SQLiteSink

        sink = SQLiteSink({"path": target.path}, Path(target.path))
    elif target.is_mysql:
        from drainer.sinks.mysql.sink import MySQLSink

        sink = MySQLSink({"dsn": args.to, "progress-schema": args.progress_schema}, Path("."))
        sink.check()  # login and privileges: one line when they fail
    else:
        raise UserError(f"--to {target.redacted()}: expected sqlite:DIR or mysql://USER@HOST:PORT/")
    reader = BinlogFileReader(args.dir)
    if not reader.files:
        raise UserError(f"replay: no binlog files in {args.dir}")
    _, snapshot = reader.start(start)
    created = create_tables(target, snapshot)
    if created:
        print(f"replay: made sure of {created} tables of the first file's schema", file=sys.stderr)

    def progress(message: str) -> None:
        print(f"replay: {message}", file=sys.stderr, flush=True)

    summary = replay(args.dir, sink, start, stop, progress)
    print(summary.line())
    return 0
