"""The SQLite sink's files: one SQLite file per upstream database, attached to one connection.

Layout of the sink's directory (``[sink.sqlite] path``)::

    _bridge.sqlite     the main database: _bridge_checkpoint, _bridge_schema, _bridge_databases
    shop.db            upstream database "shop" (names percent-encoded: "a/b" -> "a%2Fb.db")
    main.db            upstream database "main" (what a SQLite upstream calls its file)

Every file is attached to the one connection under ``"db:<name>"``
(:func:`drainer.translator.sqlite.schema_alias`) and uses a rollback journal,
so that one transaction changing rows in several files and the checkpoint in
``_bridge.sqlite`` commits atomically (SQLite's super-journal; WAL would make
each file atomic only on its own). SQLite attaches at most 10 files to a
connection: the sink replicates up to 10 databases.

``_bridge_checkpoint`` holds the commit_ts applied, written in the same
transaction as the rows; ``_bridge_schema`` the ``TableSchema`` of every
table the sink created (what an ALTER is compared against);
``_bridge_databases`` the attached databases.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from urllib.parse import quote

from bridge.proto import row_pb2
from drainer.sinks.sql.sqlite import schema_alias

log = logging.getLogger(__name__)

MAIN_FILE = "_bridge.sqlite"
MAX_DATABASES = 10

_SETUP = (
    "CREATE TABLE IF NOT EXISTS _bridge_checkpoint (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "commit_ts INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO _bridge_checkpoint VALUES (1, 0)",
    "CREATE TABLE IF NOT EXISTS _bridge_schema (db TEXT NOT NULL, tbl TEXT NOT NULL, "
    "schema BLOB NOT NULL, PRIMARY KEY (db, tbl))",
    "CREATE TABLE IF NOT EXISTS _bridge_databases (name TEXT PRIMARY KEY, file TEXT NOT NULL)",
)


def database_file(name: str) -> str:
    """The file name of upstream database ``name`` inside the sink's directory."""
    return quote(name, safe="") + ".db"


class SQLiteStore:
    """The connection and the sink's bookkeeping tables; statements run in the caller's transaction."""

    def __init__(self, directory: Path, busy_timeout: float, synchronous: str) -> None:
        self.directory = directory
        self._synchronous = synchronous
        directory.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(
            directory / MAIN_FILE,
            timeout=busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=512,
        )
        self.attached: set[str] = set()
        try:
            self._tune("main")
            for statement in _SETUP:
                self.conn.execute(statement)
            for (name,) in self.conn.execute("SELECT name FROM _bridge_databases").fetchall():
                self.attach(name)
        except sqlite3.Error:
            self.conn.close()  # a busy file: the caller tries again, and nothing stays open meanwhile
            raise

    def _tune(self, schema: str) -> None:
        q = '"' + schema.replace('"', '""') + '"'
        self.conn.execute(f"PRAGMA {q}.journal_mode = TRUNCATE")
        self.conn.execute(f"PRAGMA {q}.synchronous = {self._synchronous}")

    def attach(self, name: str) -> None:
        """Attach database ``name``'s file (created when missing); outside any transaction."""
        if len(self.attached) >= MAX_DATABASES:
            raise sqlite3.OperationalError(
                f"cannot replicate database {name!r}: SQLite attaches at most {MAX_DATABASES} databases"
            )
        path = self.directory / database_file(name)
        self.conn.execute("ATTACH DATABASE ? AS ?", (str(path), schema_alias(name)))
        self._tune(schema_alias(name))
        self.attached.add(name)

    def detach(self, name: str) -> None:
        """Detach database ``name`` and remove its (now table-less) file; outside any transaction."""
        self.conn.execute("DETACH DATABASE ?", (schema_alias(name),))
        self.attached.discard(name)
        for suffix in ("", "-journal"):
            (self.directory / (database_file(name) + suffix)).unlink(missing_ok=True)

    def record_database(self, name: str, present: bool) -> None:
        if present:
            self.conn.execute(
                "INSERT OR IGNORE INTO _bridge_databases VALUES (?, ?)", (name, database_file(name))
            )
        else:
            self.conn.execute("DELETE FROM _bridge_databases WHERE name = ?", (name,))
            self.conn.execute("DELETE FROM _bridge_schema WHERE db = ?", (name,))

    def checkpoint(self) -> int:
        row = self.conn.execute("SELECT commit_ts FROM _bridge_checkpoint WHERE id = 1").fetchone()
        return int(row[0]) if row else 0

    def save_checkpoint(self, commit_ts: int) -> None:
        self.conn.execute("UPDATE _bridge_checkpoint SET commit_ts = ? WHERE id = 1", (commit_ts,))

    def schema(self, db: str, table: str) -> row_pb2.TableSchema | None:
        row = self.conn.execute(
            "SELECT schema FROM _bridge_schema WHERE db = ? AND tbl = ?", (db, table)
        ).fetchone()
        return None if row is None else row_pb2.TableSchema.FromString(row[0])

    def save_schema(self, schema: row_pb2.TableSchema) -> None:
        self.conn.execute(
            "REPLACE INTO _bridge_schema VALUES (?, ?, ?)",
            (schema.db, schema.table, schema.SerializeToString()),
        )

    def forget_schema(self, db: str, table: str) -> None:
        self.conn.execute("DELETE FROM _bridge_schema WHERE db = ? AND tbl = ?", (db, table))

    def column_names(self, db: str, table: str) -> list[str]:
        """The columns table ``db.table`` has in its file (empty when it does not exist)."""
        rows = self.conn.execute(
            "SELECT name FROM pragma_table_xinfo(?, ?)", (table, schema_alias(db))
        ).fetchall()
        return [r[0] for r in rows]

    def tables(self, db: str) -> list[str]:
        q = '"' + schema_alias(db).replace('"', '""') + '"'
        query = f"SELECT name FROM {q}.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"  # noqa: S608
        return [r[0] for r in self.conn.execute(query).fetchall()]

    def close(self) -> None:
        self.conn.close()
