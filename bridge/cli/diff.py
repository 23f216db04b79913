"""``binlog-bridge diff``: compare upstream and downstream tables row by row.

Prints one line per table on stdout as it is compared (``equal``, or what
differs: missing, extra and different rows by key, values truncated; a table
one side lacks as such) and a summary; stderr gets only progress within large
tables. Exits 0 when every table is equal, 1 when anything differs, 2 on bad
arguments, 3 when a database does not answer (docs/operations.md, "Exit
status and error lines"). DSNs: ``sqlite:///file.db``, ``sqlite:///sink-dir``
(one file per database, as the sqlite sink writes; ``?database=NAME`` reads a file as
database NAME, or only NAME.db of a sink directory), ``mysql://user@host:port/db``
(without ``/db``: every user database). A MySQL password may come from
``BRIDGE_UPSTREAM_PASSWORD`` instead of the DSN. Bridge-internal tables
(``bridge_txn_status``, ``_bridge_*``) are skipped.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "diff", help="compare upstream and downstream tables; exit 1 when they differ", description=__doc__
    )
    parser.add_argument("--upstream", required=True, metavar="DSN", help="the source of truth")
    parser.add_argument("--downstream", required=True, metavar="DSN", help="the replica to check")
    parser.add_argument(
        "--tables", default=None, help="comma-separated db.table or table names (default: all)"
    )
    parser.add_argument(
        "--chunk-size", type=int, default=10_000, help="rows per checksum chunk (default 10000)"
    )
    parser.add_argument(
        "--max-examples", type=int, default=10, help="differing rows shown per table (default 10)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from bridge.apps.diff import diff
    from bridge.apps.diff.report import TableReport
    from bridge.errors import UserError

    if args.chunk_size < 1:
        raise UserError("--chunk-size: must be at least 1")
    tables = [t.strip() for t in args.tables.split(",") if t.strip()] if args.tables else None

    def progress(message: str) -> None:
        print(f"diff: {message}", file=sys.stderr, flush=True)

    def table_done(table: TableReport) -> None:  # on stdout as it is done; stderr has no copy of it
        print("\n".join(table.lines()), flush=True)

    report = diff(
        args.upstream,
        args.downstream,
        tables,
        chunk_size=args.chunk_size,
        max_examples=args.max_examples,
        progress=None if args.quiet else progress,
        table_done=table_done,
    )
    print(report.summary())
    return 0 if report.equal else 1
