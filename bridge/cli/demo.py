"""``binlog-bridge demo``: meta, pumps and a drainer, a workload, catch-up and a diff; exit 0 when equal."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bridge.errors import UserError


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="run the whole pipeline on embedded defaults and check downstream = upstream",
        description=(
            "Start a meta service, pumps and a drainer (sqlite + file sinks) as child processes on "
            "free loopback ports, run `binlog-bridge load` against a SQLite upstream, wait for the "
            "drainer to catch up, then diff upstream and downstream. Exit status 0 only when they "
            "are equal. See docs/demo.md."
        ),
    )
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the load runs (default 30)")
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="an empty or new directory for configs, data and logs (default: a fresh temporary dir)",
    )
    parser.add_argument("--pumps", type=int, default=3, help="number of pumps (default 3)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary data dir after a successful run"
    )
    parser.add_argument(
        "--upstream",
        default="",
        help="upstream DSN instead of the SQLite file, e.g. mysql://root@127.0.0.1:3306/demo",
    )
    parser.add_argument("--concurrency", type=int, default=4, help="load worker threads (default 4)")
    parser.add_argument(
        "--catch-up-timeout",
        type=float,
        default=300.0,
        help="give up when the drainer has not caught up after this many seconds (default 300)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from bridge.apps.demo.errors import DemoError, Interrupted
    from bridge.apps.demo.runner import DemoOptions, run_demo

    if args.seconds <= 0:
        raise UserError(f"--seconds: expected a positive number, got {args.seconds:g}")
    if not 1 <= args.pumps <= 16:
        raise UserError(f"--pumps: expected 1..16, got {args.pumps}")
    options = DemoOptions(
        seconds=args.seconds,
        data_dir=args.data_dir,
        pumps=args.pumps,
        keep=args.keep,
        upstream=args.upstream,
        concurrency=args.concurrency,
        catch_up_timeout=args.catch_up_timeout,
    )
    try:
        summary = run_demo(options, sys.stdout, sys.stderr)
    except DemoError as exc:
        kept = f"\nconfigs, data and logs are in {exc.data_dir}" if exc.data_dir else ""
        print(f"binlog-bridge demo: {exc}{kept}", file=sys.stderr)
        return 128 + exc.signum if isinstance(exc, Interrupted) else 1
    return 0 if summary.equal else 1
