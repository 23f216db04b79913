"""The client's view of the pump cluster: every pump the registry lists, the
available list that routes Prewrites, and the unavailable list that is probed.

- A pump is a *candidate* while the registry shows it ONLINE and alive.
- ``available``: candidates that are not failing. The selector routes among them.
- ``unavailable``: candidates that failed ``max-errors`` calls in a row, or
  whose process did not answer at all. Only a successful probe (an empty
  binlog) returns a pump from here, whatever the registry says meanwhile.
- Pumps the registry lists in another state (paused, closing, offline, or
  not alive) take no Prewrite, but a Commit or Rollback still goes to them
  when they hold its Prewrite.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from bridge.proto import meta_pb2
from bridge.pumpclient import metrics
from bridge.pumpclient.busy import Activity
from bridge.pumpclient.config import PumpClientConfig
from bridge.pumpclient.node import PumpNode
from bridge.pumpclient.selector import PumpWeight, make_selector

log = logging.getLogger(__name__)


class PumpPool:
    """Pumps by node id, the two lists, and the selector over the available one."""

    def __init__(self, config: PumpClientConfig, cluster_id: int, activity: Activity | None = None) -> None:
        self._config = config
        self._activity = activity
        self._gather = config.strategy == "range" and config.batch_linger > 0
        self._target: PumpNode | None = None  # the pump the batch of Prewrites gathers on
        self._routed: dict[str, int] = {}  # Prewrites routed to each pump while gathering
        self._cluster_id = cluster_id
        self._selector = make_selector(config.strategy)
        self._nodes: dict[str, PumpNode] = {}
        self._closing: set[asyncio.Task[None]] = set()
        # Replaced, never mutated: other threads may read them.
        self.available: tuple[PumpNode, ...] = ()
        self.unavailable: tuple[PumpNode, ...] = ()

    def get(self, node_id: str) -> PumpNode | None:
        return self._nodes.get(node_id)

    def nodes(self) -> list[PumpNode]:
        return list(self._nodes.values())

    def prewrite_candidates(self, start_ts: int) -> list[PumpNode]:
        """Available pumps in the selector's order, then the unavailable ones as a last resort.

        With the ``range`` strategy and ``batch-linger``, while the pump picked for the
        last Prewrite is still gathering its batch (the client is busy), it comes first:
        the Prewrites of that moment leave in one call instead of one call per pump. The
        next batch starts on the pump that took the fewest Prewrites so far (batches
        differ in size; plain round robin over batches would not balance the pumps).
        A pump gathering Commits attracts no Prewrites."""
        ordered = [self._nodes[node_id] for node_id in self._selector.preference(start_ts)]
        if self._gather and ordered:
            target = self._target
            if target is None or not target.gathering or target not in ordered:
                target = self._target = self._least_routed(ordered)  # it starts the next batch
            ordered.remove(target)  # the Prewrites of this moment follow the first one
            ordered.insert(0, target)
            self._routed[target.node_id] += 1
        return ordered + list(self.unavailable)

    def _least_routed(self, ordered: list[PumpNode]) -> PumpNode:
        """The pump that took the fewest Prewrites so far (the first in round-robin order on a
        tie), so batches of different sizes still spread the Prewrites evenly; a pump new to
        this client starts level with the least loaded one, not at zero."""
        routed = self._routed
        floor = min((routed[n.node_id] for n in ordered if n.node_id in routed), default=0)
        for node in ordered:
            routed.setdefault(node.node_id, floor)
        return min(ordered, key=lambda node: routed[node.node_id])

    def apply_registry(self, statuses: Sequence[meta_pb2.NodeStatus]) -> None:
        """Take in a ListNodes answer (pumps only)."""
        listed: set[str] = set()
        for status in statuses:
            listed.add(status.node_id)
            node = self._nodes.get(status.node_id)
            if node is not None and node.addr != status.addr:
                log.info("pump %s moved from %s to %s", status.node_id, node.addr, status.addr)
                self._retire(node)
                node = None
            if node is None:
                node = PumpNode(
                    status.node_id,
                    status.addr,
                    self._config,
                    self._cluster_id,
                    self.on_failure,
                    self._activity,
                )
                self._nodes[status.node_id] = node
            node.score = status.score
            node.candidate = status.state == meta_pb2.ONLINE and status.is_alive
        for node_id in [n for n in self._nodes if n not in listed]:
            log.info("pump %s left the registry", node_id)
            self._retire(self._nodes[node_id])
        self._refresh()

    def on_failure(self, node: PumpNode, gone: bool) -> None:
        """A call to ``node`` failed: maybe move it to the unavailable list."""
        if node.failed or self._nodes.get(node.node_id) is not node:
            return
        if gone or node.consecutive_errors >= self._config.max_errors:
            node.failed = True
            log.warning(
                "pump %s is unavailable after %d failed call(s): %s",
                node.label,
                node.consecutive_errors,
                node.last_error,
            )
            self._refresh()

    def mark_available(self, node: PumpNode) -> None:
        """A probe succeeded: return ``node`` to rotation."""
        if node.failed and self._nodes.get(node.node_id) is node:
            node.failed = False
            log.info("pump %s answers again; back in rotation", node.label)
            self._refresh()

    async def close(self) -> None:
        for node in list(self._nodes.values()):
            self._retire(node)
        self._refresh()
        if self._closing:
            await asyncio.wait(set(self._closing))

    def _retire(self, node: PumpNode) -> None:
        del self._nodes[node.node_id]
        task = asyncio.create_task(
            node.close(grace=self._config.rpc_timeout), name=f"close-pump-{node.node_id}"
        )
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _refresh(self) -> None:
        ordered = sorted(self._nodes.values(), key=lambda n: n.node_id)
        self.available = tuple(n for n in ordered if n.candidate and not n.failed)
        self.unavailable = tuple(n for n in ordered if n.candidate and n.failed)
        self._selector.set_pumps([PumpWeight(n.node_id, n.score) for n in self.available])
        metrics.AVAILABLE_PUMPS.set(len(self.available))
