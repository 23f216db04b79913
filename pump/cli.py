"""``binlog-bridge pump``: store binlogs and serve them to drainers in commit order."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bridge.config import load
from bridge.startup import run_until_stopped

# flag dest -> dotted config key
FLAG_KEYS = {
    "addr": "addr",
    "advertise_addr": "advertise-addr",
    "data_dir": "data-dir",
    "meta": "meta",
    "node_id": "node-id",
    "status_addr": "status-addr",
}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "pump",
        help="store binlogs durably and serve them to drainers in commit order",
        description="Run a pump (see docs/pump-operations.md). Flags override the config file.",
    )
    parser.add_argument("--config", type=Path, help="TOML config file (docs/examples/pump.toml)")
    parser.add_argument("--addr", help="gRPC listen address host:port (default 127.0.0.1:8250)")
    parser.add_argument("--advertise-addr", help="address producers and drainers dial (default --addr)")
    parser.add_argument("--data-dir", help="where binlogs are stored (default ./var/pump)")
    parser.add_argument("--meta", help="meta service members host:port, comma-separated")
    parser.add_argument("--node-id", help="registry id (default pump-<advertise-addr>)")
    parser.add_argument("--status-addr", help="HTTP status/metrics/control address (default 127.0.0.1:8251)")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    # Imported here: `binlog-bridge meta` and `ctl` need none of the pump's modules.
    from pump.config import PumpConfig

    overrides = {key: getattr(args, dest) for dest, key in FLAG_KEYS.items()}
    config = load(PumpConfig, args.config, overrides)
    from pump.app import serve

    return run_until_stopped(lambda stop: serve(config, stop))
