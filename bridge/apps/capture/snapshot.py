"""The initial snapshot: the selected tables' rows as of one binlog position, then streaming from it.

1. Open a transaction ``WITH CONSISTENT SNAPSHOT`` (REPEATABLE READ) and
   read the binlog position it corresponds to: on MariaDB from
   ``binlog_snapshot_file``/``binlog_snapshot_position`` (the server reports
   the position of the snapshot itself) and ``BINLOG_GTID_POS()``; on MySQL
   from ``SHOW MASTER STATUS``. Both under a short ``FLUSH TABLES WITH READ
   LOCK``, which also holds the table definitions still while each table's
   ``SHOW CREATE TABLE`` is read (its shadow is made from that text) and each
   table is touched in the snapshot transaction: its metadata lock, held until
   the copy ends, makes a DDL on a captured table wait for the snapshot.
2. Announce each table with a CREATE_TABLE DDL binlog (its schema as the SQL
   producer describes it; its id = that binlog's start_ts).
3. Read each table in key order, ``snapshot-chunk`` rows at a time, through
   pymysql and the producer's column adapters (as the producer reads rows),
   and write each chunk as one transaction of inserts whose
   ``TableMutation.snapshot`` is true (``op`` "r" in the Kafka envelope).
4. Journal "done"; streaming starts at the snapshot's position: every
   transaction committed before it is in the rows read, every one after it
   comes from the binlog — no gap, nothing twice.

A snapshot interrupted by a crash is started again from step 1, after a
TRUNCATE_TABLE DDL binlog for each table already announced, so rows of the
first attempt that the second one no longer sees do not stay downstream.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from bridge.apps.capture import metrics
from bridge.apps.capture.emitter import Emitter
from bridge.apps.capture.journal import Journal
from bridge.apps.capture.position import Position
from bridge.apps.capture.shadow import show_create
from bridge.apps.capture.tables import TableCatalog, qualified
from bridge.binlog import TableMutationBuilder
from bridge.dsn import Dsn
from bridge.producer.ddlparse import Kind
from bridge.producer.errors import UpstreamError
from bridge.producer.mysql import MySQLSession, MySQLUpstream
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from bridge.schema import key_positions

log = logging.getLogger(__name__)


def snapshot_position(session: MySQLSession, flavor: str, mode: str) -> Position:
    """Start the consistent-snapshot transaction on ``session``; the binlog position it sees.

    Called under the global read lock (:func:`read_lock`), which MySQL needs
    for the position and both need for table definitions that match it.
    """
    session.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    session.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    if flavor == "mariadb":
        found = {str(k).lower(): v for k, v in session.query("SHOW STATUS LIKE 'binlog_snapshot_%'")}
        file, offset = str(found["binlog_snapshot_file"]), int(found["binlog_snapshot_position"])
        gtid = str(session.query("SELECT BINLOG_GTID_POS(%s, %s)", [file, offset])[0][0] or "")
        return Position(flavor, mode, file, offset, gtid)
    status = session.query("SHOW MASTER STATUS")[0]
    gtid = str(status[4]).replace("\n", "") if len(status) > 4 and status[4] else ""
    return Position(flavor, mode, str(status[0]), int(status[1]), gtid)


def read_lock(session: MySQLSession, flavor: str) -> bool:
    """Take ``FLUSH TABLES WITH READ LOCK``; False (MariaDB only) when the user may not."""
    try:
        session.execute("FLUSH TABLES WITH READ LOCK")
    except UpstreamError as exc:
        if flavor != "mariadb":
            raise
        log.warning(
            "no global read lock (%s): a DDL racing the snapshot's start may make it fail; "
            "grant RELOAD to the capture's user",
            exc,
        )
        return False
    return True


class SnapshotStopped(Exception):
    """The capture was told to stop during the snapshot; the next start takes it again."""


class Snapshot:
    """Runs the snapshot of every selected table; see the module docstring.

    ``stopping`` is checked between chunks: once set, :meth:`run` raises
    :class:`SnapshotStopped`.
    """

    def __init__(
        self,
        dsn: Dsn,
        catalog: TableCatalog,
        emitter: Emitter,
        journal: Journal,
        chunk: int,
        stopping: threading.Event,
    ) -> None:
        self._stopping = stopping
        self._dsn = dsn
        self._catalog = catalog
        self._emitter = emitter
        self._journal = journal
        self._chunk = chunk
        self.rows = 0

    def run(self, flavor: str, mode: str, databases: list[str]) -> Position:
        upstream = MySQLUpstream(self._dsn.with_database(databases[0]))
        session = upstream.connect()
        try:
            if self._journal.state.snapshot == "running":
                self._truncate_announced()
            locked = read_lock(session, flavor)
            try:
                position = snapshot_position(session, flavor, mode)
                tables = [(db, t, _hold(session, db, t)) for db, t in self._catalog.live_tables()]
            finally:
                if locked:
                    session.execute("UNLOCK TABLES")
            log.info("snapshot at %s", position.describe())
            self._journal.snapshot("running", position)
            self._drop_gone({qualified(db, t) for db, t, _ in tables}, position)
            for db, table, create_sql in tables:
                schema = self._announce(db, table, create_sql, position)
                self._copy(session, upstream, schema, position)
            session.rollback()
        finally:
            session.close()
        self._journal.snapshot("done")
        log.info("snapshot done: %d rows", self.rows)
        return position

    def _truncate_announced(self) -> None:
        """A previous attempt was interrupted: empty what it announced before copying again."""
        position = self._journal.state.position
        assert position is not None
        for name, schema in self._catalog.schemas().items():
            change = row_pb2.SchemaChange(
                kind=Kind.TRUNCATE_TABLE, db=schema.db, table=schema.table, table_schema=schema
            )
            updates: dict[str, row_pb2.TableSchema | None] = {name: schema}
            sql = f"TRUNCATE TABLE `{schema.db}`.`{schema.table}`"
            self._emitter.ddl(sql, _fixed(change, updates), position)
            log.info("snapshot restarted: %s truncated downstream", name)

    def _drop_gone(self, live: set[str], position: Position) -> None:
        """A table an interrupted attempt announced that no longer exists: DROP_TABLE."""
        for name, schema in self._catalog.schemas().items():
            if name not in live:
                change = row_pb2.SchemaChange(kind=Kind.DROP_TABLE, db=schema.db, table=schema.table)
                sql = f"DROP TABLE `{schema.db}`.`{schema.table}`"
                self._emitter.ddl(sql, _fixed(change, {name: None}), position)

    def _announce(self, db: str, table: str, create_sql: str, position: Position) -> row_pb2.TableSchema:
        """CREATE_TABLE for a new table; for one an interrupted attempt announced, ALTER_TABLE when
        its definition changed since (the rows copied next have the new columns)."""
        known = self._catalog.get(db, table) is not None

        def change_for(start_ts: int) -> tuple[row_pb2.SchemaChange, dict[str, row_pb2.TableSchema | None]]:
            ddl = self._catalog.created(db, table, start_ts, create_sql, keep_id=known)
            return ddl.change, ddl.updates

        if not known or self._catalog.changed(db, table, create_sql):
            self._emitter.ddl(create_sql, change_for, position)
        entry = self._catalog.get(db, table)
        assert entry is not None
        return entry.schema

    def _copy(
        self, session: MySQLSession, upstream: MySQLUpstream, schema: row_pb2.TableSchema, position: Position
    ) -> None:
        codec = RowCodec(schema)
        adapters = upstream.adapters(schema)
        count = 0
        for rows in _chunks(session, schema, self._chunk):
            if self._stopping.is_set():
                raise SnapshotStopped
            builder = TableMutationBuilder(schema.table_id)
            for row in rows:
                builder.insert(
                    codec.encode(
                        [None if v is None else a.from_db(v) for v, a in zip(row, adapters, strict=True)]
                    )
                )
            mutation = builder.build()
            mutation.snapshot = True
            self._emitter.rows([mutation], position)
            count += len(rows)
            metrics.ROW_CHANGES.labels("snapshot").inc(len(rows))
        self.rows += count
        log.info("snapshot of %s: %d rows", qualified(schema.db, schema.table), count)


def _hold(session: MySQLSession, db: str, table: str) -> str:
    """Touch ``db.table`` in the snapshot transaction, then read its definition.

    The touch takes the table's metadata lock until the transaction ends: a DDL on it
    waits for the snapshot to finish instead of changing the columns under its reads.
    """
    q = session.dialect.quote
    session.query(f"SELECT 1 FROM {q(db)}.{q(table)} LIMIT 0")  # noqa: S608 - quoted names
    return show_create(session, db, table)


def _fixed(
    change: row_pb2.SchemaChange, updates: dict[str, row_pb2.TableSchema | None]
) -> Callable[[int], tuple[row_pb2.SchemaChange, dict[str, row_pb2.TableSchema | None]]]:
    return lambda _start_ts: (change, updates)


def _chunks(session: MySQLSession, schema: row_pb2.TableSchema, size: int) -> Iterator[list[tuple[Any, ...]]]:
    """The table's rows, ``size`` at a time: by key where it has one, else by offset."""
    q = session.dialect.quote
    columns = ", ".join(q(c.name) for c in schema.columns)
    table = f"{q(schema.db)}.{q(schema.table)}"
    key = key_positions(schema)
    if not key:
        offset = 0
        while rows := session.query(f"SELECT {columns} FROM {table} LIMIT %s OFFSET %s", [size, offset]):  # noqa: S608
            yield rows
            offset += len(rows)
        return
    names = [q(schema.columns[p].name) for p in key]
    order = ", ".join(names)
    after = f"({order}) > ({', '.join(['%s'] * len(key))})"
    rows = session.query(f"SELECT {columns} FROM {table} ORDER BY {order} LIMIT %s", [size])  # noqa: S608
    while rows:
        yield rows
        last = [rows[-1][p] for p in key]
        following = f"SELECT {columns} FROM {table} WHERE {after} ORDER BY {order} LIMIT %s"  # noqa: S608
        rows = session.query(following, [*last, size])
