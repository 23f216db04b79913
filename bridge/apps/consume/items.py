"""Decoded Kafka messages of the bridge's topics, as plain immutable values.

The reader builds them; the ordering buffer and the applier consume them.
Nothing here talks to Kafka or decodes Avro.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# what the ``bridge.kind`` header says
KIND_ROW = "row"
KIND_TOMBSTONE = "tombstone"
KIND_DDL = "ddl"
KIND_RESOLVED = "resolved"

# envelope op -> the drainer's RowChange kind ("r" is a snapshot read: an insert)
OPS = {"c": "insert", "r": "insert", "u": "update", "d": "delete"}


@dataclass(frozen=True, slots=True)
class Where:
    """Where a message was read: topic, partition, offset."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class RowItem:
    """One row change (an envelope record, as fastavro decodes it)."""

    where: Where
    key: dict[str, Any] | None
    op: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    source: dict[str, Any]
    ts_ms: int
    # from ``source``, read once: the ordering buffer asks for them many times
    commit_ts: int = field(init=False)
    pos: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "commit_ts", int(self.source["commit_ts"]))
        object.__setattr__(self, "pos", int(self.source["pos"]))

    @property
    def start_ts(self) -> int:
        return int(self.source["start_ts"])

    @property
    def db(self) -> str:
        return str(self.source["db"])

    @property
    def table(self) -> str:
        return str(self.source["table"])

    def dedup_key(self) -> tuple[str, int, int]:
        return (self.where.topic, self.commit_ts, self.pos)


@dataclass(frozen=True, slots=True)
class DDLItem:
    """One DDL event (the ``bridge.DDLEvent`` record)."""

    where: Where
    record: dict[str, Any]

    @property
    def commit_ts(self) -> int:
        return int(self.record["commit_ts"])

    @property
    def start_ts(self) -> int:
        return int(self.record["start_ts"])

    @property
    def kind(self) -> str:
        return str(self.record["kind"])

    @property
    def table_topic(self) -> str:
        """The topic of the table the DDL leaves behind ("" for database DDL)."""
        return str(self.record.get("topic") or "")

    @property
    def query(self) -> str:
        return str(self.record.get("query") or "")

    def dedup_key(self) -> tuple[str, int, int]:
        return (self.where.topic, self.commit_ts, -1)


@dataclass(frozen=True, slots=True)
class TombstoneItem:
    """A delete's tombstone: same key, no value (compaction only; nothing to apply)."""

    where: Where
    key: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class ResolvedItem:
    """A watermark: every change with commit_ts <= ``resolved_ts`` precedes it on its partition."""

    where: Where
    resolved_ts: int


@dataclass(frozen=True, slots=True)
class EndItem:
    """The reader reached the end of a partition (``where.offset``: the next offset to be written)."""

    where: Where


Item = RowItem | DDLItem | TombstoneItem | ResolvedItem | EndItem
Ordered = RowItem | DDLItem
