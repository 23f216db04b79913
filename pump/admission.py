"""The pump's states and which writes each one admits.

============  ===========  ==================  =====  ===================
state         Prewrites    Commits/Rollbacks   pulls  registry NodeState
============  ===========  ==================  =====  ===================
joining       no           no                  yes    PAUSED
online        yes [1]_     yes                 yes    ONLINE
pausing       no           yes                 yes    PAUSING
paused        no           yes                 yes    PAUSED
closing       no           yes                 yes    CLOSING
offline       no           no                  yes    OFFLINE
============  ===========  ==================  =====  ===================

.. [1] unless the disk guard stops them (:mod:`pump.health`).

A paused pump (like a closing one) still takes the Commits and Rollbacks of
Prewrites it holds: refusing them would leave those Prewrites unpaired, and an
unpaired Prewrite holds the pump's watermark, and with it every drainer's
merge, until ``max-txn-timeout`` resolves it (ten minutes by default).

Fake binlogs (watermarks) are not producer writes and are not gated: a pump
keeps writing them in every state but offline, so drainers never stall on it.
The :class:`WriteGate` also counts admitted writes still in flight, so pausing
and closing can wait for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Iterator

from bridge.binlog import PUMP_UNAVAILABLE_PREFIX
from bridge.errors import BridgeError
from bridge.proto import meta_pb2
from pump import metrics
from pump.health import DiskGuard


class PumpState(enum.Enum):
    JOINING = "joining"
    ONLINE = "online"
    PAUSING = "pausing"
    PAUSED = "paused"
    CLOSING = "closing"
    OFFLINE = "offline"


REGISTRY_STATE: dict[PumpState, meta_pb2.NodeState] = {
    PumpState.JOINING: meta_pb2.PAUSED,
    PumpState.ONLINE: meta_pb2.ONLINE,
    PumpState.PAUSING: meta_pb2.PAUSING,
    PumpState.PAUSED: meta_pb2.PAUSED,
    PumpState.CLOSING: meta_pb2.CLOSING,
    PumpState.OFFLINE: meta_pb2.OFFLINE,
}


class WriteRefused(BridgeError):
    """The pump's state or disk guard refuses this write; the message says why."""


class WriteGate:
    """Admits writes by ``state`` (set by the node) and the disk guard; counts those in flight.

    Synchronous and cheap: the service calls it per binlog. One event loop only.
    """

    def __init__(self, node_id: str, disk: DiskGuard) -> None:
        self.node_id = node_id
        self.disk = disk
        self.state = PumpState.JOINING
        self.admitted = 0  # every write ever admitted (the score's write rate)
        self._in_flight = {True: 0, False: 0}  # by "is a Prewrite"
        self._idle = {True: asyncio.Event(), False: asyncio.Event()}
        for event in self._idle.values():
            event.set()

    def refusal(self, prewrite: bool) -> str:
        """Why a write of this kind would be refused now; "" when it is admitted.

        Every refusal starts with :data:`PUMP_UNAVAILABLE_PREFIX`: it is about
        this pump's state, so a producer retries the Prewrite elsewhere.
        """
        reason = self._state_refusal(prewrite)
        return f"{PUMP_UNAVAILABLE_PREFIX}{reason}" if reason else ""

    def _state_refusal(self, prewrite: bool) -> str:
        state, who = self.state, f"pump {self.node_id}"
        if state is PumpState.ONLINE:
            return self.disk.refusal(self.node_id) if prewrite and self.disk.stopped else ""
        if state is PumpState.CLOSING:
            if prewrite:
                return (
                    f"{who} is closing: it takes no new Prewrites, only Commits/Rollbacks of Prewrites it has"
                )
            return ""
        if state in (PumpState.PAUSING, PumpState.PAUSED):
            if prewrite:
                return (
                    f"{who} is paused: it takes no new Prewrites until resumed, "
                    "only Commits/Rollbacks of Prewrites it has"
                )
            return ""
        if state is PumpState.JOINING:
            return f"{who} is joining: it takes writes once every drainer has acknowledged it"
        return f"{who} is offline"

    def enter(self, prewrite: bool) -> str:
        """Admit one write: "" when admitted (call :meth:`exit` once it is acknowledged
        or failed), else the refusal to send to the producer."""
        refusal = self.refusal(prewrite)
        if refusal:
            return refusal
        self.enter_many(int(prewrite), int(not prewrite))
        return ""

    def exit(self, prewrite: bool) -> None:
        self.exit_many(int(prewrite), int(not prewrite))

    def enter_many(self, prewrites: int, others: int) -> None:
        """Count writes in that :meth:`refusal` admitted just now (nothing awaited
        since): one update per call instead of one per binlog."""
        for prewrite, count in ((True, prewrites), (False, others)):
            if count:
                self._in_flight[prewrite] += count
                self._idle[prewrite].clear()
        self.admitted += prewrites + others
        metrics.WRITES_IN_FLIGHT.inc(prewrites + others)

    def exit_many(self, prewrites: int, others: int) -> None:
        """The writes of :meth:`enter_many` are acknowledged or failed."""
        for prewrite, count in ((True, prewrites), (False, others)):
            if count:
                self._in_flight[prewrite] -= count
                if self._in_flight[prewrite] == 0:
                    self._idle[prewrite].set()
        metrics.WRITES_IN_FLIGHT.dec(prewrites + others)

    @contextlib.contextmanager
    def admit(self, prewrite: bool) -> Iterator[None]:
        """``with gate.admit(prewrite):`` around one write; raises :class:`WriteRefused`."""
        refusal = self.enter(prewrite)
        if refusal:
            raise WriteRefused(refusal)
        try:
            yield
        finally:
            self.exit(prewrite)

    @property
    def in_flight(self) -> int:
        return self._in_flight[True] + self._in_flight[False]

    async def wait_idle(self, *kinds: bool) -> None:
        """Return once no write of the given kinds (True = Prewrites) is in flight."""
        for prewrite in kinds:
            while self._in_flight[prewrite]:
                await self._idle[prewrite].wait()
