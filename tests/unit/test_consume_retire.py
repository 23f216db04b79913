"""bridge.apps.consume.retire: a dropped table's topic stops bounding the release once the DDL topic's
watermark passed the drop and its partitions were read to their end after a rewind."""

from __future__ import annotations

from typing import Any

from bridge.apps.consume.items import DDLItem, EndItem, Where
from bridge.apps.consume.ordering import ResolvedBuffer
from bridge.apps.consume.retire import Retirements

DDL = "bridge._ddl"
A, B = "bridge.shop.a", "bridge.shop.b"


class Reader:
    """What Retirements needs of the reader: the assignment and a rewind that records its calls."""

    def __init__(self, ready: bool = True) -> None:
        self.assigned: dict[str, list[int]] = {DDL: [0], A: [0, 1], B: [0, 1]}
        self.rewound: list[str] = []
        self.ready = ready

    def rewind(self, topic: str, partitions: list[int]) -> bool:
        if self.ready:
            self.rewound.append(topic)
        return self.ready


def ddl(commit_ts: int, kind: str, table: str, topic: str, **extra: Any) -> DDLItem:
    record = {"commit_ts": commit_ts, "start_ts": commit_ts - 1, "kind": kind, "db": "shop", "table": table,
              "topic": topic, "query": "q", **extra}  # fmt: skip
    return DDLItem(Where(DDL, 0, commit_ts), record)


def setup() -> tuple[ResolvedBuffer, Retirements, Reader]:
    buffer = ResolvedBuffer()
    reader = Reader()
    for topic, partitions in reader.assigned.items():
        buffer.assign(topic, partitions)
    retirements = Retirements(DDL)
    for item in (ddl(10, "CREATE_TABLE", "a", A), ddl(11, "CREATE_TABLE", "b", B)):
        assert buffer.add(item)
        retirements.on_ddl(item, buffer)
    return buffer, retirements, reader


def mark(buffer: ResolvedBuffer, ts: int, *topics: str) -> None:
    for topic, partition in buffer.assigned:
        if topic in topics:
            buffer.resolved(topic, partition, ts)


def end(topic: str, partition: int) -> EndItem:
    return EndItem(Where(topic, partition, 5))


def test_a_dropped_tables_topic_is_retired_after_the_ddl_watermark_and_its_end() -> None:
    buffer, retirements, reader = setup()
    drop = ddl(20, "DROP_TABLE", "a", A)
    buffer.add(drop)
    retirements.on_ddl(drop, buffer)
    mark(buffer, 15, A)  # the sink's last watermark to A: below the drop
    mark(buffer, 19, DDL, B)
    retirements.step(buffer, reader)
    assert reader.rewound == []  # the DDL topic's watermark is below the drop
    retirements.on_end(end(A, 0), buffer)  # an end seen before the rewind proves nothing
    assert buffer.watermark() == 15
    mark(buffer, 30, DDL, B)
    retirements.step(buffer, reader)
    assert reader.rewound == [A]
    retirements.on_end(end(A, 0), buffer)
    assert buffer.watermark() == 15  # partition 1 not read to its end yet
    retirements.on_end(end(A, 1), buffer)
    assert buffer.watermark() == 30
    assert retirements.retired_topics == {A}
    released, items = buffer.take_ready()
    assert released == 30 and [i.commit_ts for i in items] == [10, 11, 20]


def test_a_recreated_topic_bounds_the_release_again() -> None:
    buffer, retirements, reader = setup()
    for item in (ddl(20, "DROP_TABLE", "a", A),):
        buffer.add(item)
        retirements.on_ddl(item, buffer)
    mark(buffer, 30, DDL, B)
    retirements.step(buffer, reader)
    retirements.on_end(end(A, 0), buffer)
    retirements.on_end(end(A, 1), buffer)
    assert buffer.take_ready()[0] == 30
    again = ddl(40, "CREATE_TABLE", "a", A)
    assert buffer.add(again)
    retirements.on_ddl(again, buffer)
    mark(buffer, 50, DDL, B)
    assert buffer.watermark() == 30  # A's partitions count again, with their old watermarks
    mark(buffer, 50, A)
    assert buffer.take_ready() == (50, [again])


def test_rename_and_drop_database_retire_the_old_topics_and_a_failed_rewind_is_retried() -> None:
    buffer, retirements, reader = setup()
    reader.ready = False
    rename = ddl(20, "RENAME_TABLE", "c", "bridge.shop.c", old_db="shop", old_table="a")
    drop_db = ddl(21, "DROP_DATABASE", "", "")
    for item in (rename, drop_db):
        buffer.add(item)
        retirements.on_ddl(item, buffer)
    assert retirements.pending == {A: 20, B: 21, "bridge.shop.c": 21}
    mark(buffer, 25, DDL)
    retirements.step(buffer, reader)
    assert reader.rewound == [] and len(retirements.pending) == 3  # the seek failed: kept
    reader.ready = True
    retirements.step(buffer, reader)
    assert sorted(reader.rewound) == [A, B]  # bridge.shop.c is not assigned yet: waits
    assert retirements.pending == {"bridge.shop.c": 21}
