"""The mysql sink against real MariaDB, fed events built from real binlogs (tests/support/binlog_events).

Every test writes into databases of its own (``<unique_name>...``) and keeps
its progress table in one of them, dropped at teardown.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pymysql
import pytest
from prometheus_client import REGISTRY

from bridge.apps.diff import diff
from bridge.dsn import Dsn, parse_dsn
from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.driver import SinkDriver
from bridge.sink.errors import SinkApplyError
from bridge.sink.events import Event, ResolvedEvent
from drainer.sinks.mysql.sink import MySQLSink
from tests.support import all_types
from tests.support.binlog_events import EventStream, table_schema
from tests.support.mariadb_instance import MariaDBInstance

pytestmark = pytest.mark.mysql
T = row_pb2.ColumnType
Change = row_pb2.SchemaChange


class Downstream:
    """The test's MariaDB: a DSN for the sink, a connection for checks, the test's database names."""

    def __init__(self, dsn: Dsn, conn: Any, name: str) -> None:
        self.dsn, self.conn, self.name = dsn, conn, name
        self.db = f"{name}_d"
        self.progress = f"{name}_p"
        self.cluster_id = random.randrange(1, 1 << 40)

    @property
    def url(self) -> str:
        auth = self.dsn.user + (f":{self.dsn.password}" if self.dsn.password else "")
        return f"mysql://{auth}@{self.dsn.host}:{self.dsn.port}/"

    def sink(
        self, resume_ts: int = 0, snapshot: bytes = b"", safe_mode: bool = False, **config: object
    ) -> MySQLSink:
        """An open sink; ``safe_mode`` is the context's flag (what the relay-log replay sets)."""
        settings: dict[str, object] = {"dsn": self.url, "progress-schema": self.progress, "worker-count": 16}
        settings.update({k.replace("_", "-"): v for k, v in config.items()})
        sink = MySQLSink(settings, Path("/nonexistent"))
        sink.open(SinkContext.at(resume_ts, snapshot, cluster_id=self.cluster_id, safe_mode=safe_mode))
        return sink

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return [tuple(r) for r in cur.fetchall()]

    def execute(self, sql: str) -> None:
        with self.conn.cursor() as cur:
            cur.execute(sql)


@pytest.fixture
def down(unique_name: str) -> Iterator[Downstream]:
    dsn = parse_dsn(os.environ.get("BRIDGE_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/"))
    conn = pymysql.connect(
        host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password, autocommit=True, charset="utf8mb4"
    )
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    target = Downstream(dsn, conn, unique_name)
    try:
        yield target
    finally:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE %s", (f"{unique_name}%",))
            for (name,) in cur.fetchall():
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


def apply(sink: MySQLSink, events: Sequence[Event]) -> int:
    sink.write(events)
    return sink.flush()


def test_the_seed_conflict_example_with_16_workers(down: Downstream) -> None:
    stream = EventStream()
    name = f"{down.db}.itest"
    schema = table_schema(
        down.db, "itest", [("id", T.BIGINT), ("name", T.VARCHAR), ("age", T.INT)], key=["id"]
    )
    events: list[Event] = [
        stream.create(schema),
        stream.inserts(name, [(2, "b", 14), (3, "a", 13)]),
        stream.txn([("update", name, (3, "a", 13), (4, "c", 15))]),  # SQL1: keys 3, 4
        stream.txn([("update", name, (2, "b", 14), (5, "b", 14))]),  # SQL2: keys 2, 5
        stream.inserts(name, [(3, "d", 16)]),
        stream.txn([("delete", name, (3, "d", 16), None)]),  # SQL3: key 3
        # Keys 5 and 4 are held by the workers of SQL2 and SQL1 (different ones, or the same one).
        stream.txn(
            [("update", name, (5, "b", 14), (6, "b", 14)), ("update", name, (4, "c", 15), (5, "c", 15))]
        ),
    ]
    sink = down.sink()
    try:
        assert apply(sink, events) == events[-1].commit_ts
    finally:
        sink.close()
    assert down.query(f"SELECT id, name, age FROM `{down.db}`.itest ORDER BY id") == [
        (5, "c", 15),
        (6, "b", 14),
    ]


def random_history(
    stream: EventStream, name: str, seed: int, txns: int
) -> tuple[list[Event], dict[int, tuple[int, str]]]:
    """Transactions of inserts, deletes and primary/unique key moves over a small key space, and the
    rows they leave (id -> (uk, v)); unique key ``uk`` values move between rows too."""
    rng = random.Random(seed)
    rows: dict[int, tuple[int, str]] = {}
    events: list[Event] = []
    for t in range(txns):
        changes: list[tuple[str, str, tuple[object, ...] | None, tuple[object, ...] | None]] = []
        for _ in range(rng.randint(1, 6)):
            free_ids = [i for i in range(1, 25) if i not in rows]
            used_uks = {uk for uk, _ in rows.values()}
            free_uks = [u for u in range(1, 25) if u not in used_uks]
            action = rng.random()
            if not rows or (action < 0.3 and free_ids and free_uks):
                new_id, uk = rng.choice(free_ids), rng.choice(free_uks)
                rows[new_id] = (uk, f"v{t}")
                changes.append(("insert", name, None, (new_id, uk, f"v{t}")))
            elif action < 0.45:
                old_id = rng.choice(sorted(rows))
                uk, v = rows.pop(old_id)
                changes.append(("delete", name, (old_id, uk, v), None))
            else:
                old_id = rng.choice(sorted(rows))
                uk, v = rows[old_id]
                new_id = rng.choice([*free_ids, old_id]) if free_ids else old_id
                new_uk = rng.choice([*free_uks, uk]) if free_uks else uk
                del rows[old_id]
                rows[new_id] = (new_uk, f"u{t}")
                changes.append(("update", name, (old_id, uk, v), (new_id, new_uk, f"u{t}")))
        events.append(stream.txn(changes))
    return events, rows


@pytest.mark.parametrize(("safe", "batch_updates"), [(False, True), (False, False), (True, True)])
def test_random_key_moves_end_with_the_model_rows_under_16_workers(
    down: Downstream, safe: bool, batch_updates: bool
) -> None:
    stream = EventStream()
    name = f"{down.db}.moves"
    columns = [
        row_pb2.Column(name="id", type=T.INT),
        row_pb2.Column(name="uk", type=T.INT),
        row_pb2.Column(name="v", type=T.VARCHAR, length=20, nullable=True),
    ]
    schema = table_schema(down.db, "moves", columns, key=["id"], unique=["uk"])
    create = stream.create(schema)
    history, expected = random_history(stream, name, seed=7 if safe else 11 + batch_updates, txns=400)
    sink = down.sink(
        safe_mode=safe,
        safe_mode_duration="0s",
        batch_rows=8,
        txn_rows=50,
        batch_updates=batch_updates,
        serial_unique_tables=False,  # spread by row keys: the conflict detection is what this tests
    )
    events: list[Event] = [create, *history]
    driver = SinkDriver(sink, threading.Event(), retry_initial=0.01, retry_max=0.1)
    try:
        for start in range(0, len(events), 37):
            driver.write(events[start : start + 37])
            if start % 3 == 0:
                driver.flush()
        assert driver.flush() == events[-1].commit_ts
    finally:
        sink.close()
    got = down.query(f"SELECT id, uk, v FROM `{down.db}`.moves ORDER BY id")
    assert got == [(i, uk, v) for i, (uk, v) in sorted(expected.items())]
    assert sink.conflict_flushes > 0  # the history makes two workers hold one change's keys


def test_two_transactions_swapping_unique_key_values_end_right_with_16_workers(down: Downstream) -> None:
    stream = EventStream()
    name = f"{down.db}.u"
    columns = [
        row_pb2.Column(name="id", type=T.INT),
        row_pb2.Column(name="code", type=T.VARCHAR, length=10),
        row_pb2.Column(name="n", type=T.INT, nullable=True),
    ]
    schema = table_schema(down.db, "u", columns, key=["id"], unique=["code"])
    events: list[Event] = [
        stream.create(schema),
        stream.inserts(name, [(i, f"c{i}", i) for i in range(1, 41)]),
    ]
    for a in range(1, 41, 2):  # every odd row swaps its code with the next row, through a temporary value
        b = a + 1
        events.append(
            stream.txn(
                [
                    ("update", name, (a, f"c{a}", a), (a, "tmp", a)),
                    ("update", name, (b, f"c{b}", b), (b, f"c{a}", b)),
                    ("update", name, (a, "tmp", a), (a, f"c{b}", a)),
                ]
            )
        )
    # A second round of transactions swaps them back: the new values collide with the old ones.
    for a in range(1, 41, 2):
        b = a + 1
        events.append(
            stream.txn(
                [
                    ("update", name, (a, f"c{b}", a), (a, "tmp", a + 100)),
                    ("update", name, (b, f"c{a}", b), (b, f"c{b}", b + 100)),
                    ("update", name, (a, "tmp", a + 100), (a, f"c{a}", a + 100)),
                ]
            )
        )
    for safe_mode_duration in ("0s", "60s"):
        sink = down.sink(safe_mode_duration=safe_mode_duration)
        try:
            assert apply(sink, events[:2]) == events[1].commit_ts
            for event in events[2:]:
                sink.write([event])  # one event per write: all in flight, nothing flushed between
            assert sink.flush() == events[-1].commit_ts
        finally:
            sink.close()
        assert down.query(f"SELECT id, code, n FROM `{down.db}`.u ORDER BY id") == [
            (i, f"c{i}", i + 100) for i in range(1, 41)
        ]
        down.execute(f"DROP DATABASE `{down.db}`")
        down.execute(f"DROP DATABASE `{down.progress}`")


def test_every_type_round_trips_in_normal_and_safe_mode(down: Downstream) -> None:
    direct = f"{down.name}_direct"
    down.execute(f"CREATE DATABASE `{direct}`")
    down.execute(all_types.mysql_ddl(direct))
    first, second, third = all_types.ROWS
    moved = (10, *first[1:])
    marks = ", ".join(["%s"] * len(all_types.COLUMNS))
    with down.conn.cursor() as cur:
        for row in (moved, third):
            cur.execute(
                f"INSERT INTO `{direct}`.all_types VALUES ({marks})", [all_types.mysql_value(v) for v in row]
            )
    stream = EventStream()
    name = f"{down.db}.all_types"
    events: list[Event] = [
        stream.create(all_types.schema(down.db)),
        stream.inserts(name, all_types.ROWS),
        stream.txn([("update", name, first, moved), ("delete", name, second, None)]),
    ]
    for safe in (False, True):
        sink = down.sink(safe_mode=safe, safe_mode_duration="0s")
        try:
            assert apply(sink, events) == events[-1].commit_ts
        finally:
            sink.close()
        auth = f"mysql://{down.dsn.user}@{down.dsn.host}:{down.dsn.port}"
        report = diff(f"{auth}/{direct}", f"{auth}/{down.db}")
        assert report.equal and report.rows == 2, report.lines()
        down.execute(f"DROP DATABASE `{down.db}`")
        down.execute(f"DROP DATABASE `{down.progress}`")


def test_ddl_during_dml_keeps_every_row(down: Downstream) -> None:
    stream = EventStream()
    db = down.db
    schema = table_schema(db, "t", [("id", T.BIGINT), ("a", T.VARCHAR), ("b", T.INT)], key=["id"])
    schema.columns[1].length = 20
    events: list[Event] = [
        stream.create(schema),
        stream.inserts(f"{db}.t", [(i, f"a{i}", i) for i in range(50)]),
    ]
    schema = stream.schema(db, "t")
    schema.columns.add(
        id=4, name="c", type=T.VARCHAR, length=10, default_value="'dflt'"
    )  # NOT NULL + default
    schema.indexes.add(name="by_b", columns=["b"])
    schema.max_column_id = 4
    events.append(stream.alter(schema))
    events.append(stream.txn([("update", f"{db}.t", (1, "a1", 1, "dflt"), (1, "a1", 1, "new"))]))
    events.append(stream.inserts(f"{db}.t", [(i, f"a{i}", i, f"c{i}") for i in range(50, 80)]))
    schema = stream.schema(db, "t")
    schema.columns[1].name = "a_renamed"  # rename by id
    del schema.columns[2]  # drop b (and with it the index on b)
    del schema.indexes[1]
    events.append(stream.alter(schema))
    events.append(stream.txn([("delete", f"{db}.t", (i, f"a{i}", f"c{i}"), None) for i in range(70, 80)]))
    events.append(
        stream.ddl(
            Change(
                kind=Change.RENAME_TABLE,
                db=db,
                table="t2",
                old_db=db,
                old_table="t",
                table_schema=_renamed(schema, "t2"),
            )
        )
    )
    events.append(stream.inserts(f"{db}.t2", [(100, "x", "y")]))
    keyless = table_schema(db, "n", [("a", T.INT), ("b", T.VARCHAR)], table_id=5)
    events += [stream.create(keyless), stream.inserts(f"{db}.n", [(1, "x"), (1, "x")])]
    events.append(
        stream.ddl(Change(kind=Change.TRUNCATE_TABLE, db=db, table="n", table_schema=stream.schema(db, "n")))
    )
    events.append(stream.inserts(f"{db}.n", [(2, "y")]))
    sink = down.sink()
    try:
        for event in events:
            sink.write([event])
        assert sink.flush() == events[-1].commit_ts
    finally:
        sink.close()
    rows = down.query(f"SELECT id, a_renamed, c FROM `{db}`.t2 ORDER BY id")
    expected = [(i, f"a{i}", "new" if i == 1 else "dflt") for i in range(50)]
    expected += [(i, f"a{i}", f"c{i}") for i in range(50, 70)] + [(100, "x", "y")]
    assert rows == expected
    assert down.query(f"SELECT a, b FROM `{db}`.n") == [(2, "y")]
    columns = down.query(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 't2' "
        "ORDER BY ORDINAL_POSITION",
        (db,),
    )
    assert columns == [("id",), ("a_renamed",), ("c",)]
    # A restart below everything replays it all: DDLs are skipped by their recorded progress, keyless rows
    # by theirs, keyed rows are rewritten in safe mode; nothing changes.
    again = down.sink(resume_ts=0)
    try:
        for event in events:
            again.write([event])
        assert again.flush() == events[-1].commit_ts
        # The skipped DDLs still reached its schema tracking: a later ALTER is the right difference.
        schema = stream.schema(db, "t2")
        schema.columns.add(id=5, name="d", type=T.INT, nullable=True)
        schema.max_column_id = 5
        later: list[Event] = [stream.alter(schema), stream.inserts(f"{db}.t2", [(101, "z", "w", 5)])]
        assert apply(again, later) == later[-1].commit_ts
    finally:
        again.close()
    expected.append((101, "z", "w"))
    assert down.query(f"SELECT id, a_renamed, c FROM `{db}`.t2 ORDER BY id") == expected
    assert down.query(f"SELECT d FROM `{db}`.t2 WHERE id = 101") == [(5,)]
    assert down.query(f"SELECT a, b FROM `{db}`.n") == [(2, "y")]


def _renamed(schema: row_pb2.TableSchema, table: str) -> row_pb2.TableSchema:
    copy = row_pb2.TableSchema()
    copy.CopyFrom(schema)
    copy.table = table
    return copy


def keyed_and_keyless(stream: EventStream, db: str) -> list[Event]:
    return [
        stream.create(table_schema(db, "k", [("id", T.BIGINT), ("v", T.VARCHAR)], key=["id"], table_id=1)),
        stream.create(table_schema(db, "n", [("a", T.INT), ("b", T.VARCHAR)], table_id=2)),
    ]


def load(stream: EventStream, db: str, txns: int, start: int = 0) -> list[Event]:
    """Transactions each inserting 5 keyed rows, updating one and adding 2 identical keyless rows."""
    events: list[Event] = []
    for t in range(start, start + txns):
        changes: list[tuple[str, str, tuple[object, ...] | None, tuple[object, ...] | None]] = [
            ("insert", f"{db}.k", None, (t * 10 + i, f"v{t}")) for i in range(5)
        ]
        changes.append(("update", f"{db}.k", (t * 10, f"v{t}"), (t * 10, f"w{t}")))
        changes += [("insert", f"{db}.n", None, (t, "same")), ("insert", f"{db}.n", None, (t, "same"))]
        events.append(stream.txn(changes))
    return events


def expected_rows(txns: int) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    keyed = [(t * 10 + i, f"w{t}" if i == 0 else f"v{t}") for t in range(txns) for i in range(5)]
    keyless = [(t, "same") for t in range(txns) for _ in range(2)]
    return keyed, keyless


def test_killed_connections_mid_run_are_retried_and_the_rows_are_right(down: Downstream) -> None:
    stream = EventStream()
    ddl = keyed_and_keyless(stream, down.db)
    events = load(stream, down.db, 120)
    sink = down.sink(safe_mode_duration="0s", txn_rows=7, batch_rows=4, worker_count=4)
    driver = SinkDriver(sink, threading.Event(), retry_initial=0.01, retry_max=0.2)
    kills = 0
    try:
        driver.write(ddl)
        driver.flush()
        for start in range(0, len(events), 10):
            driver.write(events[start : start + 10])
            if start % 30 == 20:
                # Kill every connection of the sink from outside: workers hold open transactions
                # (some changes committed by txn-rows, the rest not), the control connection idles.
                ids = [w.connection_id for w in sink._pool.workers if w.conn is not None]
                control = sink._control.connection
                ids += [control.thread_id()] if control is not None else []
                for connection_id in ids:
                    try:
                        down.execute(f"KILL {int(connection_id)}")
                        kills += 1
                    except pymysql.err.OperationalError:
                        pass  # already gone
                driver.write([ResolvedEvent(events[start + 9].commit_ts + 1)])
                driver.flush()
        driver.write([ResolvedEvent(events[-1].commit_ts + 1)])
        assert driver.flush() == events[-1].commit_ts + 1
    finally:
        sink.close()
    keyed, keyless = expected_rows(120)
    assert kills > 0
    assert down.query(f"SELECT id, v FROM `{down.db}`.k ORDER BY id") == keyed
    assert down.query(f"SELECT a, b FROM `{down.db}`.n ORDER BY a") == keyless


def test_a_crash_between_a_ddl_and_its_applied_row_skips_the_events_before_it(down: Downstream) -> None:
    """SIGKILL while a DROP COLUMN runs: the server finishes it, its "applied" progress row is never
    written. The restarted sink must not replay the rows before it (their images name the dropped
    column): the DDL's "started" row proves them applied, and the DDL runs again (IF EXISTS)."""
    stream = EventStream()
    db, name = down.db, f"{down.db}.t"
    schema = table_schema(db, "t", [("id", T.INT), ("v", T.VARCHAR), ("gone", T.INT)], key=["id"])
    events: list[Event] = [stream.create(schema), stream.inserts(name, [(i, f"v{i}", i) for i in range(20)])]
    events.append(stream.txn([("update", name, (i, f"v{i}", i), (i, f"w{i}", -i)) for i in range(5)]))
    schema = stream.schema(db, "t")
    del schema.columns[2]
    events.append(stream.alter(schema))
    events.append(stream.inserts(name, [(100, "after")]))
    first = down.sink()
    try:
        assert apply(first, events[:4]) == events[3].commit_ts
    finally:
        first.close()
    # The crash: the DDL ran downstream, its "applied" row still names the CREATE (worker -2).
    down.execute(
        f"UPDATE `{down.progress}`.sink_progress SET commit_ts = {events[0].commit_ts} "
        f"WHERE cluster_id = {down.cluster_id} AND worker = -2"
    )
    again = down.sink(resume_ts=events[0].commit_ts)  # the checkpoint was still at the CREATE
    try:
        for event in events[1:]:
            again.write([event])
        assert again.flush() == events[-1].commit_ts
    finally:
        again.close()
    expected = [(i, f"w{i}" if i < 5 else f"v{i}") for i in range(20)] + [(100, "after")]
    assert down.query(f"SELECT id, v FROM `{db}`.t ORDER BY id") == expected
    columns = down.query(
        "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 't' "
        "ORDER BY ORDINAL_POSITION",
        (db,),
    )
    assert columns == [("id",), ("v",)]


def test_a_keyless_table_redelivered_after_a_crash_is_not_duplicated(down: Downstream) -> None:
    stream = EventStream()
    ddl = keyed_and_keyless(stream, down.db)
    events = load(stream, down.db, 60)
    first = down.sink(txn_rows=5, worker_count=3)
    try:
        checkpoint = apply(first, [*ddl, *events[:20]])
        first.write(events[20:50])  # partly committed by txn-rows, never flushed: the "crash"
        first._barrier("test")  # every worker commits what it has; the checkpoint stays behind
    finally:
        first.close()
    assert checkpoint == events[19].commit_ts
    # A new sink opened below what was applied gets everything after the checkpoint again.
    second = down.sink(resume_ts=events[5].commit_ts, txn_rows=5, worker_count=3)
    try:
        for start in range(6, len(events), 9):
            second.write(events[start : start + 9])
        assert second.flush() == events[-1].commit_ts
    finally:
        second.close()
    keyed, keyless = expected_rows(60)
    assert down.query(f"SELECT id, v FROM `{down.db}`.k ORDER BY id") == keyed
    assert down.query(f"SELECT a, b FROM `{down.db}`.n ORDER BY a") == keyless


def test_safe_mode_replay_of_the_same_events_gives_the_same_rows(down: Downstream) -> None:
    stream = EventStream()
    name = f"{down.db}.s"
    schema = table_schema(down.db, "s", [("id", T.INT), ("v", T.VARCHAR)], key=["id"])
    events: list[Event] = [
        stream.create(schema),
        stream.inserts(name, [(i, f"v{i}") for i in range(30)]),
        stream.txn([("update", name, (i, f"v{i}"), (i + 100, f"m{i}")) for i in range(10)]),
        stream.txn([("delete", name, (i, f"v{i}"), None) for i in range(20, 25)]),
        stream.txn([("update", name, (i, f"v{i}"), (i, f"x{i}")) for i in range(10, 20)]),
        stream.inserts(name, [(5, "again")]),
    ]
    results = []
    for _ in range(2):
        sink = down.sink(safe_mode=True)
        try:
            assert apply(sink, events) == events[-1].commit_ts
        finally:
            sink.close()
        results.append(down.query(f"SELECT id, v FROM `{down.db}`.s ORDER BY id"))
        down.execute(f"DROP DATABASE `{down.progress}`")  # forget the progress: a full replay
    expected = [(5, "again")] + [(i, f"x{i}") for i in range(10, 20)] + [(i, f"v{i}") for i in range(25, 30)]
    expected += [(i + 100, f"m{i}") for i in range(10)]
    assert results[0] == results[1] == expected


def test_a_refused_change_names_table_and_commit_ts_but_no_values(down: Downstream) -> None:
    stream = EventStream()
    ddl = keyed_and_keyless(stream, down.db)
    sink = down.sink(safe_mode_duration="0s", worker_count=1)
    try:
        apply(sink, ddl)
        down.execute(f"INSERT INTO `{down.db}`.k VALUES (1, 'secret-1'), (5, 'secret-5')")
        # One group, one round trip: the DELETE passes, the INSERT after it is refused and named.
        duplicate = stream.txn(
            [
                ("delete", f"{down.db}.k", (5, "secret-5"), None),
                ("insert", f"{down.db}.k", None, (1, "secret-2")),
            ]
        )
        with pytest.raises(SinkApplyError) as failure:
            apply(sink, [duplicate])
    finally:
        sink.close()
    message = str(failure.value)
    assert f"commit_ts {duplicate.commit_ts}" in message and f"table {down.db}.k" in message
    assert "(1062)" in message and "INSERT INTO `" in message and "%s" in message and "DELETE" not in message
    assert "secret" not in message and "'1'" not in message and not failure.value.retriable


def test_a_missing_table_and_a_failing_ddl_stop_with_commit_ts_and_the_way_out(down: Downstream) -> None:
    stream = EventStream()
    ddl = keyed_and_keyless(stream, down.db)
    sink = down.sink()
    try:
        apply(sink, ddl)
        down.execute(f"DROP TABLE `{down.db}`.k")
        insert = stream.txn([("insert", f"{down.db}.k", None, (7, "hidden"))])
        with pytest.raises(
            SinkApplyError, match=rf"commit_ts {insert.commit_ts}: table {down.db}\.k.*\(1146\)"
        ):
            apply(sink, [insert])
    finally:
        sink.close()
    snapshot = stream.tracker.snapshot()
    schema = stream.schema(down.db, "n")
    schema.columns[0].nullable = False  # NOT NULL, while the downstream holds a NULL there
    down.execute(f"INSERT INTO `{down.db}`.n VALUES (NULL, 'a')")
    alter = stream.alter(schema)
    again = down.sink(resume_ts=ddl[-1].commit_ts, snapshot=snapshot)
    try:
        with pytest.raises(SinkApplyError) as failure:
            apply(again, [alter])
    finally:
        again.close()
    message = str(failure.value)
    assert f"DDL at commit_ts {alter.commit_ts}" in message and "ignore-txn-commit-ts" in message


def retries_total() -> float:
    return sum(
        REGISTRY.get_sample_value("bridge_sink_mysql_retries_total", {"scope": scope}) or 0.0
        for scope in ("worker", "sink")
    )


@pytest.mark.slow
def test_a_downstream_stopped_mid_run_only_delays_replication(tmp_path: Path, port: int) -> None:
    server = MariaDBInstance(tmp_path / "downstream", port)
    server.start()
    try:
        stream = EventStream()
        db = "stopped"
        ddl = keyed_and_keyless(stream, db)
        events = load(stream, db, 300)
        sink = MySQLSink({"dsn": server.dsn, "retry-max": "500ms", "txn-rows": 40}, tmp_path)
        sink.open(SinkContext(cluster_id=7))
        driver = SinkDriver(sink, threading.Event(), retry_initial=0.05, retry_max=0.5)
        retries_before = retries_total()
        written, stopped = threading.Event(), threading.Event()
        failures: list[BaseException] = []

        def replicate() -> None:
            try:
                driver.write(ddl)
                driver.flush()
                for start in range(0, len(events), 10):
                    driver.write(events[start : start + 10])
                    if start == 100:
                        written.set()  # written, not flushed: the workers hold open transactions
                        assert stopped.wait(120)
                    driver.flush()  # fails while the server is down; retried until it is back
            except BaseException as exc:  # reported by the test thread
                failures.append(exc)
            finally:
                written.set()

        thread = threading.Thread(target=replicate)
        thread.start()
        assert written.wait(120)
        server.stop()
        stopped.set()
        time.sleep(3)  # the drainer keeps writing meanwhile (and fails, and retries)
        server.start()
        thread.join(timeout=180)
        assert not thread.is_alive() and not failures, failures
        sink.close()
        # The outage was met: by a worker applying its open transaction again, or by the drainer.
        assert driver.retries + retries_total() > retries_before
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT id, v FROM `{db}`.k ORDER BY id")
                keyed_rows = [tuple(r) for r in cur.fetchall()]
                cur.execute(f"SELECT a, b FROM `{db}`.n ORDER BY a")
                keyless_rows = [tuple(r) for r in cur.fetchall()]
        finally:
            conn.close()
        keyed, keyless = expected_rows(300)
        assert keyed_rows == keyed and keyless_rows == keyless
    finally:
        server.stop()


def test_forced_safe_mode_makes_a_replay_idempotent_and_can_be_lifted(down: Downstream) -> None:
    stream = EventStream()
    name = f"{down.db}.f"
    events: list[Event] = [
        stream.create(table_schema(down.db, "f", [("id", T.INT), ("v", T.VARCHAR)], key=["id"])),
        stream.inserts(name, [(i, "a") for i in range(20)]),
    ]
    first = down.sink(safe_mode_duration="0s")
    try:
        apply(first, events)
    finally:
        first.close()
    down.execute(f"DROP DATABASE `{down.progress}`")  # nothing tells the next sink what was applied
    second = down.sink(safe_mode=True, safe_mode_duration="0s")  # what the relay-log replay does
    try:
        assert apply(second, events) == events[-1].commit_ts
    finally:
        second.close()
    third = down.sink(events[-1].commit_ts, stream.tracker.snapshot(), safe_mode_duration="0s")  # lifted
    try:
        again = stream.inserts(name, [(3, "b")])
        with pytest.raises(SinkApplyError, match="1062"):
            apply(third, [again])
    finally:
        third.close()
    assert down.query(f"SELECT count(*) FROM `{down.db}`.f") == [(20,)]


def test_a_mysql_upstream_table_is_created_with_its_own_types_charset_and_indexes(down: Downstream) -> None:
    schema = row_pb2.TableSchema(db=down.db, table="orders", table_id=3, charset="utf8mb4")
    schema.collation = "utf8mb4_general_ci"
    schema.columns.add(id=1, name="id", type=T.BIGINT, unsigned=True, sql_type="bigint(20) unsigned")
    schema.columns.add(
        id=2, name="note", type=T.VARCHAR, length=50, nullable=True, sql_type="varchar(50)",
        charset="utf8mb4", collation="utf8mb4_bin", default_value="'it''s'",
    )  # fmt: skip
    schema.columns.add(id=3, name="state", type=T.ENUM, elems=["new", "it's"], sql_type="enum('new','it''s')")
    schema.columns.add(id=4, name="body", type=T.TEXT, nullable=True, sql_type="mediumtext")
    schema.max_column_id = 4
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    schema.indexes.add(name="by_body", columns=["body"])
    schema.indexes.add(name="uk_note", unique=True, columns=["note"])
    stream = EventStream()
    events: list[Event] = [
        stream.create(schema),
        stream.inserts(
            f"{down.db}.orders", [((1 << 64) - 1, "A", "it's", "x" * 70000), (2, "a", "new", None)]
        ),
    ]
    sink = down.sink()
    try:
        apply(sink, events)
    finally:
        sink.close()
    columns = down.query(
        "SELECT COLUMN_NAME, COLUMN_TYPE, COLLATION_NAME, COLUMN_DEFAULT FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'orders' ORDER BY ORDINAL_POSITION",
        (down.db,),
    )
    assert [c[:2] for c in columns] == [
        ("id", "bigint(20) unsigned"),
        ("note", "varchar(50)"),
        ("state", "enum('new','it''s')"),
        ("body", "mediumtext"),
    ]
    assert columns[1][2:] == ("utf8mb4_bin", "'it''s'")  # 'A' and 'a' are two values under _bin
    indexes = down.query(
        "SELECT DISTINCT INDEX_NAME, NON_UNIQUE FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'orders' ORDER BY INDEX_NAME",
        (down.db,),
    )
    assert indexes == [("by_body", 1), ("PRIMARY", 0), ("uk_note", 0)]
    rows = down.query(f"SELECT id, note, state, LENGTH(body) FROM `{down.db}`.orders ORDER BY id")
    assert rows == [(2, "a", "new", None), ((1 << 64) - 1, "A", "it's", 70000)]
