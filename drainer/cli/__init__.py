"""``binlog-bridge drainer``: merge every pump's binlog by commit_ts and drive a sink."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bridge.startup import run_until_stopped

# flag dest -> config key
FLAG_KEYS = {
    "addr": "addr",
    "advertise_addr": "advertise-addr",
    "data_dir": "data-dir",
    "meta": "meta",
    "node_id": "node-id",
    "status_addr": "status-addr",
    "initial_commit_ts": "initial-commit-ts",
    "relay_dir": "relay.dir",
}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "drainer",
        help="merge the pumps' binlog in commit order and apply it to a sink",
        description="Run a drainer (see docs/drainer.md). Flags override the config file.",
    )
    parser.add_argument("--config", type=Path, help="TOML config file (docs/examples/drainer.toml)")
    parser.add_argument("--addr", help="gRPC listen address for Notify (default 127.0.0.1:8249)")
    parser.add_argument("--advertise-addr", help="address pumps dial (default --addr)")
    parser.add_argument("--data-dir", help="checkpoint and sink files (default ./var/drainer)")
    parser.add_argument("--meta", help="meta service members host:port, comma-separated")
    parser.add_argument("--node-id", help="registry id (default drainer-<advertise-addr>)")
    parser.add_argument("--status-addr", help="HTTP /status and /metrics address (default 127.0.0.1:8252)")
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
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    # Imported here: other sub-commands need none of the drainer's modules.
    from drainer.config import load_config

    overrides = {key: getattr(args, dest) for dest, key in FLAG_KEYS.items()}
    config = load_config(args.config, overrides)
    from drainer.app import serve

    return run_until_stopped(lambda stop: serve(config, stop))
