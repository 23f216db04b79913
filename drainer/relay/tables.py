"""The tables a replay needs, created in its target before the first transaction (``replay``).

A binlog directory (the file sink's, a dead-letter directory, a relay log)
holds the tracked schema of its first file's header and then transactions;
the tables of that header were created by DDLs that are not in the
directory. A replay into a target that lacks them (an empty database, a new
SQLite directory) would be refused at the first row, so :func:`create_tables`
creates every database and table of the header that the target does not
have yet, as the SQL sinks would have (their own DDL planners):

- MySQL: ``CREATE DATABASE IF NOT EXISTS`` and ``CREATE TABLE IF NOT EXISTS``
  (a table that exists is left as it is);
- SQLite (a directory laid out like the sqlite sink's): the database's file
  attached and recorded, each missing table created and its schema stored
  where the sink keeps it, so a later ALTER in the replay finds it.

The DDLs inside the replayed range are applied by the replay itself.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from bridge import mysql
from bridge.dsn import Dsn
from bridge.errors import UserError
from bridge.proto import row_pb2
from bridge.sink.schema import SchemaTracker
from drainer.sinks.sql.mysql_ddl import MySQLDDL
from drainer.sinks.sql.sqlite_ddl import SQLiteDDL
from drainer.sinks.sqlite.store import SQLiteStore

log = logging.getLogger(__name__)

SchemaChange = row_pb2.SchemaChange


def create_tables(target: Dsn, snapshot: bytes, sqlite_dir: str = "") -> int:
    """Create what ``snapshot`` holds and ``target`` lacks; returns how many tables it created
    (MySQL: how many CREATE TABLE IF NOT EXISTS it ran)."""
    tracker = SchemaTracker.restore(snapshot)
    if not tracker.tables and not tracker.databases:
        return 0
    if target.is_mysql:
        return _create_mysql(target, tracker)
    return _create_sqlite(sqlite_dir or target.path, tracker)


def _create_mysql(target: Dsn, tracker: SchemaTracker) -> int:
    import pymysql

    where = f"replay --to {target.redacted()}"
    created = 0
    try:
        conn = mysql.connect(target)
    except pymysql.Error as exc:
        raise UserError(f"{where}: cannot connect: {exc}") from None
    statement = ""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            row = cur.fetchone()
            flavor = "mariadb" if row is not None and "mariadb" in str(row[0]).lower() else "mysql"
            planner = MySQLDDL(flavor)
            for change in tracker.changes():
                for statement in planner.plan(change, None):
                    cur.execute(statement)
                created += change.kind == SchemaChange.CREATE_TABLE
        conn.commit()
    except pymysql.Error as exc:
        shape = statement.split("(", 1)[0][:200]
        raise UserError(
            f"{where}: creating the tables of the first file's schema failed: {exc} ({shape})"
        ) from None
    finally:
        conn.close()
    log.info("%s: made sure of %d tables of the first file's schema", where, created)
    return created


def _create_sqlite(directory: str, tracker: SchemaTracker) -> int:
    created = 0
    try:
        store = SQLiteStore(Path(directory), 5.0, "NORMAL")
    except sqlite3.Error as exc:
        raise UserError(f"replay --to sqlite:{directory}: cannot open: {exc}") from None
    try:
        planner = SQLiteDDL()
        for db in tracker.databases:
            if db not in store.attached:
                store.attach(db)
                store.record_database(db, present=True)
        for tracked in tracker.tables:
            schema = tracked.schema
            if schema.table in store.tables(schema.db):
                continue
            store.conn.execute(planner.create_table(schema))
            store.save_schema(schema)
            created += 1
    except sqlite3.Error as exc:
        raise UserError(
            f"replay --to sqlite:{directory}: creating the first file's tables failed: {exc}"
        ) from None
    finally:
        store.close()
    if created:
        log.info("replay: created %d tables of the first file's schema in %s", created, directory)
    return created
