"""Changes rows an earlier load wrote, through the real producer path, while another load runs.

A ``binlog-bridge load`` changes only rows it inserted itself (and the shared accounts), so an
end-to-end test of cache invalidation needs something else to change the rows whose keys the
cache holds: :class:`Mutator` runs, on a thread, transactions of its own through the real
``TxnWriter`` and pump client — updates, deletes, primary-key changes (to negative ids: the load
allocates above ``MAX(id)`` as read when it starts), unique slot swaps through a temporary value,
and updates writing the values a row already has.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import cast

from bridge.dsn import parse_dsn
from bridge.producer import TxnWriter, open_upstream
from bridge.producer.writer import Transaction
from bridge.pumpclient import PumpsClient

HANG_GUARD = 180.0
Snapshot = dict[str, dict[tuple[object, ...], dict[str, object]]]  # table -> key -> row


class Mutator:
    """Changes rows of the first load while the second runs (see the module docstring)."""

    def __init__(self, upstream: str, meta_addr: str, before: Snapshot, seed: int = 5) -> None:
        self.upstream = upstream
        self.meta_addr = meta_addr
        self.before = before
        self.rng = random.Random(seed)
        self.planned = 0
        self.done = 0
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._guarded, name="mutator", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(timeout=HANG_GUARD)
        assert not self._thread.is_alive(), "the mutator hangs"
        if self.failure is not None:
            raise self.failure

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.failure = exc

    def _plan(self) -> list[Callable[[Transaction], object]]:
        before, rng = self.before, self.rng
        seeded = sorted(cast(int, k[0]) for k in before["load_orders"])  # load_orders' ids are ints
        orders = rng.sample(seeded, min(90, len(seeded)))  # a loaded machine may have written fewer
        slots = sorted(before["load_slots"].items())
        steps: list[Callable[[Transaction], object]] = []
        for n, key in enumerate(orders):
            where = {"id": key}
            if n % 6 == 0:
                steps.append(partial(Transaction.delete, table="load_orders", where=where))
                continue
            if n % 6 == 1:
                # a negative id: the load allocates ids above MAX(id), read when it starts (maybe after this)
                changes: dict[str, object] = {"id": -1 - n}
            elif n % 6 == 2:  # the values it has: no row changes
                changes = {"status": before["load_orders"][(key,)]["status"]}
            else:
                changes = {"status": f"m{n}"}
            steps.append(partial(Transaction.update, table="load_orders", where=where, changes=changes))
        pairs = [(slots[i], slots[i + 1]) for i in range(0, min(len(slots) - 1, 30), 2)]
        for (first, a), (second, b) in pairs:
            steps.append(
                partial(
                    swap,
                    first=cast(int, first[0]),
                    second=cast(int, second[0]),
                    first_slot=a["slot"],
                    second_slot=b["slot"],
                )
            )
        rng.shuffle(steps)
        return steps

    def _run(self) -> None:
        dsn = parse_dsn(self.upstream, key="upstream")
        with PumpsClient(self.meta_addr) as client:
            writer = TxnWriter(open_upstream(dsn), client)
            try:
                steps = self._plan()
                self.planned = len(steps)
                for step in steps:
                    writer.run(step, attempts=20, backoff=0.05)
                    self.done += 1
                    time.sleep(self.rng.uniform(0.0, 0.05))  # spread beside the load (~105 steps)
            finally:
                writer.close()


def swap(txn: Transaction, first: int, second: int, first_slot: object, second_slot: object) -> None:
    """Swap two rows' unique slots through a temporary value (the unique key is checked per statement)."""
    txn.update("load_slots", {"id": first}, {"slot": -first})
    txn.update("load_slots", {"id": second}, {"slot": first_slot})
    txn.update("load_slots", {"id": first}, {"slot": second_slot})
