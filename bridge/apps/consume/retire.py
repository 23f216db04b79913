"""Retiring the topics of dropped tables, so that they stop holding the release back.

The kafka sink sends watermarks to the topics of the tables it knows; once a
table is dropped (DROP TABLE, DROP DATABASE, or renamed away) its topic gets
none any more, and its partitions' last watermarks may be below the drop.
Waiting on them would stop the release for good. Instead:

1. a DDL event that drops a table (or renames it to another topic) at
   commit_ts ``D`` makes its topic a candidate (the topic of a renamed or
   database-dropped table is known from earlier DDL events naming it);
2. once the DDL topic's watermark reaches ``D``, the sink has had every
   message at or below ``D`` acknowledged — every row the dropped table's
   topic will ever get from this drop's lifetime is in the broker;
3. then each of the topic's partitions is re-positioned where the reader
   stands (a seek: librdkafka drops what it prefetched and fetches anew),
   and the end-of-partition event that follows proves everything in it was
   read: the partition is retired (:meth:`ResolvedBuffer.retire`);
4. a later DDL event naming the topic again (the table re-created) puts its
   partitions back.

Only DDL events the buffer accepted (no re-deliveries) are fed here, in the
DDL topic's order, which is commit order.
"""

from __future__ import annotations

import logging
from typing import Protocol

from bridge.apps.consume.items import DDLItem, EndItem
from bridge.apps.consume.ordering import ResolvedBuffer

log = logging.getLogger(__name__)

_NAMING = frozenset(("CREATE_TABLE", "ALTER_TABLE", "TRUNCATE_TABLE", "RENAME_TABLE"))


class Rewinder(Protocol):
    assigned: dict[str, list[int]]

    def rewind(self, topic: str, partitions: list[int]) -> bool: ...


class Retirements:
    """See the module docstring."""

    def __init__(self, ddl_topic: str) -> None:
        self.ddl_topic = ddl_topic
        self.topic_of: dict[tuple[str, str], str] = {}  # (db, table) lower-cased -> its topic
        self.pending: dict[str, int] = {}  # topic -> commit_ts of the DDL that dropped its table
        self.awaiting_end: set[tuple[str, int]] = set()
        self.retired_topics: set[str] = set()

    def on_ddl(self, item: DDLItem, buffer: ResolvedBuffer) -> None:
        record = item.record
        kind = item.kind
        db, table = str(record.get("db") or "").lower(), str(record.get("table") or "").lower()
        topic = item.table_topic
        if kind == "RENAME_TABLE":
            old_name = (str(record.get("old_db") or "").lower(), str(record.get("old_table") or "").lower())
            old = self.topic_of.pop(old_name, "")
            if old and old != topic:
                self._drop(old, item.commit_ts)
        if kind in _NAMING and topic:
            self.topic_of[(db, table)] = topic
            self._revive(topic, buffer)
        elif kind == "DROP_TABLE":
            dropped = self.topic_of.pop((db, table), "") or topic
            if dropped:
                self._drop(dropped, item.commit_ts)
        elif kind == "DROP_DATABASE":
            for name in [name for name in self.topic_of if name[0] == db]:
                self._drop(self.topic_of.pop(name), item.commit_ts)

    def _drop(self, topic: str, commit_ts: int) -> None:
        if topic not in self.pending and topic not in self.retired_topics:
            self.pending[topic] = commit_ts

    def _revive(self, topic: str, buffer: ResolvedBuffer) -> None:
        if self.pending.pop(topic, None) is not None or topic in self.retired_topics:
            self.retired_topics.discard(topic)
            self.awaiting_end = {tp for tp in self.awaiting_end if tp[0] != topic}
            buffer.reinstate(topic)
            log.info("consume: topic %s is a table's topic again", topic)

    def step(self, buffer: ResolvedBuffer, reader: Rewinder) -> None:
        """Rewind the partitions of candidates whose drop the DDL topic's watermark passed."""
        ddl_mark = buffer.partition_watermark(self.ddl_topic, 0)
        for topic, commit_ts in list(self.pending.items()):
            partitions = reader.assigned.get(topic)
            if ddl_mark < commit_ts or not partitions:
                continue
            if reader.rewind(topic, partitions):
                del self.pending[topic]
                self.awaiting_end |= {(topic, p) for p in partitions}

    def on_end(self, item: EndItem, buffer: ResolvedBuffer) -> None:
        tp = (item.where.topic, item.where.partition)
        if tp in self.awaiting_end:
            self.awaiting_end.discard(tp)
            buffer.retire(*tp)
            if not any(other[0] == tp[0] for other in self.awaiting_end):
                self.retired_topics.add(tp[0])
                log.info("consume: topic %s retired (its table was dropped; read to its end)", tp[0])
