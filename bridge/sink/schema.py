"""The schema tracker: which tables exist, with which schema, at the merge's position.

Rows carry column ids and values, never types, so the drainer keeps every
table's :class:`~bridge.proto.row_pb2.TableSchema` and applies each DDL
binlog's ``SchemaChange`` at its commit_ts (schemas/README.md, "DDL binlogs").
State: databases, ``table_id -> TableSchema`` (with a ready
:class:`~bridge.rowcodec.RowCodec`), and a name index. Names compare
case-insensitively, as TiDB does.

What each change requires (anything else cannot be applied and raises
:class:`SchemaTrackError`; the tracker is left as it was):

========================  ===================================================
CREATE_DATABASE           nothing (an existing database is kept: IF NOT EXISTS)
DROP_DATABASE             the database is known; its tables go with it
CREATE_TABLE              no table of that name, the table id unused; an
                          unknown database is added (SQLite upstreams have none)
ALTER_TABLE               the table exists; column ids are not reused
RENAME_TABLE              the old name exists, the new one does not
TRUNCATE_TABLE            the table exists (it may get a new table id)
DROP_TABLE                the table exists
========================  ===================================================

The snapshot (:meth:`SchemaTracker.snapshot`) is the state as a list of
``SchemaChange`` messages (CREATE_DATABASE per database, CREATE_TABLE per
table) that rebuild it when replayed: ``b"bridge-schema/1\\n"``, then per
change a 4-byte big-endian length and the serialized message.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from google.protobuf.message import DecodeError

from bridge.binlog import schema_change_problem
from bridge.errors import BridgeError
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from bridge.schema import SchemaError, table_name

SchemaChange = row_pb2.SchemaChange
SNAPSHOT_MAGIC = b"bridge-schema/1\n"
_LENGTH = struct.Struct(">I")


class SchemaTrackError(BridgeError):
    """A DDL the tracker cannot apply, or a snapshot it cannot read."""


class TableChange(NamedTuple):
    """A table's schema before and after one DDL (None where there is no table)."""

    before: row_pb2.TableSchema | None
    after: row_pb2.TableSchema | None


_DATABASE_DDL = (SchemaChange.CREATE_DATABASE, SchemaChange.DROP_DATABASE)
_NO_TABLE_BEFORE = (*_DATABASE_DDL, SchemaChange.CREATE_TABLE)
_NO_TABLE_AFTER = (*_DATABASE_DDL, SchemaChange.DROP_TABLE)


@dataclass(frozen=True, slots=True)
class TrackedTable:
    """One table's schema and the codec for its rows (immutable; safe to share with the sink thread)."""

    schema: row_pb2.TableSchema
    codec: RowCodec

    @property
    def table_id(self) -> int:
        return self.schema.table_id

    @property
    def name(self) -> str:
        return table_name(self.schema)


def _key(db: str, table: str = "") -> tuple[str, str]:
    return db.lower(), table.lower()


class SchemaTracker:
    """Tables and databases as of the last DDL applied; see the module docstring."""

    def __init__(self) -> None:
        self._databases: dict[str, str] = {}
        self._tables: dict[int, TrackedTable] = {}
        self._names: dict[tuple[str, str], int] = {}

    def table(self, table_id: int) -> TrackedTable | None:
        return self._tables.get(table_id)

    def find(self, db: str, table: str) -> TrackedTable | None:
        table_id = self._names.get(_key(db, table))
        return None if table_id is None else self._tables[table_id]

    @property
    def databases(self) -> list[str]:
        return sorted(self._databases.values())

    @property
    def tables(self) -> list[TrackedTable]:
        return [self._tables[i] for i in sorted(self._tables)]

    def apply(self, change: row_pb2.SchemaChange) -> TableChange:
        """Apply one DDL's change; :class:`SchemaTrackError` if it cannot be applied.

        Returns the table's schema before and after it (what a
        :class:`~bridge.sink.events.DDLEvent` carries): ``before`` is None for
        CREATE TABLE and database DDL, ``after`` None for DROP TABLE and database DDL.
        """
        problem = schema_change_problem(change)
        if problem:
            raise SchemaTrackError(problem)
        kind = change.kind
        before: TrackedTable | None = None
        if kind == SchemaChange.RENAME_TABLE:
            before = self.find(change.old_db, change.old_table)
        elif kind not in _NO_TABLE_BEFORE:
            before = self.find(change.db, change.table)
        self._apply(change)
        after = None if kind in _NO_TABLE_AFTER else self._tables[change.table_schema.table_id]
        return TableChange(None if before is None else before.schema, None if after is None else after.schema)

    def _apply(self, change: row_pb2.SchemaChange) -> None:
        kind = change.kind
        if kind == SchemaChange.CREATE_DATABASE:
            self._databases.setdefault(change.db.lower(), change.db)
        elif kind == SchemaChange.DROP_DATABASE:
            self._drop_database(change.db)
        elif kind == SchemaChange.CREATE_TABLE:
            self._create(change.table_schema)
        elif kind == SchemaChange.DROP_TABLE:
            self._remove(self._existing(change.db, change.table, "DROP TABLE"))
        elif kind == SchemaChange.RENAME_TABLE:
            self._rename(change)
        else:
            verb = "ALTER TABLE" if kind == SchemaChange.ALTER_TABLE else "TRUNCATE TABLE"
            self._replace(self._existing(change.db, change.table, verb), change.table_schema, verb)

    def _existing(self, db: str, table: str, verb: str) -> TrackedTable:
        found = self.find(db, table)
        if found is None:
            raise SchemaTrackError(f"{verb} {db}.{table}: the schema tracker knows no such table")
        return found

    def _drop_database(self, db: str) -> None:
        if db.lower() not in self._databases:
            raise SchemaTrackError(f"DROP DATABASE {db}: the schema tracker knows no such database")
        for tracked in [t for t in self._tables.values() if t.schema.db.lower() == db.lower()]:
            self._remove(tracked)
        del self._databases[db.lower()]

    def _create(self, schema: row_pb2.TableSchema) -> None:
        where = table_name(schema)
        if self.find(schema.db, schema.table) is not None:
            raise SchemaTrackError(f"CREATE TABLE {where}: a table of that name exists already")
        clash = self._tables.get(schema.table_id)
        if clash is not None:
            raise SchemaTrackError(
                f"CREATE TABLE {where}: table id {schema.table_id} belongs to {clash.name} already"
            )
        self._add(_tracked(schema, "CREATE TABLE"))

    def _rename(self, change: row_pb2.SchemaChange) -> None:
        old = self._existing(change.old_db, change.old_table, "RENAME TABLE")
        target = self.find(change.db, change.table)
        if target is not None and target.table_id != old.table_id:
            raise SchemaTrackError(
                f"RENAME TABLE {old.name} TO {change.db}.{change.table}: a table of that name exists already"
            )
        self._replace(old, change.table_schema, "RENAME TABLE")

    def _replace(self, old: TrackedTable, schema: row_pb2.TableSchema, verb: str) -> None:
        clash = self._tables.get(schema.table_id)
        if clash is not None and clash.table_id != old.table_id:
            raise SchemaTrackError(
                f"{verb} {old.name}: its new table id {schema.table_id} belongs to {clash.name}"
            )
        if verb != "TRUNCATE TABLE":
            _check_column_ids(old.schema, schema, verb)
        new = _tracked(schema, verb)
        self._remove(old)
        self._add(new)

    def _add(self, tracked: TrackedTable) -> None:
        schema = tracked.schema
        self._databases.setdefault(schema.db.lower(), schema.db)
        self._tables[schema.table_id] = tracked
        self._names[_key(schema.db, schema.table)] = schema.table_id

    def _remove(self, tracked: TrackedTable) -> None:
        del self._tables[tracked.table_id]
        del self._names[_key(tracked.schema.db, tracked.schema.table)]

    # -- snapshot ----------------------------------------------------------

    def changes(self) -> Iterator[row_pb2.SchemaChange]:
        """The changes that rebuild this state from nothing (databases, then tables by id)."""
        for db in self.databases:
            yield SchemaChange(kind=SchemaChange.CREATE_DATABASE, db=db)
        for tracked in self.tables:
            schema = tracked.schema
            yield SchemaChange(
                kind=SchemaChange.CREATE_TABLE, db=schema.db, table=schema.table, table_schema=schema
            )

    def snapshot(self) -> bytes:
        parts = [SNAPSHOT_MAGIC]
        for change in self.changes():
            data = change.SerializeToString()
            parts += [_LENGTH.pack(len(data)), data]
        return b"".join(parts)

    @classmethod
    def restore(cls, snapshot: bytes) -> SchemaTracker:
        """The tracker a :meth:`snapshot` saved; ``b""`` is the empty tracker."""
        tracker = cls()
        if not snapshot:
            return tracker
        if not snapshot.startswith(SNAPSHOT_MAGIC):
            raise SchemaTrackError("schema snapshot: not a bridge-schema/1 snapshot")
        pos = len(SNAPSHOT_MAGIC)
        while pos < len(snapshot):
            if pos + _LENGTH.size > len(snapshot):
                raise SchemaTrackError("schema snapshot: truncated")
            (length,) = _LENGTH.unpack_from(snapshot, pos)
            pos += _LENGTH.size
            if pos + length > len(snapshot):
                raise SchemaTrackError("schema snapshot: truncated")
            try:
                change = SchemaChange.FromString(snapshot[pos : pos + length])
            except DecodeError as exc:
                raise SchemaTrackError(f"schema snapshot: unreadable entry: {exc}") from None
            tracker.apply(change)
            pos += length
        return tracker


def _tracked(schema: row_pb2.TableSchema, verb: str) -> TrackedTable:
    try:
        codec = RowCodec(schema)
    except SchemaError as exc:
        raise SchemaTrackError(f"{verb} {table_name(schema)}: {exc}") from None
    return TrackedTable(codec.schema, codec)


def _check_column_ids(old: row_pb2.TableSchema, new: row_pb2.TableSchema, verb: str) -> None:
    """A column id the old schema had given out but no longer holds must not come back."""
    held = {c.id for c in old.columns}
    given_out = max(old.max_column_id, max(held, default=0))
    for column in new.columns:
        if column.id not in held and column.id <= given_out:
            raise SchemaTrackError(
                f"{verb} {table_name(old)}: column {column.name!r} reuses column id {column.id} "
                f"(ids up to {given_out} were given out before)"
            )
