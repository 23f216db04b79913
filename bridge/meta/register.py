"""A node's first registration, which must own its node id.

The registry refuses a heartbeat for a node id that another live node holds
(:class:`bridge.errors.NodeIdTaken`). A node that restarts on another address
after a SIGKILL meets its own previous registration that way, alive until its
lease runs out; so the first registration is retried for one lease and the
refusal raised only if the holder is still heard from after it: then another
node really runs with this id.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from bridge.errors import NodeIdTaken

log = logging.getLogger(__name__)


async def register_owned(
    beat: Callable[[], Awaitable[bool]], node_id: str, lease_s: float, interval_s: float
) -> None:
    """Call ``beat`` (True once registered, False to try again after ``interval_s``)
    until it registers; a NodeIdTaken is retried until ``lease_s`` has passed
    since the first, then raised."""
    deadline: float | None = None
    while True:
        try:
            if await beat():
                return
        except NodeIdTaken as exc:
            now = time.monotonic()
            if deadline is None:
                deadline = now + lease_s + interval_s
                log.warning("node %s: %s; waiting %.1fs for that lease to run out", node_id, exc, lease_s)
            elif now >= deadline:
                raise
        await asyncio.sleep(interval_s)
