"""Which pump takes a Prewrite.

A selector is told the available pumps (``set_pumps``) and answers, for one
binlog, every available pump in order of preference (``preference``): the
client writes to the first and falls back to the next ones when a pump fails.
All selectors are deterministic — the same calls give the same answers in
every process — so they never use Python's built-in ``hash`` (salted per
process).

- ``range``: round robin; consecutive binlogs go to consecutive pumps.
- ``hash``: rendezvous hashing of ``start_ts``: each pump ranks by a 64-bit
  mix of ``start_ts`` and the pump's node id. A pump leaving moves only its own
  share of start_ts values; the others keep their pump.
- ``score``: smooth weighted round robin over the pumps' reported scores (as
  nginx balances upstreams): over any window of ``sum(scores)`` picks, each
  pump is picked ``score`` times, evenly interleaved. Pumps reporting a score
  of 0 or less are picked only as fallbacks, unless every pump does, in which
  case all weigh the same.

Selectors run on one event loop and are not thread-safe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class PumpWeight:
    """One available pump as a selector sees it."""

    node_id: str
    score: int = 0


class Selector(Protocol):
    """Routing strategy for the first binlog of a transaction."""

    def set_pumps(self, pumps: Sequence[PumpWeight]) -> None:
        """Replace the set of available pumps."""

    def preference(self, start_ts: int) -> list[str]:
        """Every available pump's node id, best first; empty if none."""


def mix64(value: int) -> int:
    """The splitmix64 finalizer: a fast, well-spread 64-bit permutation."""
    x = value & _MASK64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def node_seed(node_id: str) -> int:
    """A stable 64-bit number for a node id."""
    return int.from_bytes(hashlib.blake2b(node_id.encode(), digest_size=8).digest(), "big")


class RangeSelector:
    """Round robin over the available pumps."""

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._next = 0

    def set_pumps(self, pumps: Sequence[PumpWeight]) -> None:
        self._ids = [p.node_id for p in pumps]

    def preference(self, start_ts: int) -> list[str]:
        if not self._ids:
            return []
        first = self._next % len(self._ids)
        self._next = first + 1
        return self._ids[first:] + self._ids[:first]


class HashSelector:
    """Rendezvous hashing of start_ts over the available pumps."""

    def __init__(self) -> None:
        self._seeds: list[tuple[int, str]] = []

    def set_pumps(self, pumps: Sequence[PumpWeight]) -> None:
        self._seeds = [(node_seed(p.node_id), p.node_id) for p in pumps]

    def preference(self, start_ts: int) -> list[str]:
        key = mix64(start_ts)
        ranked = sorted(((mix64(key ^ seed), node_id) for seed, node_id in self._seeds), reverse=True)
        return [node_id for _, node_id in ranked]


class ScoreSelector:
    """Smooth weighted round robin by the pumps' reported scores."""

    def __init__(self) -> None:
        self._weights: dict[str, int] = {}
        self._current: dict[str, int] = {}
        self._fallback_order: list[str] = []

    def set_pumps(self, pumps: Sequence[PumpWeight]) -> None:
        weights = {p.node_id: max(p.score, 0) for p in pumps}
        if weights and not any(weights.values()):
            weights = dict.fromkeys(weights, 1)
        self._weights = weights
        self._current = {node_id: self._current.get(node_id, 0) for node_id in weights}
        self._fallback_order = [p.node_id for p in sorted(pumps, key=lambda p: (-p.score, p.node_id))]

    def preference(self, start_ts: int) -> list[str]:
        total = 0
        best = ""
        best_current = 0
        for node_id, weight in self._weights.items():
            if weight <= 0:
                continue
            current = self._current[node_id] + weight
            self._current[node_id] = current
            total += weight
            if not best or current > best_current:
                best, best_current = node_id, current
        if not best:
            return []
        self._current[best] -= total
        return [best, *(node_id for node_id in self._fallback_order if node_id != best)]


SELECTORS: dict[str, Callable[[], Selector]] = {
    "range": RangeSelector,
    "hash": HashSelector,
    "score": ScoreSelector,
}


def make_selector(strategy: str) -> Selector:
    """The selector for a ``strategy`` config value."""
    try:
        return SELECTORS[strategy]()
    except KeyError:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(SELECTORS)}") from None
