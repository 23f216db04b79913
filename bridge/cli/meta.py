"""``binlog-bridge meta``: serve timestamps and the node registry."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from bridge.apps.meta.config import MetaConfig
from bridge.apps.meta.server import MetaServer
from bridge.config import describe, load
from bridge.startup import run_until_stopped

log = logging.getLogger(__name__)

# flag dest -> dotted config key
FLAG_KEYS = {
    "data_dir": "data-dir",
    "addr": "addr",
    "advertise_addr": "advertise-addr",
    "etcd": "etcd",
    "etcd_prefix": "etcd-prefix",
    "name": "name",
    "status_addr": "status-addr",
}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "meta",
        help="serve timestamps and the node registry (the PD role)",
        description="Serve the timestamp oracle and node registry. Flags override the config file.",
    )
    parser.add_argument("--config", type=Path, help="TOML config file")
    parser.add_argument("--data-dir", help="local backend state directory (default ./var/meta)")
    parser.add_argument("--addr", help="gRPC listen address host:port (default 127.0.0.1:8248)")
    parser.add_argument("--advertise-addr", help="address clients and other members dial (default --addr)")
    parser.add_argument("--etcd", help="etcd URLs, comma-separated (default: none = local backend)")
    parser.add_argument("--etcd-prefix", help="key prefix in etcd (default /binlog-bridge/v1)")
    parser.add_argument("--name", help="member id (default meta-<advertise-addr>)")
    parser.add_argument("--status-addr", help="HTTP /status and /metrics, e.g. 127.0.0.1:8247 (default off)")
    parser.set_defaults(func=run)
    return parser


def load_config(args: argparse.Namespace) -> MetaConfig:
    overrides = {key: getattr(args, dest) for dest, key in FLAG_KEYS.items()}
    return load(MetaConfig, args.config, overrides)


def run(args: argparse.Namespace) -> int:
    config = load_config(args)
    for line in describe(config):
        log.debug("config: %s", line)
    return run_until_stopped(lambda stop: serve(config, stop))


async def serve(config: MetaConfig, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then shut down cleanly."""
    server = MetaServer(config)
    try:
        await server.start()
        print(server.ready_line(), file=sys.stderr, flush=True)
        await stop.wait()
        log.info("meta: shutting down")
    finally:
        await server.stop()
