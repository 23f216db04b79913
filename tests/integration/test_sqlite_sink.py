"""The sqlite sink fed events built from real binlogs: rows, exactly-once, DDL, errors, memory."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.errors import SinkApplyError, SinkUnavailable
from bridge.sink.events import Event, ResolvedEvent
from drainer.sinks.sqlite.sink import SQLiteSink
from tests.support import all_types
from tests.support.binlog_events import EventStream, table_schema

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange
ROOT = Path(__file__).resolve().parents[2]


def sink(path: Path, resume_ts: int = 0, config: dict[str, object] | None = None) -> SQLiteSink:
    result = SQLiteSink({"path": str(path), **(config or {})}, path)
    result.open(SinkContext(resume_ts=resume_ts))
    return result


def rows(path: Path, db: str, query: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path / f"{db}.db")
    try:
        return conn.execute(query).fetchall()
    finally:
        conn.close()


def test_every_type_is_stored_by_the_documented_mapping(tmp_path: Path) -> None:
    stream = EventStream()
    events: list[Event] = [
        stream.create(all_types.schema("shop")),
        stream.inserts("shop.all_types", all_types.ROWS),
    ]
    first = all_types.ROWS[0]
    events.append(stream.txn([("update", "shop.all_types", first, (10, *first[1:]))]))
    target = sink(tmp_path)
    target.write(events)
    assert target.flush() == events[-1].commit_ts
    target.close()
    stored = rows(tmp_path, "shop", "SELECT * FROM all_types ORDER BY id")
    assert [r[0] for r in stored] == [2, 3, 10]
    assert stored[2][1:] == (
        -128, -1, "-12345678901234.123456", 1.5, 0.1 + 0.2, -(1 << 63) + 1, 2155, "2024-02-29",
        "2024-01-02 03:04:05.123456", "2030-01-01 00:00:00.123", "-838:59:58.99", "abc", "héllo ✓ 日本",
        "x" * 1000, b"\x00\x01\x02\x03", b"\xff\x00", bytes(range(256)), '{"b": [1, 2.5, null], "a": "x"}',
        "b", "x,z",
    )  # fmt: skip
    assert stored[0][8:11] == ("0000-00-00", "0000-00-00 00:00:00.000000", "1970-01-01 00:00:01.000")
    assert stored[1][1:] == (None,) * (len(all_types.COLUMNS) - 1)


def keyed_and_keyless(stream: EventStream) -> list[Event]:
    return [
        stream.create(
            table_schema("shop", "k", [("id", T.BIGINT), ("v", T.VARCHAR)], key=["id"], table_id=1)
        ),
        stream.create(table_schema("shop", "n", [("a", T.INT), ("b", T.VARCHAR)], table_id=2)),
    ]


def test_a_crash_before_flush_then_a_replay_from_an_older_position_applies_each_event_once(
    tmp_path: Path,
) -> None:
    stream = EventStream()
    ddl = keyed_and_keyless(stream)
    batch1 = [
        stream.txn([("insert", "shop.k", None, (1, "a")), ("insert", "shop.n", None, (1, "x"))]),
        stream.txn([("insert", "shop.n", None, (1, "x")), ("update", "shop.k", (1, "a"), (1, "b"))]),
    ]
    batch2 = [
        stream.txn([("insert", "shop.k", None, (2, "c")), ("insert", "shop.n", None, (2, "y"))]),
        stream.txn([("delete", "shop.n", (1, "x"), None)]),
    ]
    first = sink(tmp_path)
    first.write([*ddl, *batch1])
    flushed = first.flush()
    first.write(batch2)  # never flushed: lost with the "crash"
    first.close()
    # The drainer restarts from an older checkpoint and sends everything again.
    second = sink(tmp_path, resume_ts=0)
    for event in [*ddl, *batch1, *batch2, ResolvedEvent(batch2[-1].commit_ts + 5)]:
        second.write([event])
    assert second.flush() == batch2[-1].commit_ts + 5 > flushed
    second.close()
    assert rows(tmp_path, "shop", "SELECT * FROM k ORDER BY id") == [(1, "b"), (2, "c")]
    assert rows(tmp_path, "shop", "SELECT * FROM n ORDER BY a, b") == [(1, "x"), (2, "y")]
    third = sink(tmp_path, resume_ts=0)  # a third start: everything is known applied
    third.write([*ddl, *batch1, *batch2])
    assert third.flush() == batch2[-1].commit_ts + 5
    third.close()
    assert rows(tmp_path, "shop", "SELECT count(*) FROM n") == [(2,)]


def test_a_failed_write_is_rolled_back_so_the_same_events_can_be_written_again(tmp_path: Path) -> None:
    stream = EventStream()
    ddl = keyed_and_keyless(stream)
    good = stream.txn([("insert", "shop.k", None, (1, "a"))])
    target = sink(tmp_path, config={"busy-timeout": "50ms"})
    target.write([*ddl, good])
    target.flush()
    later = [stream.txn([("insert", "shop.n", None, (i, "z"))]) for i in range(3)]
    blocker = sqlite3.connect(tmp_path / "_bridge.sqlite", isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    with pytest.raises(SinkUnavailable, match="busy"):
        target.write(later)
    blocker.execute("ROLLBACK")
    blocker.close()
    target.write(later)
    target.write(later)  # written again after a failed flush: skipped, not duplicated
    assert target.flush() == later[-1].commit_ts
    target.close()
    assert rows(tmp_path, "shop", "SELECT count(*) FROM n") == [(3,)]


def test_a_statement_the_downstream_refuses_names_table_commit_ts_and_shape_not_values(
    tmp_path: Path,
) -> None:
    stream = EventStream()
    ddl = keyed_and_keyless(stream)
    target = sink(tmp_path)
    target.write([*ddl, stream.txn([("insert", "shop.k", None, (1, "secret-1"))])])
    assert target.flush()
    duplicate = stream.txn(
        [("insert", "shop.n", None, (5, "x")), ("insert", "shop.k", None, (1, "secret-2"))]
    )
    with pytest.raises(SinkApplyError) as failure:
        target.write([duplicate])
    message = str(failure.value)
    assert f"commit_ts {duplicate.commit_ts}" in message and "table shop.k" in message
    assert 'INSERT INTO "db:shop"."k" ("id", "v") VALUES (?, ?)' in message
    assert "secret" not in message and not failure.value.retriable
    target.flush()
    target.close()
    assert rows(tmp_path, "shop", "SELECT count(*) FROM n") == [(0,)]  # the whole write was undone


def test_ddl_sequence_keeps_the_data(tmp_path: Path) -> None:
    stream = EventStream()
    schema = table_schema("shop", "t", [("id", T.BIGINT), ("a", T.VARCHAR), ("b", T.INT)], key=["id"])
    events: list[Event] = [stream.create(schema), stream.inserts("shop.t", [(1, "x", 10), (2, "y", None)])]
    schema.columns.add(id=4, name="c", type=T.VARCHAR, default_value="'dflt'")  # NOT NULL with a default
    schema.max_column_id = 4
    events.append(stream.alter(schema))
    del schema.columns[2]  # drop b
    schema.columns[1].name = "a2"  # rename a
    events.append(stream.alter(schema))
    schema.columns[2].type = T.TEXT  # a type change: rebuilt
    events.append(stream.alter(schema))
    events.append(stream.inserts("shop.t", [(3, "z", "new")]))
    renamed = stream.schema("shop", "t")
    renamed.table = "u"
    events.append(
        stream.ddl(
            Change(
                kind=Change.RENAME_TABLE,
                db="shop",
                table="u",
                old_db="shop",
                old_table="t",
                table_schema=renamed,
            )
        )
    )
    target = sink(tmp_path)
    target.write(events)
    target.flush()
    assert rows(tmp_path, "shop", "SELECT * FROM u ORDER BY id") == [
        (1, "x", "dflt"),
        (2, "y", "dflt"),
        (3, "z", "new"),
    ]
    assert [r[1] for r in rows(tmp_path, "shop", "PRAGMA table_info(u)")] == ["id", "a2", "c"]
    moved = stream.schema("shop", "u")
    moved.db = "archive"
    more: list[Event] = [
        stream.ddl(Change(kind=Change.CREATE_DATABASE, db="archive")),
        stream.ddl(
            Change(
                kind=Change.RENAME_TABLE,
                db="archive",
                table="u",
                old_db="shop",
                old_table="u",
                table_schema=moved,
            )
        ),
        stream.ddl(Change(kind=Change.TRUNCATE_TABLE, db="archive", table="u", table_schema=moved)),
        stream.inserts("archive.u", [(9, "q", "r")]),
    ]
    target.write(more)
    target.flush()
    assert rows(tmp_path, "archive", "SELECT * FROM u") == [(9, "q", "r")]
    assert rows(tmp_path, "shop", "SELECT name FROM sqlite_master WHERE type = 'table'") == []
    target.write(
        [
            stream.ddl(Change(kind=Change.DROP_TABLE, db="archive", table="u")),
            stream.ddl(Change(kind=Change.DROP_DATABASE, db="shop")),
        ]
    )
    target.flush()
    target.close()
    assert rows(tmp_path, "archive", "SELECT count(*) FROM sqlite_master WHERE type = 'table'") == [(0,)]
    assert not (tmp_path / "shop.db").exists()


def test_reopening_reattaches_databases_and_knows_schemas(tmp_path: Path) -> None:
    stream = EventStream()
    schema = table_schema("main", "t", [("id", T.BIGINT), ("a", T.INT)], key=["id"])
    first = sink(tmp_path)
    first.write([stream.create(schema), stream.inserts("main.t", [(1, 1)])])
    first.flush()
    first.close()
    schema.columns.add(id=3, name="b", type=T.INT, nullable=True)
    schema.max_column_id = 3
    second = sink(tmp_path, resume_ts=stream.ts)
    second.write([stream.alter(schema), stream.inserts("main.t", [(2, 2, 2)])])
    second.flush()
    second.close()
    assert rows(tmp_path, "main", "SELECT * FROM t ORDER BY id") == [(1, 1, None), (2, 2, 2)]


MILLION = r"""
import json, resource, sys, time
from pathlib import Path
from drainer.collect.merger import PulledTxn
from drainer.collect.pull import scan_header
from bridge.sink.contract import SinkContext
from drainer.sinks.sqlite.sink import SQLiteSink
from tests.support.binlog_events import EventStream, table_schema, T

mode, rows, path = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
stream = EventStream()
schema = table_schema("big", "t", [("id", T.BIGINT), ("name", T.VARCHAR), ("n", T.INT)], key=["id"])
create = stream.create(schema)
if mode == "build":
    txn = stream.inserts("big.t", ((i, f"name-{i:09d}", i % 1000) for i in range(rows)))
    (path / "txn.bin").write_bytes(txn.payload)
    sys.exit(0)
payload = (path / "txn.bin").read_bytes()
header = scan_header(payload)
pulled = PulledTxn(header.start_ts, header.commit_ts, payload, False, header.value_span)
txn = stream.builder.build(pulled).event
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
sink = SQLiteSink({"path": str(path / "sink"), "synchronous": "normal"}, path)
sink.open(SinkContext())
started = time.perf_counter()
sink.write([create, txn])
sink.flush()
seconds = time.perf_counter() - started
sink.close()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
result = {"before_mb": before, "peak_mb": peak, "payload_mb": len(payload) / 2**20}
result["rows_per_s"] = rows / seconds
print(json.dumps(result))
"""


@pytest.mark.slow
def test_a_million_row_transaction_streams_through_in_bounded_memory(tmp_path: Path) -> None:
    def run(mode: str) -> str:
        argv = [sys.executable, "-c", MILLION, mode, "1000000", str(tmp_path)]
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True).stdout

    run("build")  # encoding a million rows is the producer's cost: measured in another process
    result = json.loads(run("apply"))
    print("sqlite sink, one 1M-row transaction:", result)
    # The process holds the payload; held decoded, the rows alone would take more than 300 MB.
    assert result["peak_mb"] - result["before_mb"] < 150, result
    assert rows(tmp_path / "sink", "big", "SELECT count(*), sum(n) FROM t") == [(1_000_000, 499_500_000)]
