"""``binlog-bridge ctl offline|remove|prune``: nodes that are gone for good.

``offline`` registers a dead node OFFLINE so nothing waits for it;
``remove`` deletes one gone node's record; ``prune`` deletes the records of
every node OFFLINE (and not alive) for longer than an age. A node that is
alive, or that still answers as itself at its status address, is refused:
it is closed with ``ctl close`` instead.
"""

from __future__ import annotations

import asyncio
import time

from bridge.cli.nodectl import answers_as_itself, find_node
from bridge.config import parse_duration
from bridge.errors import ConfigError, UserError
from bridge.grpcutil import SecurityConfig
from bridge.meta.client import MetaClient
from bridge.meta.nodes import KIND_NAMES
from bridge.proto import meta_pb2
from bridge.tso import physical_ms

OFFLINE_HELP = """\
Register a node that is gone for good (its disk lost, its host retired) as
OFFLINE. A pump: drainers stop holding their merge for it; binlogs only that
pump held and no drainer pulled are given up (drainers let it go at once). A
drainer: closing pumps and pump GC stop waiting for its checkpoint. A live
node is closed with `ctl close` instead; this command refuses a node whose
heartbeat is alive or that still answers as itself at its status address,
and needs --yes.
"""
REMOVE_HELP = """\
Delete the registry record of a node that is gone for good, so `ctl nodes`
stops listing it. A drainer that is not OFFLINE yet is first registered
OFFLINE as `ctl offline` does (same checks); a pump must be taken OFFLINE
with `ctl offline` first, so that drainers see it let go before its record
disappears. Needs --yes.
"""
PRUNE_HELP = """\
Delete the registry records of every node that is OFFLINE, not alive, and
whose last heartbeat is older than --older-than (closed pumps, drainers
taken offline). Prints what it deleted (or, with --dry-run, would delete).
"""
OFFLINE_TTL_MS = 1000  # the record written here is not a sign of life: let it expire quickly
WAIT_POLL_MS = 500


async def mark_offline(client: MetaClient, node_id: str, confirmed: bool, security: SecurityConfig) -> None:
    """``ctl offline``: register a pump or drainer that is gone for good OFFLINE (see OFFLINE_HELP)."""
    node = await find_node(client, node_id)
    kind = KIND_NAMES.get(node.kind, "node")
    if node.state == meta_pb2.OFFLINE:
        print(f"{node_id}: already offline")
        return
    if node.is_alive:
        raise UserError(
            f"{kind} {node_id} is alive (its last heartbeat is within its ttl): "
            f"close it with `binlog-bridge ctl close {node_id}`, or retry once it is gone"
        )
    if answers_as_itself(node, await client.cluster_id(), security):
        raise UserError(
            f"{kind} {node_id} still answers at {node.status_addr}: "
            f"close it with `binlog-bridge ctl close {node_id}`"
        )
    if not confirmed:
        lost = (
            "whatever it holds unpulled is given up" if node.kind == meta_pb2.PUMP else "its sink stops here"
        )
        raise UserError(f"{kind} {node_id} would be let go for good ({lost}); add --yes to confirm")
    record = meta_pb2.NodeStatus()
    record.CopyFrom(node)
    record.state = meta_pb2.OFFLINE
    if node.kind == meta_pb2.PUMP:
        record.max_commit_ts = 0  # nothing left to drain: drainers let it go at once
    record.ttl_ms = OFFLINE_TTL_MS
    await client.heartbeat(record)
    waiting = "drainers stop waiting for it" if node.kind == meta_pb2.PUMP else "pumps stop waiting for it"
    print(f"{node_id}: registered offline; {waiting}")


async def remove(client: MetaClient, node_id: str, confirmed: bool, security: SecurityConfig) -> None:
    """``ctl remove``: delete a gone node's record (see REMOVE_HELP)."""
    node = await find_node(client, node_id)
    kind = KIND_NAMES.get(node.kind, "node")
    if node.state != meta_pb2.OFFLINE and node.kind == meta_pb2.PUMP:
        raise UserError(
            f"pump {node_id} is {'alive' if node.is_alive else 'not offline'}: take it offline first "
            f"(`binlog-bridge ctl close {node_id}`, or `ctl offline {node_id} --yes` if it is gone)"
        )
    if not confirmed:
        raise UserError(f"{kind} {node_id}'s record would be deleted for good; add --yes to confirm")
    if node.state != meta_pb2.OFFLINE:
        await mark_offline(client, node_id, confirmed, security)
    await _wait_not_alive(client, node)
    await client.remove_node(node.kind, node_id)
    print(f"{node_id}: record deleted; `ctl nodes` no longer lists it")


async def _wait_not_alive(client: MetaClient, node: meta_pb2.NodeStatus) -> None:
    """Until the registry says ``node`` is not alive (an OFFLINE record lives OFFLINE_TTL_MS)."""
    revision = 0
    while True:
        response = await client.list_nodes(node.kind, revision, WAIT_POLL_MS)
        current = [n for n in response.nodes if n.node_id == node.node_id]
        if not current or not current[0].is_alive:
            return
        if current[0].state != meta_pb2.OFFLINE:
            raise UserError(f"{node.node_id} came back ({current[0].state}); nothing deleted")
        revision = response.revision


async def prune(client: MetaClient, older_than: str, dry_run: bool) -> list[meta_pb2.NodeStatus]:
    """``ctl prune``: delete (or with ``dry_run`` only list) the records PRUNE_HELP describes."""
    try:
        age = parse_duration(older_than, "--older-than")
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    cutoff_ms = time.time() * 1000 - age * 1000
    response = await client.list_nodes()
    gone = [
        n
        for n in response.nodes
        if n.state == meta_pb2.OFFLINE and not n.is_alive and physical_ms(n.update_ts) < cutoff_ms
    ]
    if not dry_run:
        await asyncio.gather(*(client.remove_node(n.kind, n.node_id) for n in gone))
    return gone
