"""``binlog-bridge drainer``: merge every pump's binlog by commit_ts and drive a sink."""

from __future__ import annotations

import argparse
from typing import Any

from bridge.cli.nodeflags import NODE_FLAG_KEYS, add_node_arguments, flag_overrides
from bridge.startup import run_until_stopped

# flag dest -> config key
FLAG_KEYS = {**NODE_FLAG_KEYS, "initial_commit_ts": "initial-commit-ts", "relay_dir": "relay.dir"}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "drainer",
        help="merge the pumps' binlog in commit order and apply it to a sink",
        description="Run a drainer (see docs/drainer.md). Flags override the config file.",
    )
    add_node_arguments(
        parser,
        "drainer",
        addr="gRPC listen address for Notify (default 127.0.0.1:8249)",
        dialed_by="pumps",
        data_dir="checkpoint and sink files (default ./var/drainer)",
        status="HTTP /status and /metrics address (default 127.0.0.1:8252)",
    )
    parser.add_argument(
        "--initial-commit-ts",
        type=int,
        help="where to start when there is no checkpoint yet (default 0: from the beginning)",
    )
    parser.add_argument(
        "--relay-dir",
        help="relay log directory ([relay] dir; relative: in data-dir). With it, a start that cannot "
        "reach the meta service replays the relay log into the sink and exits (docs/drainer-recovery.md)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check that the sink can be used (connect, log in, privileges, broker metadata, "
        "PING), print one line and exit: 0 when it can, 2 when it cannot",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    # Imported here: other sub-commands need none of the drainer's modules.
    from drainer.config import load_config

    config = load_config(args.config, flag_overrides(args, FLAG_KEYS))
    from drainer.app import check_sink, serve

    if args.check:
        print(check_sink(config))
        return 0

    return run_until_stopped(lambda stop: serve(config, stop))
