"""One member of the meta service and its leadership cycle.

A member campaigns through its store. While it leads, its timestamp oracle
and registry serve; when the store reports leadership lost, both stop at
once and the member campaigns again. With the local backend the member leads
from start to shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bridge.apps.meta.oracle import Clock, TimestampOracle, wall_clock_ms
from bridge.apps.meta.registry import Registry
from bridge.apps.meta.store import MetaStore
from bridge.errors import NotLeader, StoreError

log = logging.getLogger(__name__)


class MetaMember:
    """Leads or follows; owns the oracle and the registry it serves while leading."""

    def __init__(
        self,
        store: MetaStore,
        member_id: str,
        save_interval_ms: int = 3000,
        poll_interval: float = 0.2,
        clock: Clock = wall_clock_ms,
    ) -> None:
        self.store = store
        self.member_id = member_id
        self.oracle = TimestampOracle(store.save_tso_limit, save_interval_ms, clock)
        self.registry = Registry(self._stamp, store.save_node, clock, delete=store.delete_node)
        self.cluster_id = 0
        self.is_leader = False
        self._poll = poll_interval
        self._tasks: list[asyncio.Task[None]] = []
        self._seen_leader = ""

    async def _stamp(self) -> int:
        return await self.oracle.allocate(1)

    @property
    def backend(self) -> str:
        return self.store.backend

    def leader_addr(self) -> str:
        return self.store.leader_addr()

    async def start(self) -> None:
        """Open the store and make one leadership attempt; store errors here are fatal."""
        self.cluster_id = await self.store.open()
        try:
            if await self.store.try_acquire():
                await self._become_leader()
        except BaseException:
            await self.store.close()
            raise
        self._note_follower()
        self._tasks = [
            asyncio.create_task(self._run(), name="meta-leadership"),
            asyncio.create_task(self.registry.run_ticker(), name="meta-registry-ticker"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self._step_down("shutting down", expected=True)
        await self.store.close()

    async def _run(self) -> None:
        while True:
            if self.is_leader:
                await self.store.leadership_lost()
                await self._step_down("leadership lost")
            elif await self.store.try_acquire():
                try:
                    await self._become_leader()
                except (StoreError, NotLeader) as exc:
                    log.warning("could not take over as leader: %s", exc)
                    await self._step_down("take-over failed")
                    try:
                        await self.store.resign()
                    except StoreError as resign_exc:
                        log.warning("could not resign (the lease will expire): %s", resign_exc)
                    await asyncio.sleep(self._poll)
            else:
                self._note_follower()
                await asyncio.sleep(self._poll)

    async def _become_leader(self) -> None:
        limit = await self.store.load_tso_limit()
        await self.oracle.start(limit)
        loaded = await self.store.load_nodes()
        self.registry.start(loaded, revision=await self.oracle.allocate(1))
        self.is_leader = True
        self._seen_leader = ""
        log.info(
            "meta member %s is the leader (%s backend, %d nodes registered)",
            self.member_id,
            self.backend,
            len(loaded.nodes),
        )

    async def _step_down(self, reason: str, expected: bool = False) -> None:
        was_leader, self.is_leader = self.is_leader, False
        await self.oracle.stop()
        self.registry.stop()
        if was_leader:
            level = logging.INFO if expected else logging.WARNING
            log.log(level, "meta member %s stopped leading: %s", self.member_id, reason)

    def _note_follower(self) -> None:
        if self.is_leader:
            return
        leader = self.leader_addr()
        if leader != self._seen_leader:
            self._seen_leader = leader
            log.info("meta member %s follows leader %s", self.member_id, leader or "(none yet)")
