"""The resolved-ts consumer contract (bridge.apps.consume.ordering): release order, watermarks,
de-duplication, and the rule that a CREATE TABLE's topic must be assigned before its DDL passes."""

from __future__ import annotations

from typing import Any

from bridge.apps.consume.items import DDLItem, RowItem, Where
from bridge.apps.consume.ordering import ResolvedBuffer


def row(topic: str, commit_ts: int, pos: int, partition: int = 0, offset: int = 0, op: str = "c") -> RowItem:
    source: dict[str, Any] = {
        "cluster_id": 1, "db": "shop", "table": topic.rsplit(".", 1)[-1], "start_ts": commit_ts - 1,
        "commit_ts": commit_ts, "pos": pos, "last": False,
    }  # fmt: skip
    return RowItem(Where(topic, partition, offset), None, op, None, {"id": pos}, source, 0)


def ddl(commit_ts: int, topic: str = "", kind: str = "CREATE_TABLE") -> DDLItem:
    record = {"commit_ts": commit_ts, "start_ts": commit_ts - 1, "kind": kind, "topic": topic, "query": "q"}
    return DDLItem(Where("bridge._ddl", 0, commit_ts), record)


def keys(items: list[Any]) -> list[tuple[str, int, int]]:
    return [i.dedup_key() for i in items]


def two_topics() -> ResolvedBuffer:
    buffer = ResolvedBuffer()
    buffer.assign("bridge._ddl", [0])
    buffer.assign("bridge.shop.a", [0, 1])
    buffer.assign("bridge.shop.b", [0])
    return buffer


def resolve_all(buffer: ResolvedBuffer, ts: int) -> None:
    for topic, partition in buffer.assigned:
        buffer.resolved(topic, partition, ts)


def test_nothing_is_released_before_every_partition_has_a_watermark() -> None:
    buffer = two_topics()
    buffer.add(row("bridge.shop.a", 10, 0))
    buffer.resolved("bridge.shop.a", 0, 20)
    buffer.resolved("bridge.shop.a", 1, 20)
    buffer.resolved("bridge.shop.b", 0, 20)
    assert buffer.watermark() == 0  # the DDL topic has none yet
    assert buffer.take_ready() == (0, [])
    buffer.resolved("bridge._ddl", 0, 15)
    released, items = buffer.take_ready()
    assert released == 15
    assert keys(items) == [("bridge.shop.a", 10, 0)]
    assert buffer.stats.buffered == 0 and buffer.stats.released == 1


def test_release_is_in_commit_order_then_position_across_topics_and_partitions() -> None:
    buffer = two_topics()
    # read in an order unrelated to commit order: partitions interleave arbitrarily
    arrivals: list[RowItem | DDLItem] = [
        row("bridge.shop.b", 30, 1), row("bridge.shop.a", 30, 0, partition=1), row("bridge.shop.a", 20, 2),
        row("bridge.shop.b", 20, 0), row("bridge.shop.a", 20, 1, partition=1), ddl(25),
    ]  # fmt: skip
    for item in arrivals:
        assert buffer.add(item)
    resolve_all(buffer, 40)
    released, items = buffer.take_ready()
    assert released == 40
    assert [(i.commit_ts, getattr(i, "pos", -1)) for i in items] == [
        (20, 0),
        (20, 1),
        (20, 2),
        (25, -1),
        (30, 0),
        (30, 1),
    ]


def test_the_lowest_watermark_bounds_the_release_and_later_changes_wait() -> None:
    buffer = two_topics()
    buffer.add(row("bridge.shop.a", 10, 0))
    buffer.add(row("bridge.shop.b", 12, 0))
    buffer.add(row("bridge.shop.b", 30, 0))
    resolve_all(buffer, 20)
    buffer.resolved("bridge.shop.b", 0, 40)  # one partition ahead of the others
    released, items = buffer.take_ready()
    assert released == 20 and keys(items) == [("bridge.shop.a", 10, 0), ("bridge.shop.b", 12, 0)]
    assert buffer.stats.buffered == 1
    buffer.resolved("bridge.shop.a", 0, 10)  # a watermark never moves back
    assert buffer.watermark() == 20
    resolve_all(buffer, 35)
    released, items = buffer.take_ready()
    assert released == 35 and keys(items) == [("bridge.shop.b", 30, 0)]


def test_redelivered_changes_are_kept_once() -> None:
    buffer = two_topics()
    assert buffer.add(row("bridge.shop.a", 10, 0, offset=1))
    assert buffer.add(row("bridge.shop.a", 10, 1, offset=2))
    # the drainer crashed and wrote the transaction again: same (topic, commit_ts, pos), later offsets
    assert not buffer.add(row("bridge.shop.a", 10, 0, offset=7))
    assert not buffer.add(row("bridge.shop.a", 10, 1, offset=8))
    resolve_all(buffer, 10)
    released, items = buffer.take_ready()
    assert released == 10 and all(isinstance(i, RowItem) for i in items)
    assert [i.where.offset for i in items if isinstance(i, RowItem)] == [1, 2]
    # and once more after the release: at or below the released ts, dropped on arrival
    assert not buffer.add(row("bridge.shop.a", 10, 0, offset=9))
    assert not buffer.add(ddl(9))
    assert buffer.stats.duplicates == 4 and buffer.stats.buffered == 0


def test_a_ddl_naming_an_unassigned_topic_holds_the_release_below_it() -> None:
    buffer = two_topics()
    buffer.add(row("bridge.shop.a", 10, 0))
    buffer.add(ddl(15, topic="bridge.shop.c"))
    buffer.add(row("bridge.shop.a", 20, 0))
    resolve_all(buffer, 30)
    assert buffer.awaited_topics() == {"bridge.shop.c": 15}
    released, items = buffer.take_ready()
    assert released == 14 and keys(items) == [("bridge.shop.a", 10, 0)]
    assert buffer.take_ready() == (14, [])
    # assigned: its partitions have no watermark yet, so they hold everything back now
    buffer.assign("bridge.shop.c", [0, 1, 2])
    assert buffer.awaited_topics() == {}
    assert buffer.take_ready() == (14, [])
    buffer.add(row("bridge.shop.c", 16, 0, partition=2))
    resolve_all(buffer, 30)
    released, items = buffer.take_ready()
    assert released == 30
    assert keys(items) == [("bridge._ddl", 15, -1), ("bridge.shop.c", 16, 0), ("bridge.shop.a", 20, 0)]


def test_a_ddl_naming_an_assigned_topic_does_not_wait() -> None:
    buffer = two_topics()
    buffer.add(ddl(15, topic="bridge.shop.a", kind="ALTER_TABLE"))
    resolve_all(buffer, 30)
    released, items = buffer.take_ready()
    assert released == 30 and len(items) == 1


def test_limit_ts_stops_the_release_there() -> None:
    buffer = two_topics()
    for ts in (10, 20, 30):
        buffer.add(row("bridge.shop.b", ts, 0))
    resolve_all(buffer, 50)
    released, items = buffer.take_ready(limit_ts=20)
    assert released == 20 and [i.commit_ts for i in items] == [10, 20]
    released, items = buffer.take_ready(limit_ts=20)
    assert released == 20 and items == []
    released, items = buffer.take_ready()
    assert released == 50 and [i.commit_ts for i in items] == [30]


def test_no_assignment_means_no_release_and_a_start_ts_drops_older_changes() -> None:
    buffer = ResolvedBuffer(start_ts=100)
    assert buffer.take_ready() == (100, [])
    buffer.resolved("bridge.shop.a", 0, 500)  # not assigned: ignored
    assert buffer.watermark() == 100
    assert not buffer.add(row("bridge.shop.a", 90, 0))
    assert buffer.add(row("bridge.shop.a", 110, 0))
    assert buffer.lagging() == []
