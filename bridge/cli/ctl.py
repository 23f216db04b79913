"""``binlog-bridge ctl``: ask the meta service for timestamps, nodes and status."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from bridge.cli.nodectl import STATE_ACTIONS, find_node, post_state
from bridge.errors import UserError
from bridge.grpcutil import SecurityConfig
from bridge.meta.client import DEFAULT_ADDR, MetaClient
from bridge.meta.nodes import KIND_NAMES, STATE_NAMES
from bridge.proto import meta_pb2
from bridge.tso import to_datetime

KIND_CHOICES = {name: kind for kind, name in KIND_NAMES.items()}
OFFLINE_HELP = """\
Register a pump that is gone for good (its disk lost, its host retired) as
OFFLINE, so drainers stop holding their merge for it. A live pump is closed
with `ctl close` instead, which waits until drainers have everything; this
command refuses a pump whose heartbeat is alive. Binlogs only that pump held
and no drainer pulled are given up: drainers let it go at once.
"""
OFFLINE_TTL_MS = 1000  # the record written here is not a sign of life: let it expire quickly
NODE_COLUMNS = (
    "KIND",
    "NODE ID",
    "ADDR",
    "STATE",
    "ALIVE",
    "SCORE",
    "LABEL",
    "MAX COMMIT TS",
    "LAST HEARTBEAT",
)
DRAINER_COLUMNS = (
    "NODE ID",
    "ADDR",
    "STATE",
    "ALIVE",
    "CHECKPOINT TS",
    "CHECKPOINT TIME",
    "LAG",
    "STATUS ADDR",
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "ctl", help="inspect the cluster: timestamps, nodes, meta status", description=__doc__
    )
    parser.add_argument(
        "--meta", default=DEFAULT_ADDR, help=f"meta members host:port[,host:port] (default {DEFAULT_ADDR})"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to find the leader (default 5)")
    parser.add_argument("--ssl-ca", default="", help="CA bundle for TLS to the meta service")
    parser.add_argument("--ssl-cert", default="", help="client certificate for TLS")
    parser.add_argument("--ssl-key", default="", help="client private key for TLS")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("tso", help="print one fresh timestamp")
    nodes = actions.add_parser("nodes", help="list registered pumps and drainers")
    nodes.add_argument("--kind", choices=sorted(KIND_CHOICES), help="only this kind of node")
    actions.add_parser("status", help="show the meta member answering, the leader and the cluster id")
    actions.add_parser("drainers", help="list drainers with their checkpoints and lag")
    for action, help_text in STATE_ACTIONS.items():
        state = actions.add_parser(action, help=help_text)
        state.add_argument("node_id", help="the node's registry id (see `ctl nodes`)")
    offline = actions.add_parser(
        "offline",
        help="register a dead pump OFFLINE so drainers stop waiting for it (loses what it never served)",
        description=OFFLINE_HELP,
    )
    offline.add_argument("node_id", help="the dead pump's registry id (see `ctl nodes`)")
    offline.add_argument("--yes", action="store_true", help="confirm: binlogs only it holds are given up")
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    security = SecurityConfig(ssl_ca=args.ssl_ca, ssl_cert=args.ssl_cert, ssl_key=args.ssl_key)
    security.validate()
    return asyncio.run(_run(args, security))


async def _run(args: argparse.Namespace, security: SecurityConfig) -> int:
    async with MetaClient(args.meta, security, timeout=args.timeout) as client:
        if args.action == "tso":
            print(await client.get_timestamp())
        elif args.action == "nodes":
            kind = KIND_CHOICES[args.kind] if args.kind else meta_pb2.NODE_KIND_UNSPECIFIED
            response = await client.list_nodes(kind)
            for error in response.errors:
                print(f"warning: {error}", file=sys.stderr)
            print_table([node_row(n) for n in response.nodes])
        elif args.action == "drainers":
            response = await client.list_nodes(meta_pb2.DRAINER)
            print_table([drainer_row(n, time.time()) for n in response.nodes], DRAINER_COLUMNS)
        elif args.action == "offline":
            await mark_offline(client, args.node_id, args.yes)
        elif args.action in STATE_ACTIONS:
            node = await find_node(client, args.node_id)
            reply = post_state(node, args.action, security)
            print(f"{args.node_id}: {args.action} accepted; state now {reply.get('state', '?')}")
        else:
            status = await client.status()
            print(f"member:     {status.member_id}")
            print(f"leader:     {'yes' if status.is_leader else 'no'} ({status.leader_addr or 'unknown'})")
            print(f"backend:    {status.backend}")
            print(f"cluster id: {status.cluster_id}")
    return 0


async def mark_offline(client: MetaClient, node_id: str, confirmed: bool) -> None:
    node = await find_node(client, node_id)
    if node.kind != meta_pb2.PUMP:
        raise UserError(f"{node_id} is not a pump; only a dead pump is marked offline by hand")
    if node.is_alive:
        raise UserError(f"pump {node_id} is alive: close it with `binlog-bridge ctl close {node_id}`")
    if node.state == meta_pb2.OFFLINE:
        print(f"{node_id}: already offline")
        return
    if not confirmed:
        raise UserError(
            f"pump {node_id} would be let go with whatever it holds unpulled; add --yes to confirm"
        )
    record = meta_pb2.NodeStatus()
    record.CopyFrom(node)
    record.state = meta_pb2.OFFLINE
    record.max_commit_ts = 0  # nothing left to drain: drainers let it go at once
    record.ttl_ms = OFFLINE_TTL_MS
    await client.heartbeat(record)
    print(f"{node_id}: registered offline; drainers stop waiting for it")


def node_row(node: meta_pb2.NodeStatus) -> tuple[str, ...]:
    heartbeat = to_datetime(node.update_ts).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if node.update_ts else "-"
    return (
        KIND_NAMES.get(node.kind, "?"),
        node.node_id,
        node.addr,
        STATE_NAMES.get(node.state, "?"),
        "yes" if node.is_alive else "no",
        str(node.score),
        node.label or "-",
        str(node.max_commit_ts),
        heartbeat,
    )


def drainer_row(node: meta_pb2.NodeStatus, now: float) -> tuple[str, ...]:
    """A drainer's registered checkpoint (its ``max_commit_ts``) and how far it is behind now."""
    checkpoint = node.max_commit_ts
    when = to_datetime(checkpoint) if checkpoint else None
    return (
        node.node_id,
        node.addr,
        STATE_NAMES.get(node.state, "?"),
        "yes" if node.is_alive else "no",
        str(checkpoint),
        when.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] if when else "-",
        f"{max(now - when.timestamp(), 0):.1f}s" if when else "-",
        node.status_addr or "-",
    )


def print_table(rows: list[tuple[str, ...]], columns: tuple[str, ...] = NODE_COLUMNS) -> None:
    widths = [max(len(c) for c in column) for column in zip(columns, *rows, strict=False)]
    for row in (columns, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
