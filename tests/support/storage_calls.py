"""Calling a pump :class:`~pump.storage.Storage` from a synchronous test.

``run_guarded(coro, guard)`` runs one coroutine to its end in a fresh event loop, failing it
after ``guard`` seconds (a safety net against hangs, never a performance bound); a module binds
its own guard once: ``run = partial(run_guarded, guard=HANG_GUARD)``. :func:`pairs` gives
binlogs the way ``Storage.write`` takes them, each with its serialized bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from bridge.binlog import Binlog


def run_guarded(coro: Awaitable[Any], guard: float) -> Any:
    async def guarded() -> Any:
        return await asyncio.wait_for(coro, guard)

    return asyncio.run(guarded())


def pairs(binlogs: list[Binlog]) -> list[tuple[Binlog, bytes]]:
    return [(b, b.SerializeToString()) for b in binlogs]
