"""The tables the capture tracks: their schemas with ids, and what a DDL turns them into.

The schemas are the SQL producer's (:mod:`bridge.producer`): a table is
described from ``information_schema`` by
:meth:`bridge.producer.mysql.MySQLUpstream.describe_table`, ids are given by
:func:`bridge.producer.catalog.assign_ids` (a column keeps its id across
ALTERs and column renames; a new table's id is the start_ts of the DDL binlog
that announced it, unique in the cluster) and a DDL statement is recognised
by :func:`bridge.producer.ddlparse.parse_ddl`. So a captured table's DDL
binlogs carry what the writer's would.

A DDL is described *after* it ran, when the capture reads it from the
binlog. If the capture is behind and the table changed again since, the
schema read is newer than the rows that follow the DDL in the binlog; the
first such row event then fails the column check of :meth:`TableCatalog.entry`
(:class:`SchemaMismatch`) instead of being decoded against the wrong schema.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.apps.capture.config import CaptureConfig
from bridge.apps.capture.errors import SchemaMismatch
from bridge.apps.capture.shadow import Shadow
from bridge.apps.capture.values import RowConverter
from bridge.dsn import Dsn
from bridge.producer.catalog import assign_ids, without_ids
from bridge.producer.ddlparse import DdlStatement, Kind, parse_ddl
from bridge.producer.errors import UnsupportedSchema
from bridge.producer.mysql import MySQLSession, MySQLUpstream
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from bridge.rowencode import Encoder, fast_encoder

log = logging.getLogger(__name__)

_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
TABLES_SQL = (
    "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_TYPE = 'BASE TABLE' "
    "ORDER BY TABLE_NAME"
)


@dataclass(frozen=True)
class TableEntry:
    """One captured table at its current schema."""

    schema: row_pb2.TableSchema
    codec: RowCodec
    convert: RowConverter
    names: tuple[str, ...]
    encode: Encoder  # codec.encode as one generated function (bridge.rowencode): the same bytes
    converter: Callable[[Mapping[str, Any], Mapping[str, str]], tuple[Any, ...]]  # convert, generated

    @property
    def table_id(self) -> int:
        return self.schema.table_id


@dataclass(frozen=True)
class DdlChange:
    """A DDL on a captured table: the SchemaChange its binlog carries, and the catalog update."""

    change: row_pb2.SchemaChange
    updates: dict[str, row_pb2.TableSchema | None]  # "db.table" -> new schema, None = gone


def qualified(db: str, table: str) -> str:
    return f"{db}.{table}"


class TableCatalog:
    """Schemas of the selected tables, read from the upstream and kept in the capture's state."""

    def __init__(
        self,
        config: CaptureConfig,
        dsn: Dsn,
        schemas: dict[str, row_pb2.TableSchema],
        before_shadow: Callable[[str, dict[str, str | None]], None],
    ) -> None:
        self._before_shadow = before_shadow  # journals how to undo a shadow DDL (see journal.py)
        self._config = config
        self._dsn = dsn
        self._upstreams: dict[str, MySQLUpstream] = {}
        self._sessions: dict[str, MySQLSession] = {}
        self._entries: dict[str, TableEntry] = {}
        self._shadows: dict[str, Shadow] = {}
        for name, schema in schemas.items():
            self._set(name, schema)

    def _set(self, name: str, schema: row_pb2.TableSchema | None) -> None:
        if schema is None:
            self._entries.pop(name, None)
            return
        names = tuple(c.name for c in schema.columns)
        codec, convert = RowCodec(schema), RowConverter(schema)
        self._entries[name] = TableEntry(
            schema, codec, convert, names, fast_encoder(codec), convert.unrolled()
        )

    def apply(self, updates: dict[str, row_pb2.TableSchema | None]) -> None:
        for name, schema in updates.items():
            self._set(name, schema)

    def schemas(self) -> dict[str, row_pb2.TableSchema]:
        return {name: entry.schema for name, entry in self._entries.items()}

    def get(self, db: str, table: str) -> TableEntry | None:
        return self._entries.get(qualified(db, table))

    def entry(self, db: str, table: str, columns: Sequence[str]) -> TableEntry:
        """The entry for rows of ``db.table`` whose binlog column names are ``columns``."""
        entry = self._entries.get(qualified(db, table))
        if entry is None:
            raise SchemaMismatch(
                f"rows of {db}.{table} arrived, but no DDL or snapshot announced that table to the capture; "
                'start the capture again with an empty data-dir (snapshot = "initial")'
            )
        if tuple(columns) != entry.names:
            raise SchemaMismatch(
                f"rows of {db}.{table} carry columns {list(columns)}, but its schema has "
                f"{list(entry.names)}: the table changed again after a DDL the capture read late "
                "(binlog_row_metadata must be FULL); start the capture again with an empty data-dir"
            )
        return entry

    def _session(self, db: str) -> tuple[MySQLUpstream, MySQLSession]:
        upstream = self._upstreams.get(db)
        if upstream is None:
            upstream = self._upstreams[db] = MySQLUpstream(self._dsn.with_database(db))
        session = self._sessions.get(db)
        if session is None or session.broken:
            session = self._sessions[db] = upstream.connect()
        return upstream, session

    def shadow(self, db: str) -> Shadow:
        found = self._shadows.get(db)
        if found is None:
            found = self._shadows[db] = Shadow(self._dsn, self._config.server_id, db)
        return found

    def describe(self, db: str, table: str, *, live: bool = False) -> row_pb2.TableSchema | None:
        """The table as the SQL producer describes it (ids 0): its shadow's schema unless ``live``,
        the source's own table then; None when it does not exist."""
        if not live:
            return self.shadow(db).describe(table)
        upstream, session = self._session(db)
        return upstream.describe_table(session, table)

    def live_tables(self) -> list[tuple[str, str]]:
        """(db, table) of every selected base table that exists now."""
        found = []
        for db in self._config.databases:
            _, session = self._session(db)
            for (table,) in session.query(TABLES_SQL, [db]):
                if self._config.selects(db, str(table)):
                    found.append((db, str(table)))
        return found

    def created(
        self, db: str, table: str, table_id: int, create_sql: str | None = None, *, keep_id: bool = False
    ) -> DdlChange:
        """A CREATE_TABLE announcing an existing table under the id ``table_id``; its shadow is made
        from ``create_sql`` (``SHOW CREATE TABLE`` read earlier) or from the table as it is now.
        With ``keep_id`` the table is known already: an ALTER_TABLE to that definition, ids kept."""
        self.shadow(db).copy(table, create_sql)
        live = self.describe(db, table)
        if live is None:
            raise SchemaMismatch(f"table {db}.{table} is gone upstream; the capture is too far behind")
        previous = self._entries.get(qualified(db, table)) if keep_id else None
        if previous is not None:
            schema = assign_ids(live, previous.schema, previous.table_id)
            kind = Kind.ALTER_TABLE
        else:
            schema, kind = assign_ids(live, None, table_id), Kind.CREATE_TABLE
        change = row_pb2.SchemaChange(kind=kind, db=db, table=schema.table, table_schema=schema)
        return DdlChange(change, {qualified(db, schema.table): schema})

    def changed(self, db: str, table: str, create_sql: str) -> bool:
        """Whether ``create_sql`` defines a table other than the known schema of ``db.table``."""
        known = self._entries[qualified(db, table)].schema
        self.shadow(db).copy(table, create_sql)
        return self.describe(db, table) != without_ids(known)

    def recognise(self, db: str, sql: str) -> tuple[str, DdlStatement] | None:
        """(database, DDL) when ``sql``, run with default database ``db``, acts on a selected table.

        A name qualified with another database is tried against each captured
        database; statements that are no table DDL (GRANT, CREATE USER, ...) give None.
        """
        statement = None
        text = _COMMENT.sub(" ", sql).strip()  # the server appends /* generated by server */ to DROP
        for database in dict.fromkeys([db, *self._config.databases]):
            try:
                statement = parse_ddl(text, database)
            except UnsupportedSchema:
                continue
            db = database
            break
        if statement is None or not db:
            log.debug("query event not carried: %.200s", sql)
            return None
        if statement.index:
            upstream, session = self._session(db)
            table = upstream.table_for_index(session, statement.index)
            if table is None:
                return None
            statement = DdlStatement(statement.kind, table)
        touched = [t for t in (statement.table, statement.old_table) if t]
        return (db, statement) if any(self._config.selects(db, t) for t in touched) else None

    def change_for(self, db: str, sql: str, statement: DdlStatement, new_id: Callable[[], int]) -> DdlChange:
        """The SchemaChange of a recognised DDL that already ran upstream (``sql``)."""
        shadow = self.shadow(db)
        self._before_shadow(db, shadow.definitions([t for t in (statement.table, statement.old_table) if t]))
        shadowed = shadow.apply(sql)
        previous = self._entries.get(qualified(db, statement.target))
        if statement.kind == Kind.DROP_TABLE:
            change = row_pb2.SchemaChange(kind=Kind.DROP_TABLE, db=db, table=statement.table)
            return DdlChange(change, {qualified(db, statement.table): None})
        if previous is None or statement.kind == Kind.CREATE_TABLE:
            return self._created(db, statement.table, new_id(), shadowed)
        live = self.describe(db, statement.table, live=not shadowed)
        if not shadowed and live is not None:
            self.shadow(db).copy(statement.table)  # in step with the source again from here
        if live is None:
            raise SchemaMismatch(
                f"table {db}.{statement.table} is gone upstream; the capture is too far behind"
            )
        schema = assign_ids(live, previous.schema, previous.table_id, statement.renames)
        change = row_pb2.SchemaChange(kind=statement.kind, db=db, table=schema.table, table_schema=schema)
        updates: dict[str, row_pb2.TableSchema | None] = {qualified(db, schema.table): schema}
        if statement.kind == Kind.RENAME_TABLE:
            change.old_db, change.old_table = db, statement.old_table
            updates[qualified(db, statement.old_table)] = None
        return DdlChange(change, updates)

    def _created(self, db: str, table: str, table_id: int, shadowed: bool) -> DdlChange:
        if not shadowed:
            return self.created(db, table, table_id)
        live = self.describe(db, table)
        if live is None:
            raise SchemaMismatch(f"table {db}.{table} is missing from its shadow after its CREATE")
        schema = assign_ids(live, None, table_id)
        change = row_pb2.SchemaChange(kind=Kind.CREATE_TABLE, db=db, table=schema.table, table_schema=schema)
        return DdlChange(change, {qualified(db, schema.table): schema})

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()
        for shadow in self._shadows.values():
            shadow.close()
        self._shadows.clear()
