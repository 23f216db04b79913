"""DDL through the writer: DDL binlogs with the resulting schema, ids that survive restarts and
are never reused, and commit_ts order between a DDL and concurrent DML (on both upstreams).

Services and upstream fixtures come from test_producer_writer.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from bridge import binlog as B
from bridge.dsn import Dsn
from bridge.producer import (
    DdlNotLogged,
    PrewriteFailed,
    SchemaDrift,
    TxnWriter,
    UnknownTable,
    UnsupportedSchema,
    open_upstream,
)
from bridge.proto import row_pb2
from bridge.pumpclient import PumpClientConfig, PumpsClient
from tests.integration import test_producer_writer as shared
from tests.integration.test_producer_writer import ROOT, Services, dsn_text, query, start_meta
from tests.support.process import wait_until

services = shared.services  # the fixtures, shared with the writer tests
upstream_dsn = shared.upstream_dsn

pytestmark = pytest.mark.timeout(180)
Kind = row_pb2.SchemaChange.Kind


def ids(change: row_pb2.SchemaChange) -> dict[str, int]:
    return {c.name: c.id for c in change.table_schema.columns}


def test_ddl_binlog_carries_the_resulting_schema(services: Services, upstream_dsn: Dsn) -> None:
    writer = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    sql = "CREATE TABLE t (a INT NOT NULL PRIMARY KEY, b VARCHAR(10) NULL)"
    result = writer.ddl(sql)
    assert result is not None
    prewrite, commit = services.binlogs(result.start_ts)
    assert B.is_ddl(prewrite) and prewrite.ddl_query == sql.encode()
    assert prewrite.ddl_job_id == result.start_ts
    assert B.read_schema_change(prewrite) == result.change
    assert (commit.tp, commit.commit_ts) == (B.BinlogType.Commit, result.commit_ts)
    change = result.change
    assert (change.kind, change.db, change.table) == (Kind.CREATE_TABLE, writer.upstream.database, "t")
    assert change.table_schema.table_id == result.start_ts  # a TSO timestamp: unique in the cluster
    assert [(i.name, i.primary, list(i.columns)) for i in change.table_schema.indexes] == [
        ("PRIMARY", True, ["a"])
    ]
    status = f"SELECT commit_ts FROM bridge_txn_status WHERE start_ts = {result.start_ts}"
    assert query(upstream_dsn, status) == [(result.commit_ts,)]
    assert writer.ddl("CREATE TABLE IF NOT EXISTS t (a INT NOT NULL PRIMARY KEY)") is None
    assert writer.ddl("DROP TABLE IF EXISTS never_there") is None
    writer.close()


def test_column_ids_survive_restarts_and_are_never_reused(services: Services, upstream_dsn: Dsn) -> None:
    first = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    created = first.ddl("CREATE TABLE t (a INT NOT NULL PRIMARY KEY, b VARCHAR(10) NULL)")
    first.ddl("ALTER TABLE t ADD COLUMN c INT NULL")
    dropped = first.ddl("ALTER TABLE t DROP COLUMN b")
    assert created is not None and dropped is not None
    assert ids(dropped.change) == {"a": 1, "c": 3}
    assert dropped.change.table_schema.max_column_id == 3
    first.close()

    second = TxnWriter(open_upstream(upstream_dsn), services.pumps)  # nothing cached
    readded = second.ddl("ALTER TABLE t ADD COLUMN b VARCHAR(10) NULL")
    renamed = second.ddl("ALTER TABLE t RENAME COLUMN c TO cc")
    assert readded is not None and renamed is not None
    assert ids(readded.change) == {"a": 1, "c": 3, "b": 4}
    assert ids(renamed.change) == {"a": 1, "cc": 3, "b": 4}
    table_id = created.change.table_schema.table_id
    assert renamed.change.table_schema.table_id == table_id
    second.close()

    # A new process agrees: the ids come from bridge_schema upstream.
    child = textwrap.dedent(
        """
        import os, sys
        from bridge.producer import TxnWriter, open_upstream
        from bridge.pumpclient import PumpsClient
        with PumpsClient(sys.argv[1]) as pumps:
            writer = TxnWriter(open_upstream(os.environ["CHILD_UPSTREAM"]), pumps)
            schema = writer.ddl("ALTER TABLE t ADD COLUMN d INT NULL").change.table_schema
            print(schema.table_id, [(c.name, c.id) for c in schema.columns])
        """
    )
    env = {**os.environ, "CHILD_UPSTREAM": dsn_text(upstream_dsn)}
    argv = [sys.executable, "-c", child, services.meta_addr]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{table_id} [('a', 1), ('cc', 3), ('b', 4), ('d', 5)]\n"


def test_table_ids_are_unique_across_upstreams(services: Services, tmp_path: Path) -> None:
    """Two SQLite files both call their database `main`: the drainer still tells their tables apart."""
    table_ids = []
    for name in ("one.db", "two.db"):
        writer = TxnWriter(open_upstream(f"sqlite://{tmp_path / name}"), services.pumps)
        created = writer.ddl("CREATE TABLE t (a INT NOT NULL PRIMARY KEY)")
        assert created is not None
        table_ids.append(created.change.table_schema.table_id)
        writer.close()
    assert table_ids[0] != table_ids[1]


def test_drop_rename_and_recreate(services: Services, upstream_dsn: Dsn) -> None:
    writer = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    created = writer.ddl("CREATE TABLE t (a INT NOT NULL PRIMARY KEY)")
    renamed = writer.ddl("ALTER TABLE t RENAME TO u")
    assert created is not None and renamed is not None
    change = renamed.change
    assert (change.kind, change.table, change.old_table) == (Kind.RENAME_TABLE, "u", "t")
    assert change.table_schema.table_id == created.change.table_schema.table_id
    writer.run(lambda txn: txn.insert("u", {"a": 1}))
    with pytest.raises(UnknownTable):
        writer.run(lambda txn: txn.insert("t", {"a": 2}))

    dropped = writer.ddl("DROP TABLE u")
    assert dropped is not None and not dropped.change.HasField("table_schema")
    assert dropped.change.kind == Kind.DROP_TABLE
    again = writer.ddl("CREATE TABLE u (a INT NOT NULL PRIMARY KEY, b INT NULL)")
    assert again is not None
    assert again.change.table_schema.table_id > created.change.table_schema.table_id
    assert ids(again.change) == {"a": 1, "b": 2}
    assert writer.tables() == ["u"]
    writer.close()


def test_index_ddl_is_an_alter_of_its_table(services: Services, upstream_dsn: Dsn) -> None:
    writer = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    writer.ddl("CREATE TABLE t (a INT NOT NULL PRIMARY KEY, b INT NOT NULL)")
    indexed = writer.ddl("CREATE UNIQUE INDEX t_b ON t (b)")
    assert indexed is not None and indexed.change.kind == Kind.ALTER_TABLE
    assert [(i.name, i.unique, list(i.columns)) for i in indexed.change.table_schema.indexes][1:] == [
        ("t_b", True, ["b"])
    ]
    unindexed = writer.ddl("DROP INDEX t_b" if upstream_dsn.is_sqlite else "DROP INDEX t_b ON t")
    assert unindexed is not None and [i.name for i in unindexed.change.table_schema.indexes] == ["PRIMARY"]
    writer.close()


def test_a_ddl_outside_the_writer_stops_dml_on_the_table(services: Services, upstream_dsn: Dsn) -> None:
    writer = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    writer.ddl("CREATE TABLE t (a INT NOT NULL PRIMARY KEY)")
    with writer.pool.session() as session:  # behind the writer's back
        session.execute("ALTER TABLE t ADD COLUMN sneaky INT NULL")
    other = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    with pytest.raises(SchemaDrift, match="differs from the schema its last DDL binlog carried"):
        other.run(lambda txn: txn.insert("t", {"a": 1}))
    writer.close()
    other.close()


def test_unsupported_types_and_statements_are_refused(services: Services, upstream_dsn: Dsn) -> None:
    writer = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    with pytest.raises(UnsupportedSchema, match="is not carried"):
        writer.ddl("CREATE VIEW v AS SELECT 1")
    if upstream_dsn.is_sqlite:
        with pytest.raises(UnsupportedSchema, match="DECIMAL"):
            writer.ddl("CREATE TABLE wide_money (a DECIMAL(20,2) NOT NULL)")
        assert query(upstream_dsn, "SELECT COUNT(*) FROM sqlite_master WHERE name = 'wide_money'") == [(0,)]
    else:
        with pytest.raises(UnsupportedSchema, match="took effect upstream"):
            writer.ddl("CREATE TABLE shapes (p POINT NULL)")
    writer.close()


def test_dml_commit_ts_orders_against_a_concurrent_ddl(services: Services, upstream_dsn: Dsn) -> None:
    """Rows written with the old schema commit before the DDL, rows with the new column after it.

    DML and DDL go through two writers that share nothing in the process, as two producer
    processes would: the order comes from the upstream's locks alone.
    """
    dml = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    ddl = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    ddl.ddl("CREATE TABLE t (id INT NOT NULL PRIMARY KEY, v INT NULL)")
    committed: list[int] = []
    stop = threading.Event()

    def insert_until_stopped(worker: int) -> None:
        for n in itertools.count(worker * 1_000_000):
            if stop.is_set():
                return
            with dml.transaction() as txn:
                txn.insert("t", {"id": n, "v": worker})
            committed.append(txn.start_ts)

    threads = [threading.Thread(target=insert_until_stopped, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(committed) >= 30, what="DML before the DDL")
        altered = ddl.ddl("ALTER TABLE t ADD COLUMN z INT NULL")
        seen = len(committed)
        wait_until(lambda: len(committed) >= seen + 30, what="DML after the DDL")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert altered is not None
    z = ids(altered.change)["z"]
    binlogs = services.binlogs(*committed)
    prewrites = {b.start_ts: b for b in binlogs if b.tp == B.BinlogType.Prewrite}
    commit_ts = {b.start_ts: b.commit_ts for b in binlogs if b.tp == B.BinlogType.Commit}
    with_z = {}
    for start_ts in committed:
        (mutation,) = B.read_prewrite_value(prewrites[start_ts]).mutations
        with_z[start_ts] = z in row_pb2.Row.FromString(mutation.inserted_rows[0]).column_ids
    assert set(with_z.values()) == {True, False}
    for start_ts, has_z in with_z.items():
        assert has_z == (commit_ts[start_ts] > altered.commit_ts), f"transaction {start_ts}"
    dml.close()
    ddl.close()


def test_ddl_whose_prewrite_fails(services: Services, upstream_dsn: Dsn, tmp_path: Path) -> None:
    """SQLite rolls the DDL back; MySQL cannot, so DML on the table stops until reconciled."""
    writer = TxnWriter(open_upstream(upstream_dsn), services.pumps)
    writer.ddl("CREATE TABLE t (a INT NOT NULL PRIMARY KEY)")
    lonely_meta, lonely_addr = start_meta(tmp_path)  # a cluster without any pump
    try:
        with PumpsClient(lonely_addr, PumpClientConfig(write_timeout=0.3)) as no_pumps:
            stranded = TxnWriter(open_upstream(upstream_dsn), no_pumps)
            expected = PrewriteFailed if upstream_dsn.is_sqlite else DdlNotLogged
            with pytest.raises(expected):
                stranded.ddl("ALTER TABLE t ADD COLUMN b INT NULL")
            stranded.close()
    finally:
        lonely_meta.stop()
    if upstream_dsn.is_sqlite:
        assert [r[1] for r in query(upstream_dsn, "PRAGMA table_info(t)")] == ["a"]
        writer.run(lambda txn: txn.insert("t", {"a": 1}))
    else:
        with pytest.raises(SchemaDrift):
            writer.run(lambda txn: txn.insert("t", {"a": 1}))
    writer.close()
