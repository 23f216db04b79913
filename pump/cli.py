"""``binlog-bridge pump``: store binlogs and serve them to drainers in commit order."""

from __future__ import annotations

import argparse
from typing import Any

from bridge.cli.nodeflags import NODE_FLAG_KEYS, add_node_arguments, flag_overrides
from bridge.config import load
from bridge.startup import run_until_stopped

FLAG_KEYS = NODE_FLAG_KEYS


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "pump",
        help="store binlogs durably and serve them to drainers in commit order",
        description="Run a pump (see docs/pump-operations.md). Flags override the config file.",
    )
    add_node_arguments(
        parser,
        "pump",
        addr="gRPC listen address host:port (default 127.0.0.1:8250)",
        dialed_by="producers and drainers",
        data_dir="where binlogs are stored (default ./var/pump)",
        status="HTTP status/metrics/control address (default 127.0.0.1:8251)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    # Imported here: `binlog-bridge meta` and `ctl` need none of the pump's modules.
    from pump.config import PumpConfig

    config = load(PumpConfig, args.config, flag_overrides(args, FLAG_KEYS))
    from pump.app import serve

    return run_until_stopped(lambda stop: serve(config, stop))
