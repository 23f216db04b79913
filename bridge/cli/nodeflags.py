"""The flags every long-running node command shares (pump, drainer), and how they override its config.

A flag left out is ``None`` and overrides nothing: :func:`bridge.config.load`
keeps the file's value (or the default) for it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

# flag dest -> dotted config key, for the flags add_node_arguments adds
NODE_FLAG_KEYS = {
    "addr": "addr",
    "advertise_addr": "advertise-addr",
    "data_dir": "data-dir",
    "meta": "meta",
    "node_id": "node-id",
    "status_addr": "status-addr",
}


def add_node_arguments(
    parser: argparse.ArgumentParser, kind: str, *, addr: str, dialed_by: str, data_dir: str, status: str
) -> None:
    """``--config`` and the node flags of NODE_FLAG_KEYS; the strings are each flag's help."""
    parser.add_argument("--config", type=Path, help=f"TOML config file (docs/examples/{kind}.toml)")
    parser.add_argument("--addr", help=addr)
    parser.add_argument("--advertise-addr", help=f"address {dialed_by} dial (default --addr)")
    parser.add_argument("--data-dir", help=data_dir)
    parser.add_argument("--meta", help="meta service members host:port, comma-separated")
    parser.add_argument("--node-id", help=f"registry id (default {kind}-<advertise-addr>)")
    parser.add_argument("--status-addr", help=status)


def flag_overrides(args: argparse.Namespace, flag_keys: dict[str, str]) -> dict[str, object]:
    """Config key -> flag value for every flag of ``flag_keys``."""
    return {key: getattr(args, dest) for dest, key in flag_keys.items()}
