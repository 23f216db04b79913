"""Background tasks that keep the pump pool current: the registry watch and
the probe of unavailable pumps."""

from __future__ import annotations

import asyncio
import logging

from bridge.errors import BridgeError
from bridge.meta.client import MetaClient
from bridge.proto import meta_pb2
from bridge.pumpclient.pool import PumpPool

log = logging.getLogger(__name__)

_META_RETRY_PAUSE = 1.0


class RegistryWatcher:
    """Long-polls the registry for pumps and hands each answer to the pool.

    While the meta service cannot be reached the pool keeps the last list it
    got; the outage is logged once when it starts and once when it ends.
    """

    def __init__(self, meta: MetaClient, pool: PumpPool, wait: float) -> None:
        self._meta = meta
        self._pool = pool
        self._wait_ms = max(int(wait * 1000), 1)
        self._revision = 0
        self._outage = False

    async def load(self) -> None:
        """One immediate ListNodes; raises MetaError when the meta service cannot answer."""
        self._apply(await self._meta.list_nodes(meta_pb2.PUMP))

    async def run(self) -> None:
        """Watch until cancelled."""
        while True:
            try:
                response = await self._meta.list_nodes(
                    meta_pb2.PUMP, wait_revision=self._revision, wait_ms=self._wait_ms
                )
            except BridgeError as exc:  # MetaUnavailable mostly; any answer-less error alike
                if not self._outage:
                    self._outage = True
                    log.warning("pump registry unreachable, routing with the last known pumps: %s", exc)
                await asyncio.sleep(_META_RETRY_PAUSE)
                continue
            if self._outage:
                self._outage = False
                log.info("pump registry reachable again")
            self._apply(response)

    def _apply(self, response: meta_pb2.ListNodesResponse) -> None:
        for error in response.errors:
            log.warning("pump registry entry unreadable: %s", error)
        self._revision = response.revision
        self._pool.apply_registry(response.nodes)


async def probe_forever(pool: PumpPool, interval: float) -> None:
    """Every ``interval``, probe each unavailable pump with an empty binlog;
    one that answers returns to rotation."""
    while True:
        await asyncio.sleep(interval)
        await probe_unavailable(pool, timeout=interval)


async def probe_unavailable(pool: PumpPool, timeout: float) -> None:
    nodes = pool.unavailable
    if not nodes:
        return
    results = await asyncio.gather(*(node.probe(timeout) for node in nodes))
    for node, answered in zip(nodes, results, strict=True):
        if answered:
            pool.mark_available(node)
        else:
            log.debug("probe of pump %s failed: %s", node.label, node.last_error)
