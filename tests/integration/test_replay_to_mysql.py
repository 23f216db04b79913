"""``binlog-bridge replay --to mysql://`` and ``--to sqlite:`` into EMPTY targets (issue 18).

The directory replayed is shaped like a dead-letter directory: its header holds the schema of two
tables whose CREATE TABLE is not in it, then transactions and an ALTER. The replay creates the
tables it lacks, applies the rest, and ``binlog-bridge diff`` finds the target equal to the same
events applied directly; run again, it changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from bridge.dsn import parse_dsn
from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.events import Event
from drainer.sinks.file.sink import FileSink
from drainer.sinks.sqlite.sink import SQLiteSink
from tests.support.binlog_events import EventStream, RowChange, table_schema
from tests.support.process import run_cli

pytestmark = pytest.mark.timeout(180)

T = row_pb2.ColumnType
MYSQL_DSN = os.environ.get("BRIDGE_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/")


def dead_letter_like(stream: EventStream, db: str, directory: Path, expected: Path) -> None:
    """Two tables created before the directory's first file; rows, an ALTER, more rows in it.
    ``expected``: every event (the CREATEs too) applied directly by the sqlite sink."""
    keyed = table_schema(db, "k", [("id", T.BIGINT), ("v", T.VARCHAR)], key=["id"], table_id=1)
    keyless = table_schema(db, "n", [("a", T.INT), ("b", T.TEXT)], table_id=2)
    creates: list[Event] = [stream.create(keyed), stream.create(keyless)]
    header = SinkContext.at(stream.ts + 1, stream.tracker.snapshot())
    events: list[Event] = []
    for i in range(30):
        changes: list[RowChange] = [
            ("insert", f"{db}.k", None, (i, f"v{i}")),
            ("insert", f"{db}.n", None, (i % 4, "x")),
        ]
        if i % 3 == 0 and i:
            changes.append(("update", f"{db}.k", (i - 1, f"v{i - 1}"), (i - 1, f"u{i - 1}")))
        events.append(stream.txn(changes))
    wider = stream.schema(db, "k")
    wider.columns.add(id=3, name="note", type=T.TEXT, nullable=True)
    wider.max_column_id = 3
    events.append(stream.alter(wider))
    events.append(stream.txn([("insert", f"{db}.k", None, (99, "late", "noted"))]))
    files = FileSink({"path": str(directory)}, directory)
    files.open(header)
    files.write(events)
    files.flush()
    files.close()
    direct = SQLiteSink({"path": str(expected)}, expected)
    direct.open(SinkContext())
    direct.write([*creates, *events])
    direct.flush()
    direct.close()


@pytest.fixture
def database(unique_name: str) -> Iterator[str]:
    yield unique_name
    dsn = parse_dsn(MYSQL_DSN)
    conn = pymysql.connect(host=dsn.host, port=dsn.port, user=dsn.user or "root", password=dsn.password or "")
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}`")
        cur.execute(f"DROP DATABASE IF EXISTS `{unique_name}_progress`")
    conn.close()


def replay_and_diff(directory: Path, target: str, downstream: str, upstream: str, *flags: str) -> None:
    """Replay twice (the second run changes nothing), then diff."""
    for run in range(2):
        replayed = run_cli("replay", "--dir", str(directory), "--to", target, *flags)
        assert replayed.returncode == 0, replayed.stderr
        if run == 0:
            assert "replayed 31 transactions (" in replayed.stdout and "and 1 DDLs" in replayed.stdout
            assert "made sure of 2 tables of the first file's schema" in replayed.stderr
    compared = run_cli("diff", "--upstream", upstream, "--downstream", downstream, "--quiet")
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "equal (2 tables" in compared.stdout


def test_replay_into_an_empty_mysql_server_creates_the_tables(tmp_path: Path, database: str) -> None:
    dead_letter_like(EventStream(), database, tmp_path / "dead-letter", tmp_path / "expected")
    replay_and_diff(
        tmp_path / "dead-letter",
        MYSQL_DSN,
        MYSQL_DSN.rstrip("/") + f"/{database}",
        f"sqlite:{tmp_path}/expected/{database}.db",
        "--progress-schema",
        f"{database}_progress",
    )


def test_replay_into_an_empty_sqlite_directory_creates_the_tables(tmp_path: Path) -> None:
    dead_letter_like(EventStream(), "shop", tmp_path / "dead-letter", tmp_path / "expected")
    replay_and_diff(
        tmp_path / "dead-letter",
        f"sqlite:{tmp_path}/replica",
        f"sqlite:{tmp_path}/replica/shop.db",
        f"sqlite:{tmp_path}/expected/shop.db",
    )
