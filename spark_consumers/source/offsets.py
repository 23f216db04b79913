"""Offsets of the data source as JSON-able dicts, and the arithmetic on them.

An offset is ``{topic: {partition: next offset}}`` with the partition number
as a string (Spark keeps offsets as JSON, whose keys are strings). Offsets
only ever grow; a partition missing from ``start`` starts at 0 (the broker
moves a fetch below its log start up to it: ``auto.offset.reset=earliest``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from bridge.errors import ConfigError

Offsets = dict[str, dict[str, int]]


def parse_offsets(text: str, key: str) -> Offsets:
    """Offsets given as JSON (``startingOffsets``/``endingOffsets``); errors name ``key``."""
    try:
        raw = json.loads(text)
        return {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in raw.items()}
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f'{key}: not JSON offsets like {{"topic": {{"0": 42}}}}: {exc}') from None


def ranges(start: Offsets, end: Offsets) -> Iterator[tuple[str, int, int, int]]:
    """(topic, partition, first offset, end offset) of every partition with something to read."""
    for topic in sorted(end):
        for partition, stop in sorted(end[topic].items(), key=lambda kv: int(kv[0])):
            first = start.get(topic, {}).get(partition, 0)
            if stop > first:
                yield topic, int(partition), first, stop


def merge(start: Offsets, ends: Offsets) -> Offsets:
    """Every partition of either, at the larger offset (offsets never go back)."""
    out: Offsets = {t: dict(parts) for t, parts in start.items()}
    for topic, parts in ends.items():
        mine = out.setdefault(topic, {})
        for partition, offset in parts.items():
            mine[partition] = max(offset, mine.get(partition, 0))
    return out


def clamp(ends: Offsets, target: Offsets) -> Offsets:
    """``ends`` no further than ``target`` (Trigger.AvailableNow's target); a partition the target
    does not know (created after it was taken) stays where ``ends`` would not move it: at 0."""
    return {
        t: {p: min(o, target.get(t, {}).get(p, 0)) for p, o in parts.items()} for t, parts in ends.items()
    }


def cap(start: Offsets, ends: Offsets, max_rows: int) -> Offsets:
    """``ends`` moved back so that at most ``max_rows`` offsets lie between ``start`` and it,
    shared by the partitions in proportion to what each has waiting (each waiting one gets at
    least one offset while the budget lasts)."""
    waiting = [(t, p, first, stop) for t, p, first, stop in ranges(start, ends)]
    total = sum(stop - first for _, _, first, stop in waiting)
    if total <= max_rows:
        return ends
    out: Offsets = {t: dict(parts) for t, parts in ends.items()}
    budget = max_rows
    for topic, partition, first, stop in waiting:
        share = min(stop - first, max(1, (stop - first) * max_rows // total), budget)
        out[topic][str(partition)] = first + share
        budget -= share
    return out


def hold_back_ddl(start: Offsets, capped: Offsets, wanted: Offsets, ddl_suffix: str) -> Offsets:
    """``capped`` with the DDL topics (names ending in ``ddl_suffix``) kept at ``start`` while any
    row topic's partition stops short of ``wanted`` (the ends before the cap). A batch cut by the
    cap would otherwise carry a DDL ahead of older row changes of other topics still waiting: a
    RENAME applied first ignores them. A DDL read later than changes after it is harmless (floors
    and moves go by version), so the DDL waits until a batch reads every row topic to its end."""
    behind_rows = any(
        stop < wanted.get(t, {}).get(p, 0) for t, parts in capped.items() if not t.endswith(ddl_suffix)
        for p, stop in parts.items()
    )  # fmt: skip
    if not behind_rows:
        return capped
    return {
        t: ({p: start.get(t, {}).get(p, 0) for p in parts} if t.endswith(ddl_suffix) else dict(parts))
        for t, parts in capped.items()
    }


def behind(position: Offsets, ends: Offsets) -> int:
    """How many offsets ``ends`` is ahead of ``position``, summed over partitions."""
    return sum(stop - first for _, _, first, stop in ranges(position, ends))
