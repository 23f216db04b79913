"""consume --apply: the rows of a large commit_ts move to disk (bridge.apps.consume.spill) and come
back in apply order, de-duplicated, as one TxnEvent applied by the real sqlite sink."""

from __future__ import annotations

from pathlib import Path

from bridge.apps.consume.apply import Applier
from bridge.apps.consume.items import RowItem
from bridge.apps.consume.ordering import Released, ResolvedBuffer
from bridge.apps.consume.spill import SpilledRows
from drainer.sinks.sqlite.sink import SQLiteSink
from tests.unit.test_consume_apply import TOPIC, by_name, change, ddl, items_schema, rows


def buffer_of(spill_rows: int) -> ResolvedBuffer:
    buffer = ResolvedBuffer(spill_rows=spill_rows)
    buffer.assign("bridge._ddl", [0])
    buffer.assign(TOPIC, [0])
    return buffer


def resolve(buffer: ResolvedBuffer, ts: int) -> None:
    for topic, partition in buffer.assigned:
        buffer.resolved(topic, partition, ts)


def test_a_large_commit_ts_is_released_from_disk_in_order_without_duplicates() -> None:
    buffer = buffer_of(spill_rows=4)
    buffer.add(change(20, 0, "c", after={"id": 0}))
    buffer.add(change(30, 0, "c", after={"id": 100}))  # a small commit_ts stays in memory
    for pos in (5, 1, 3, 2, 4, 9, 7, 8, 6):  # read out of order (partitions interleave)
        buffer.add(change(20, pos, "c", after={"id": pos}))
    buffer.add(change(20, 3, "c", after={"id": 3}))  # re-delivered after the spill
    buffer.add(change(20, 1, "c", after={"id": 1}))
    resolve(buffer, 30)
    released, items = buffer.take_ready()
    assert released == 30
    assert isinstance(items[0], SpilledRows) and items[0].count == 10
    spilled = items[0]
    assert [i.pos for i in spilled.items()] == list(range(10))
    assert [i.pos for i in spilled.items()] == list(range(10))  # read again: a re-write after a failed flush
    assert [(i.commit_ts, i.pos) for i in items[1:] if isinstance(i, RowItem)] == [(30, 0)]
    assert buffer.stats.duplicates == 2 and buffer.stats.released == 11 and buffer.stats.buffered == 0
    buffer.add(change(20, 11, "c", after={"id": 11}))  # below the released ts: a re-delivery
    assert buffer.stats.duplicates == 3
    spilled.close()
    assert list(spilled.items()) == []
    buffer.close()


def test_a_spilled_transaction_applies_with_the_schema_before_a_later_ddl(tmp_path: Path) -> None:
    buffer = buffer_of(spill_rows=3)
    buffer.add(ddl(10, "CREATE_TABLE", items_schema(), "CREATE TABLE items (...)"))
    for pos in range(50):
        buffer.add(change(20, pos, "c", after={"id": pos, "name": f"n{pos}"}))
    # the next DDL changes the table: the spilled rows, read while the sink writes, keep the old schema
    buffer.add(ddl(30, "ALTER_TABLE", items_schema(with_note=True), "ALTER TABLE items ADD note TEXT"))
    buffer.add(
        change(
            40,
            0,
            "u",
            before={"id": 1, "name": "n1", "note": None},
            after={"id": 1, "name": "x", "note": "y"},
        )
    )
    resolve(buffer, 40)
    released, items = buffer.take_ready()
    assert released == 40
    assert [type(i).__name__ for i in items] == ["DDLItem", "SpilledRows", "DDLItem", "RowItem"]
    applier = Applier(SQLiteSink({"path": str(tmp_path)}, tmp_path), by_name)
    assert applier.apply(items, released) == 40
    applier.close()
    buffer.close()
    got = rows(tmp_path)
    assert len(got) == 50
    assert got[1] == (1, "x", "y")
    assert got[49] == (49, "n49", None)
    assert (applier.stats.rows, applier.stats.transactions, applier.stats.ddl) == (51, 2, 2)
    assert all(not list(i.items()) for i in items if isinstance(i, SpilledRows))  # deleted once applied


def test_a_spilled_transaction_applied_by_an_earlier_run_is_skipped_and_deleted(tmp_path: Path) -> None:
    def released() -> list[Released]:
        buffer = buffer_of(spill_rows=2)
        buffer.add(ddl(10, "CREATE_TABLE", items_schema(), "CREATE TABLE items (...)"))
        for pos in range(5):
            buffer.add(change(20, pos, "c", after={"id": pos, "name": "n"}))
        resolve(buffer, 20)
        return buffer.take_ready()[1]

    first = Applier(SQLiteSink({"path": str(tmp_path)}, tmp_path), by_name)
    first.apply(released(), 20)
    first.close()
    again = Applier(SQLiteSink({"path": str(tmp_path)}, tmp_path), by_name)
    items = released()
    assert again.apply(items, 20) == 20
    again.close()
    assert again.stats.skipped == 6 and again.stats.rows == 0
    assert len(rows(tmp_path)) == 5
    assert all(not list(i.items()) for i in items if isinstance(i, SpilledRows))
