"""The resolved-ts consumer contract as a pure data structure.

The Kafka sink writes each table's changes to its own topic, spread over
partitions, and a DDL topic beside them; every partition carries watermarks
("every change with commit_ts <= T was written here before this message").
A consumer that wants the upstream's transactions back, in commit order,
across tables, does what :class:`ResolvedBuffer` does:

1. buffer every row change and DDL event it reads, keyed by
   ``(topic, commit_ts, pos)`` (a DDL by ``(topic, commit_ts)``): a message
   re-delivered after a drainer crash has the same key, so it is kept once;
2. track the highest watermark seen on every assigned partition;
3. the stream is complete up to ``T`` = the lowest of those watermarks (a
   partition without one holds everything back), except that a DDL event
   naming a topic that is not assigned yet (a CREATE TABLE's new topic) caps
   ``T`` below that DDL's commit_ts until the topic's partitions are assigned
   — the new table's first rows may already be in it;
   a dropped table's topic gets no more watermarks, so once everything it
   got before the drop was read (:mod:`bridge.apps.consume.retire`) its partitions
   are *retired* and bound nothing;
4. release every buffered change with ``commit_ts <= T`` in
   ``(commit_ts, DDL first, pos)`` order; anything at or below the released
   ``T`` that arrives later is a re-delivery and is dropped.

The row changes of a commit_ts that reach ``SPILL_ROWS`` move to disk
(:mod:`bridge.apps.consume.spill`), so a transaction of millions of rows
does not have to fit in memory; such a commit_ts is released as one
:class:`~bridge.apps.consume.spill.SpilledRows` (after its DDL events, if
any) in place of its row changes, which its reader reads back in order.

Nothing here reads Kafka; :mod:`bridge.apps.consume.reader` feeds it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from bridge.apps.consume.items import DDLItem, Ordered, RowItem
from bridge.apps.consume.spill import SPILL_ROWS, SpilledRows, SpillStore

TopicPartition = tuple[str, int]
Released = Ordered | SpilledRows  # what take_ready hands out


@dataclass
class BufferStats:
    """Counters for progress lines and the final summary."""

    buffered: int = 0  # messages waiting for a watermark now
    accepted: int = 0  # messages buffered in total
    duplicates: int = 0  # re-deliveries dropped (same key buffered, or at/below the released ts)
    released: int = 0  # messages handed out in order


def order_key(item: Ordered) -> tuple[int, int, int, str]:
    """Apply order: by commit_ts, a DDL before rows of the same commit_ts, then by position."""
    if isinstance(item, DDLItem):
        return (item.commit_ts, 0, 0, item.where.topic)
    return (item.commit_ts, 1, item.pos, item.where.topic)


class ResolvedBuffer:
    """See the module docstring. ``released_ts`` starts at ``start_ts`` (0: nothing released)."""

    def __init__(self, start_ts: int = 0, spill_rows: int = SPILL_ROWS) -> None:
        self.released_ts = start_ts
        self.stats = BufferStats()
        self._watermarks: dict[TopicPartition, int] = {}
        self._retired: dict[TopicPartition, int] = {}  # partitions of dropped tables' topics, read to the end
        self._assigned_topics: set[str] = set()
        # commit_ts -> dedup key -> item; a heap of the commit_ts present
        self._pending: dict[int, dict[tuple[str, int, int], Ordered]] = {}
        self._heap: list[int] = []
        # commit_ts whose row changes are on disk -> how many were added there (duplicates included)
        self._spilled: dict[int, int] = {}
        self._spill = SpillStore()
        self._spill_rows = spill_rows
        # topic named by a buffered DDL, not assigned yet -> lowest commit_ts of such a DDL
        self._awaited: dict[str, int] = {}

    # ------------------------------------------------------------ partitions and watermarks

    def assign(self, topic: str, partitions: Iterable[int]) -> None:
        """``topic``'s partitions are assigned (read from their beginning) from now on."""
        for partition in partitions:
            if (topic, partition) not in self._retired:
                self._watermarks.setdefault((topic, partition), 0)
        self._assigned_topics.add(topic)
        self._awaited.pop(topic, None)

    @property
    def assigned(self) -> frozenset[TopicPartition]:
        """Every partition this buffer knows, retired ones included."""
        return frozenset(self._watermarks) | frozenset(self._retired)

    def retire(self, topic: str, partition: int) -> None:
        """``topic``/``partition`` holds nothing more that the stream waits for (its table was dropped and
        everything it got before the drop was read): its watermark no longer bounds the release."""
        tp = (topic, partition)
        if tp in self._watermarks:
            self._retired[tp] = self._watermarks.pop(tp)

    def reinstate(self, topic: str) -> None:
        """A retired topic is a table's topic again (re-created): its partitions bound the release again."""
        for tp in [tp for tp in self._retired if tp[0] == topic]:
            self._watermarks[tp] = self._retired.pop(tp)

    def retired(self) -> frozenset[TopicPartition]:
        return frozenset(self._retired)

    def partition_watermark(self, topic: str, partition: int) -> int:
        """The highest watermark read on ``topic``/``partition`` (0: none yet, or not assigned)."""
        tp = (topic, partition)
        return self._watermarks.get(tp, self._retired.get(tp, 0))

    def resolved(self, topic: str, partition: int, resolved_ts: int) -> None:
        """A watermark read on ``topic``/``partition`` (watermarks never move back)."""
        tp = (topic, partition)
        marks = self._watermarks if tp in self._watermarks else self._retired
        if tp not in marks:
            return  # a partition this buffer does not wait on
        if resolved_ts > marks[tp]:
            marks[tp] = resolved_ts

    def awaited_topics(self) -> dict[str, int]:
        """Topics named by DDL events but not assigned yet, with the commit_ts each holds back."""
        return dict(self._awaited)

    def watermark(self) -> int:
        """The ``T`` up to which the stream is complete now (never below ``released_ts``)."""
        if not self._watermarks:
            return self.released_ts
        complete = min(self._watermarks.values())
        if self._awaited:
            complete = min(complete, min(self._awaited.values()) - 1)
        return max(complete, self.released_ts)

    def lagging(self, limit: int = 3) -> list[tuple[TopicPartition, int]]:
        """The partitions with the lowest watermarks (what holds the stream back), for progress lines."""
        return sorted(self._watermarks.items(), key=lambda kv: kv[1])[:limit]

    # ------------------------------------------------------------ changes

    def add(self, item: Ordered) -> bool:
        """Buffer one row change or DDL event; False when it is a re-delivery (dropped)."""
        commit_ts = item.commit_ts
        if commit_ts <= self.released_ts:
            self.stats.duplicates += 1
            return False
        if commit_ts in self._spilled and isinstance(item, RowItem):
            self._spill.add(item)  # a re-delivery is dropped by the store (counted on release)
            self._spilled[commit_ts] += 1
            self.stats.buffered += 1
            self.stats.accepted += 1
            return True
        key = item.dedup_key()
        bucket = self._pending.get(commit_ts)
        if bucket is None:
            bucket = self._pending[commit_ts] = {}
            heapq.heappush(self._heap, commit_ts)
        elif key in bucket:
            self.stats.duplicates += 1
            return False
        bucket[key] = item
        self.stats.buffered += 1
        self.stats.accepted += 1
        if len(bucket) >= self._spill_rows and isinstance(item, RowItem):
            self._to_disk(commit_ts, bucket)
        if isinstance(item, DDLItem):
            topic = item.table_topic
            if topic and topic not in self._assigned_topics:
                self._awaited[topic] = min(self._awaited.get(topic, commit_ts), commit_ts)
        return True

    def _to_disk(self, commit_ts: int, bucket: dict[tuple[str, int, int], Ordered]) -> None:
        """Move the row changes of ``commit_ts`` to the spill store (its DDL events stay)."""
        rows = [key for key, item in bucket.items() if isinstance(item, RowItem)]
        for key in rows:
            self._spill.add(bucket.pop(key))  # type: ignore[arg-type]
        self._spilled[commit_ts] = len(rows)

    def take_ready(self, limit_ts: int | None = None) -> tuple[int, list[Released]]:
        """Release everything up to the watermark (and ``limit_ts``): (the new released_ts, the items
        in apply order). The list is empty and released_ts unchanged when nothing moved. A commit_ts
        whose rows were spilled comes as its DDL events, then one :class:`SpilledRows`, which the
        caller closes once it applied them."""
        target = self.watermark()
        if limit_ts is not None:
            target = min(target, max(limit_ts, self.released_ts))
        if target <= self.released_ts:
            return self.released_ts, []
        out: list[Released] = []
        while self._heap and self._heap[0] <= target:
            commit_ts = heapq.heappop(self._heap)
            bucket = self._pending.pop(commit_ts)
            items = sorted(bucket.values(), key=order_key)
            out.extend(items)
            self.stats.buffered -= len(items)
            self.stats.released += len(items)
            added = self._spilled.pop(commit_ts, None)
            if added is not None:
                spilled = self._spill.release(commit_ts)
                out.append(spilled)
                self.stats.buffered -= added
                self.stats.released += spilled.count
                self.stats.duplicates += added - spilled.count
        self.released_ts = target
        return target, out

    def close(self) -> None:
        """Delete the spill store (rows on disk not applied yet are gone)."""
        self._spill.close()
