"""``binlog-bridge ctl``: ask the meta service for timestamps, nodes and status.

Listings (``nodes``, ``drainers``, ``status``) take ``--output json`` for
scripts (before or after the action): a JSON array of nodes (an object for
``status``) on stdout, one key per column; each node says when it was last
seen. ``--connect-timeout`` bounds the search for the meta leader;
``--timeout`` belongs to ``wait-drainers`` alone (how long it waits).
State changes verify the node's identity first (:mod:`bridge.cli.nodectl`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterable
from typing import Any

from bridge.cli.nodectl import STATE_ACTIONS, find_node, post_state
from bridge.cli.nodegone import OFFLINE_HELP, PRUNE_HELP, REMOVE_HELP, mark_offline, prune, remove
from bridge.config import format_duration
from bridge.errors import UserError
from bridge.grpcutil import SecurityConfig, aio_channel
from bridge.meta.client import DEFAULT_ADDR, MetaClient
from bridge.meta.nodes import KIND_NAMES, STATE_NAMES, wall_time
from bridge.proto import meta_pb2
from bridge.tso import to_datetime

OUTPUTS = ("table", "json")
OUTPUT_HELP = "table (default) or json for scripts"
KIND_CHOICES = {name: kind for kind, name in KIND_NAMES.items()}
WAIT_HELP = """\
Take a fresh timestamp, then wait until every ONLINE drainer's registered
checkpoint passes it: everything committed upstream before this command is
then downstream (a script's step before `binlog-bridge diff`). A drainer that
is down keeps it waiting; after --timeout it exits 1 naming the drainers
behind.
"""
WAIT_POLL_MS = 1000
PROBE_TIMEOUT = 2.0  # seconds `ctl nodes` waits for a pump's gRPC port to accept a connection
NODE_COLUMNS = (
    "KIND",
    "NODE ID",
    "ADDR",
    "STATE",
    "ALIVE",
    "SCORE",
    "LABEL",
    "MAX COMMIT TS",
    "LAST SEEN",
)
DRAINER_COLUMNS = (
    "NODE ID",
    "ADDR",
    "STATE",
    "ALIVE",
    "CHECKPOINT TS",
    "CHECKPOINT TIME",
    "LAG",
    "LAST SEEN",
    "STATUS ADDR",
)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "ctl", help="inspect the cluster: timestamps, nodes, meta status", description=__doc__
    )
    parser.add_argument(
        "--meta", default=DEFAULT_ADDR, help=f"meta members host:port[,host:port] (default {DEFAULT_ADDR})"
    )
    parser.add_argument(
        "--connect-timeout", type=float, default=5.0, help="seconds to find the meta leader (default 5)"
    )
    parser.add_argument("--output", choices=OUTPUTS, default="table", help="of listings: " + OUTPUT_HELP)
    parser.add_argument("--timeout", action=_MisplacedTimeout, help=argparse.SUPPRESS)
    parser.add_argument("--ssl-ca", default="", help="CA bundle for TLS to the meta service")
    parser.add_argument("--ssl-cert", default="", help="client certificate for TLS")
    parser.add_argument("--ssl-key", default="", help="client private key for TLS")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    actions.add_parser("tso", help="print one fresh timestamp")
    nodes = _listing(actions, "nodes", "list registered pumps and drainers")
    nodes.add_argument("--kind", choices=sorted(KIND_CHOICES), help="only this kind of node")
    _listing(actions, "status", "show the meta member answering, the leader and the cluster id")
    _listing(actions, "drainers", "list drainers with their checkpoints and lag")
    wait = actions.add_parser(
        "wait-drainers",
        help="wait until every online drainer's checkpoint passes a fresh timestamp; exit 1 on --timeout",
        description=WAIT_HELP,
    )
    wait.add_argument("--timeout", dest="wait_timeout", type=float, default=60.0, help="seconds (default 60)")
    for action, help_text in STATE_ACTIONS.items():
        state = actions.add_parser(action, help=help_text)
        state.add_argument("node_id", help="the node's registry id (see `ctl nodes`)")
    offline = actions.add_parser(
        "offline",
        help="register a dead pump or drainer OFFLINE so nothing waits for it (see its --help)",
        description=OFFLINE_HELP,
    )
    offline.add_argument("node_id", help="the dead node's registry id (see `ctl nodes`)")
    offline.add_argument("--yes", action="store_true", help="confirm: nothing will wait for this node again")
    removal = actions.add_parser(
        "remove", help="delete a gone node's record (see its --help)", description=REMOVE_HELP
    )
    removal.add_argument("node_id", help="the node's registry id (see `ctl nodes`)")
    removal.add_argument("--yes", action="store_true", help="confirm: the record is deleted for good")
    pruning = _listing(actions, "prune", "delete the records of nodes offline for longer than --older-than")
    pruning.description = PRUNE_HELP
    pruning.add_argument("--older-than", required=True, metavar="DURATION", help='e.g. "7d", "12h", "30m"')
    pruning.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    parser.set_defaults(func=run)
    return parser


class _MisplacedTimeout(argparse.Action):
    """``ctl --timeout`` before the action: it used to bound the leader search, which is
    --connect-timeout now; ``--timeout`` is wait-drainers' time to wait and nothing else."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        parser.error(
            "--timeout goes after wait-drainers (how long it waits); "
            "the time to find the meta leader is --connect-timeout"
        )


def _listing(actions: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    listing: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
    # given here it wins; otherwise the value given before the action (or its default) stays
    listing.add_argument("--output", choices=OUTPUTS, default=argparse.SUPPRESS, help=OUTPUT_HELP)
    return listing


def run(args: argparse.Namespace) -> int:
    security = SecurityConfig(ssl_ca=args.ssl_ca, ssl_cert=args.ssl_cert, ssl_key=args.ssl_key)
    security.validate()
    return asyncio.run(_run(args, security))


async def _run(args: argparse.Namespace, security: SecurityConfig) -> int:
    async with MetaClient(args.meta, security, timeout=args.connect_timeout) as client:
        if args.action == "tso":
            print(await client.get_timestamp())
        elif args.action in ("nodes", "drainers"):
            await list_nodes(client, args, security)
        elif args.action == "offline":
            await mark_offline(client, args.node_id, args.yes, security)
        elif args.action == "remove":
            await remove(client, args.node_id, args.yes, security)
        elif args.action == "prune":
            print_pruned(await prune(client, args.older_than, args.dry_run), args)
        elif args.action == "wait-drainers":
            return await wait_drainers(client, args.wait_timeout)
        elif args.action in STATE_ACTIONS:
            node = await find_node(client, args.node_id)
            reply = post_state(node, args.action, await client.cluster_id(), security)
            print(f"{args.node_id}: {args.action} accepted; state now {reply.get('state', '?')}")
        else:
            print_status(await client.status(), args.output)
    return 0


async def list_nodes(client: MetaClient, args: argparse.Namespace, security: SecurityConfig) -> None:
    """``ctl nodes`` / ``ctl drainers``: a table, or a JSON array of nodes with ``--output json``."""
    if args.action == "drainers":
        kind = meta_pb2.DRAINER
    else:
        kind = KIND_CHOICES[args.kind] if args.kind else meta_pb2.NODE_KIND_UNSPECIFIED
    response = await client.list_nodes(kind)
    for error in response.errors:
        print(f"warning: {error}", file=sys.stderr)
    now = time.time()
    unreachable = await unreachable_pumps(response.nodes, security)
    if args.output == "json":
        rows = [node_json(n, now) for n in response.nodes]
        for row in rows:
            if row["kind"] == "pump" and row["state"] != "offline":
                row["reachable"] = row["node_id"] not in unreachable
        print(json.dumps(rows, indent=1))
    elif args.action == "drainers":
        print_table([drainer_row(n, now) for n in response.nodes], DRAINER_COLUMNS)
        print_failures(response.nodes)
    else:
        print_table([node_row(n, now) for n in response.nodes])
        print_failures(response.nodes)
        print_unreachable(response.nodes, unreachable)


async def unreachable_pumps(nodes: Iterable[meta_pb2.NodeStatus], security: SecurityConfig) -> dict[str, str]:
    """node id -> why, for each registered pump that is not OFFLINE and whose gRPC
    address accepts no connection from here within PROBE_TIMEOUT (drainers wait for it)."""
    pumps = [n for n in nodes if n.kind == meta_pb2.PUMP and n.state != meta_pb2.OFFLINE]

    async def probe(node: meta_pb2.NodeStatus) -> str:
        channel = aio_channel(node.addr, security)
        try:
            await asyncio.wait_for(channel.channel_ready(), PROBE_TIMEOUT)
        except TimeoutError:
            return f"no connection to {node.addr} within {PROBE_TIMEOUT:g}s"
        finally:
            await channel.close()
        return ""

    answers = await asyncio.gather(*(probe(n) for n in pumps))
    return {n.node_id: why for n, why in zip(pumps, answers, strict=True) if why}


def print_unreachable(nodes: Iterable[meta_pb2.NodeStatus], unreachable: dict[str, str]) -> None:
    """Under the table, one line per registered pump nothing answers at."""
    for node in nodes:
        if node.node_id in unreachable and node.kind == meta_pb2.PUMP:
            print(
                f"pump {node.node_id} is unreachable: {unreachable[node.node_id]}; drainers wait for it "
                f"(never skip it); if it is gone for good: binlog-bridge ctl offline {node.node_id}"
            )


def print_failures(nodes: Iterable[meta_pb2.NodeStatus]) -> None:
    """Under the table, one line per FAILED node: when it halted and on what."""
    for node in nodes:
        if node.state == meta_pb2.FAILED:
            when = wall_time(node.error_ms) or "?"
            error = " ".join(node.error.split()) or "(no error recorded)"
            print(f"{KIND_NAMES.get(node.kind, '?')} {node.node_id} failed at {when}: {error}")


def print_pruned(gone: list[meta_pb2.NodeStatus], args: argparse.Namespace) -> None:
    """What ``ctl prune`` deleted (or would delete): a table or a JSON array, and a summary on stderr."""
    if args.output == "json":
        print(json.dumps([node_json(n, time.time()) for n in gone], indent=1))
    elif gone:
        print_table([node_row(n, time.time()) for n in gone])
    verb = "would delete" if args.dry_run else "deleted"
    print(f"ctl prune: {verb} {len(gone)} record(s) offline longer than {args.older_than}", file=sys.stderr)


def print_status(status: meta_pb2.StatusResponse, output: str) -> None:
    if output == "json":
        fields = ("member_id", "is_leader", "leader_addr", "backend", "cluster_id")
        print(json.dumps({name: getattr(status, name) for name in fields}, indent=1))
        return
    print(f"member:     {status.member_id}")
    print(f"leader:     {'yes' if status.is_leader else 'no'} ({status.leader_addr or 'unknown'})")
    print(f"backend:    {status.backend}")
    print(f"cluster id: {status.cluster_id}")


async def wait_drainers(client: MetaClient, timeout: float) -> int:
    """``ctl wait-drainers`` (see WAIT_HELP): 0 once every online drainer is past a fresh ts, 1 on timeout."""
    target = await client.get_timestamp()
    deadline = time.monotonic() + timeout
    revision = 0
    while True:
        response = await client.list_nodes(meta_pb2.DRAINER, revision, WAIT_POLL_MS)
        online = [d for d in response.nodes if d.state == meta_pb2.ONLINE]
        if not online:
            raise UserError("no online drainer in the registry: nothing to wait for")
        behind = [d for d in online if d.max_commit_ts < target]
        if not behind:
            print(f"every online drainer is past {target}: {', '.join(d.node_id for d in online)}")
            return 0
        if time.monotonic() >= deadline:
            late = ", ".join(
                f"{d.node_id} at {d.max_commit_ts}{'' if d.is_alive else ' (not alive)'}" for d in behind
            )
            print(f"ctl wait-drainers: after {timeout:g}s still behind {target}: {late}", file=sys.stderr)
            return 1
        revision = response.revision


def _iso(ts: int) -> str | None:
    return to_datetime(ts).isoformat() if ts else None


def node_json(node: meta_pb2.NodeStatus, now: float) -> dict[str, object]:
    """One node for ``--output json``: the registry's fields, times also as ISO 8601 (UTC).

    For a drainer ``max_commit_ts`` is its checkpoint; ``lag_seconds`` is how
    far that is behind ``now`` (None without a checkpoint).
    """
    when = to_datetime(node.max_commit_ts) if node.max_commit_ts else None
    return {
        "kind": KIND_NAMES.get(node.kind, "?"),
        "node_id": node.node_id,
        "addr": node.addr,
        "status_addr": node.status_addr or None,
        "state": STATE_NAMES.get(node.state, "?"),
        "alive": node.is_alive,
        "score": node.score,
        "label": node.label or None,
        "max_commit_ts": node.max_commit_ts,
        "max_commit_time": when.isoformat() if when else None,
        "lag_seconds": round(max(now - when.timestamp(), 0.0), 3) if when else None,
        "update_ts": node.update_ts,
        "last_heartbeat": _iso(node.update_ts),
        "last_seen_seconds": last_seen_seconds(node, now),
        "ttl_ms": node.ttl_ms,
        "error": node.error or None,
        "error_time": wall_time(node.error_ms),
    }


def last_seen_seconds(node: meta_pb2.NodeStatus, now: float) -> float | None:
    """Seconds since the node's last heartbeat (None if it never sent one)."""
    return round(max(now - to_datetime(node.update_ts).timestamp(), 0.0), 1) if node.update_ts else None


def seen(node: meta_pb2.NodeStatus, now: float) -> str:
    """``12.3s ago``, ``42m ago``, ``5h ago``: how long the node has been silent (``-``: never heard)."""
    seconds = last_seen_seconds(node, now)
    if seconds is None:
        return "-"
    return f"{format_duration(seconds)} ago"


def node_row(node: meta_pb2.NodeStatus, now: float) -> tuple[str, ...]:
    return (
        KIND_NAMES.get(node.kind, "?"),
        node.node_id,
        node.addr,
        STATE_NAMES.get(node.state, "?"),
        "yes" if node.is_alive else "no",
        str(node.score),
        node.label or "-",
        str(node.max_commit_ts),
        seen(node, now),
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
        seen(node, now),
        node.status_addr or "-",
    )


def print_table(rows: list[tuple[str, ...]], columns: tuple[str, ...] = NODE_COLUMNS) -> None:
    widths = [max(len(c) for c in column) for column in zip(columns, *rows, strict=False)]
    for row in (columns, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
