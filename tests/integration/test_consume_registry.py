"""The registry encoding through consume's apply path, in one process: the real kafka sink with a
``mock://`` schema registry writes to the real broker, consume's reader (same ``mock://`` URL: the
same in-process registry) and the resolved-ts loop apply it into SQLite.

Hand-built events, so the exact rows, duplicates and an ALTER are checked; the workload's run
through the registry encoding is tests/e2e/test_kafka_registry_e2e.py.
"""

from __future__ import annotations

import sqlite3
import time
from decimal import Decimal
from pathlib import Path

import pytest

from bridge.apps.consume.apply import Applier
from bridge.apps.consume.reader import ChangeReader
from bridge.apps.consume.runner import Limits, run_apply
from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.events import DDLEvent, Event, RowChange, TxnEvent
from bridge.tso import compose
from drainer.sinks.kafka.sink import KafkaSink
from drainer.sinks.sqlite.sink import SQLiteSink

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange


def accounts(with_note: bool) -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(table_id=3, db="bank", table="accounts")
    schema.columns.add(id=1, name="id", type=T.BIGINT)
    schema.columns.add(id=2, name="owner", type=T.VARCHAR, length=40, nullable=True)
    schema.columns.add(id=3, name="balance", type=T.DECIMAL, precision=12, scale=2, nullable=True)
    schema.columns.add(id=4, name="big", type=T.BIGINT, unsigned=True, nullable=True)
    if with_note:
        schema.columns.add(id=5, name="note", type=T.TEXT, nullable=True)
    schema.max_column_id = 5 if with_note else 4
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return schema


def txn(ts: int, changes: list[RowChange]) -> TxnEvent:
    return TxnEvent(ts - 1, ts, b"", decode=lambda: iter(changes), row_count=len(changes))


def ddl(ts: int, kind: int, schema: row_pb2.TableSchema, query: str) -> DDLEvent:
    change = Change(kind=kind, db=schema.db, table=schema.table, table_schema=schema)  # type: ignore[arg-type]
    before = None if kind == Change.CREATE_TABLE else accounts(False)
    return DDLEvent(ts - 1, ts, b"", query, change, before, schema)


def events(base: int) -> list[Event]:
    old, new = accounts(False), accounts(True)
    rows = [(i, f"owner {i}", Decimal(i) * Decimal("1.25"), 2**64 - i) for i in range(1, 51)]
    out: list[Event] = [ddl(base + 1, Change.CREATE_TABLE, old, "CREATE TABLE accounts (...)")]
    out.append(txn(base + 3, [RowChange("insert", old, None, r) for r in rows]))
    out.append(
        txn(
            base + 5,
            [
                RowChange("update", old, rows[0], (1, "renamed", Decimal("9.99"), 7)),
                RowChange("delete", old, rows[1], None),
            ],
        )
    )
    out.append(ddl(base + 7, Change.ALTER_TABLE, new, "ALTER TABLE accounts ADD note TEXT"))
    out.append(
        txn(
            base + 9,
            [RowChange("insert", new, None, (100, "late", Decimal("0.01"), None, "after the ALTER"))],
        )
    )
    return out


def test_registry_encoded_topics_apply_in_order(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    url = f"mock://{unique_name}"
    sink = KafkaSink(
        {"bootstrap-servers": kafka_bootstrap, "prefix": unique_name, "schema-registry-url": url}, tmp_path
    )
    sink.open(SinkContext(cluster_id=4))
    base = compose(int(time.time() * 1000), 0)
    written = events(base)
    try:
        sink.write(written)
        position = sink.flush()  # acknowledged: watermarks at the position go out with the flush
        assert position == written[-1].commit_ts
        # the same events again, as a drainer restarted from an older checkpoint writes them
        sink.open(SinkContext(cluster_id=4))
        sink.write(written)
        assert sink.flush() == written[-1].commit_ts
    finally:
        sink.close()

    target = tmp_path / "replica"
    applier = Applier(SQLiteSink({"path": str(target)}, target))
    reader = ChangeReader(kafka_bootstrap, prefix=unique_name, registry_url=url, from_beginning=True)
    try:
        summary = run_apply(reader, applier, Limits(until_ts=written[-1].commit_ts, idle_timeout=30))
    finally:
        applier.close()
        reader.close()
    assert summary.changes == 53 and summary.ddl == 2, summary.line()
    assert summary.duplicates == 55, summary.line()  # every message of the second write
    with sqlite3.connect(target / "bank.db") as conn:
        got = list(conn.execute("SELECT id, owner, balance, big, note FROM accounts ORDER BY id"))
    assert len(got) == 50  # 50 inserted, 1 deleted, 1 inserted after the ALTER
    assert got[0] == (1, "renamed", "9.99", 7, None)
    # BIGINT UNSIGNED 2**64 - 3 went through Avro as decimal(20,0); the sqlite sink stores values
    # >= 2**63 as two's complement (drainer/sinks/sql/sqlite.py)
    assert got[1] == (3, "owner 3", "3.75", 2**64 - 3 - 2**64, None)
    assert got[-1] == (100, "late", "0.01", None, "after the ALTER")
