"""Which pump took each transaction's Prewrite, so its Commit or Rollback
follows it there."""

from __future__ import annotations

import logging
from collections import OrderedDict

log = logging.getLogger(__name__)


class PrewriteRoutes:
    """A bounded map start_ts -> node id.

    ``remember`` records where a Prewrite went; ``take`` returns and forgets
    it when the Commit or Rollback arrives. Beyond ``limit`` entries the
    oldest route is forgotten: its transaction's Commit is then routed like a
    Prewrite, and if that reaches another pump the Prewrite's pump resolves
    the transaction through its lost-commit resolver.
    """

    def __init__(self, limit: int) -> None:
        if limit <= 0:
            raise ValueError("limit must be positive")
        self._limit = limit
        self._routes: OrderedDict[int, str] = OrderedDict()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._routes)

    def remember(self, start_ts: int, node_id: str) -> None:
        self._routes[start_ts] = node_id
        self._routes.move_to_end(start_ts)
        while len(self._routes) > self._limit:
            old_ts, old_node = self._routes.popitem(last=False)
            self.evicted += 1
            log.debug(
                "forgot the pump (%s) of start_ts %d: more than %d open transactions",
                old_node,
                old_ts,
                self._limit,
            )

    def take(self, start_ts: int) -> str | None:
        return self._routes.pop(start_ts, None)
