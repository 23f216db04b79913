"""No deadlocks between the MySQL sink's workers on a table whose unique key moves between rows.

A catch-up (one large backlog, flushes every few thousand events, 16 workers)
of transactions that swap the values of a secondary UNIQUE index between rows
through a parked value (as ``binlog-bridge load``'s ``load_slots`` does) and
rewrite rows in place. Before tables with a secondary unique index were kept on
one worker per flush window (drainer/sinks/mysql/causality.py), this history
met 4-6 deadlocks (error 1213) per run on MariaDB 10.11: the duplicate check of
an insert into that index next-key locks the neighbouring entry, which another
worker holds. Now: zero, counted by the sink's own metric, in normal and safe
mode, and ``diff`` finds the downstream equal to an upstream table holding the
rows the history leaves.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
from prometheus_client import REGISTRY

from bridge.apps.diff import diff
from bridge.dsn import parse_dsn
from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.events import Event
from drainer.sinks.mysql.sink import MySQLSink
from tests.support.binlog_events import EventStream, table_schema

pytestmark = pytest.mark.mysql
T = row_pb2.ColumnType
ROWS = 10_000
TXNS = 2_000
CREATE = (
    "CREATE TABLE `{db}`.`slots` (id INT NOT NULL PRIMARY KEY, uk INT NOT NULL, v VARCHAR(20) NULL, "
    "UNIQUE KEY uk (uk))"
)
Row = tuple[object, ...]


@pytest.fixture
def server(unique_name: str) -> Iterator[tuple[str, Any]]:
    dsn = parse_dsn(os.environ.get("BRIDGE_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/"))
    auth = dsn.user + (f":{dsn.password}" if dsn.password else "")
    conn = pymysql.connect(
        host=dsn.host, port=dsn.port, user=dsn.user, password=dsn.password, autocommit=True
    )
    try:
        yield f"mysql://{auth}@{dsn.host}:{dsn.port}/", conn
    finally:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE %s", (f"{unique_name}%",))
            for (name,) in cur.fetchall():
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        conn.close()


def history(stream: EventStream, name: str, seed: int) -> tuple[list[Event], dict[int, tuple[int, str]]]:
    """``ROWS`` rows (uk = id), then ``TXNS`` transactions of 1-6 steps: a swap of two rows' uk values
    through a parked value (-1 - id), or a rewrite of one row's ``v``; the events and the rows left."""
    rng = random.Random(seed)
    rows = {i: (i, "v") for i in range(ROWS)}
    events: list[Event] = []
    for first in range(0, ROWS, 1000):
        events.append(stream.inserts(name, [(i, i, "v") for i in range(first, min(first + 1000, ROWS))]))
    for t in range(TXNS):
        changes: list[tuple[str, str, Row | None, Row | None]] = []
        for _ in range(rng.randint(1, 6)):
            a, b = rng.randrange(ROWS), rng.randrange(ROWS)
            (ua, va), (ub, vb) = rows[a], rows[b]
            if a != b and rng.random() < 0.5:
                parked = -1 - a  # never a real uk value
                changes.append(("update", name, (a, ua, va), (a, parked, va)))
                changes.append(("update", name, (b, ub, vb), (b, ua, f"s{t}")))
                changes.append(("update", name, (a, parked, va), (a, ub, f"s{t}")))
                rows[a], rows[b] = (ub, f"s{t}"), (ua, f"s{t}")
            else:
                changes.append(("update", name, (a, ua, va), (a, ua, f"w{t}")))
                rows[a] = (ua, f"w{t}")
        events.append(stream.txn(changes))
    return events, rows


def counter(name: str, labels: dict[str, str] | None = None) -> float:
    return REGISTRY.get_sample_value(name, labels or {}) or 0.0


@pytest.mark.parametrize("safe", [False, True])
def test_unique_values_moving_between_rows_cause_no_deadlock(
    server: tuple[str, Any], unique_name: str, safe: bool
) -> None:
    url, conn = server
    up, down, progress = f"{unique_name}_u", f"{unique_name}_d", f"{unique_name}_p"
    stream = EventStream()
    columns = [
        row_pb2.Column(name="id", type=T.INT),
        row_pb2.Column(name="uk", type=T.INT),
        row_pb2.Column(name="v", type=T.VARCHAR, length=20, nullable=True),
    ]
    schema = table_schema(down, "slots", columns, key=["id"], unique=["uk"])
    events: list[Event] = [stream.create(schema)]
    rest, rows = history(stream, f"{down}.slots", seed=5 + safe)
    events += rest
    settings = {
        "dsn": url, "progress-schema": progress, "worker-count": 16, "safe-mode": safe,
        "safe-mode-duration": "0s",
    }  # fmt: skip
    sink = MySQLSink(settings, Path("/nonexistent"))
    deadlocks = counter("bridge_sink_mysql_deadlocks_total")
    retries = counter("bridge_sink_mysql_retries_total", {"scope": "worker"})
    sink.open(SinkContext.at(0, b"", cluster_id=random.randrange(1, 1 << 40)))
    try:
        sink.write(events[:1])
        sink.flush()
        # a catch-up: writes of 256 events, a flush every 1024 (the drainer's flush-events is 4096
        # events; smaller here so that every flush window spreads keys over all 16 workers)
        for n, start in enumerate(range(1, len(events), 256)):
            sink.write(events[start : start + 256])
            if n % 4 == 3:
                sink.flush()
        assert sink.flush() == events[-1].commit_ts
    finally:
        sink.close()
    assert counter("bridge_sink_mysql_deadlocks_total") - deadlocks == 0
    assert counter("bridge_sink_mysql_retries_total", {"scope": "worker"}) - retries == 0
    with conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{up}`")
        cur.execute(CREATE.format(db=up))
        values = [(i, uk, v) for i, (uk, v) in rows.items()]
        cur.executemany(f"INSERT INTO `{up}`.`slots` VALUES (%s, %s, %s)", values)
    report = diff(f"{url}{up}", f"{url}{down}")
    assert report.equal and report.rows == ROWS, report.lines()
