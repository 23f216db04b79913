"""Table schemas as the writer's binlogs carry them, kept in the upstream's ``bridge_schema``.

One row per table the writer ever created::

    bridge_schema(table_id PK, db, tbl, live, version, schema_pb)

``table_id`` is the start_ts of the CREATE TABLE that made the table: a TSO
timestamp, so unique across every producer of the cluster (the drainer tells
tables apart by id alone, whichever upstream they come from), and never
reused (rows are never deleted: a dropped table keeps its row with
``live = 0``). ``schema_pb`` is the serialized ``TableSchema`` of the last DDL
binlog, with its column ids; ``version`` is that DDL's commit_ts. Every writer
process and every restart reads the same ids from here.

The row is also the table's lock between DML and DDL, across processes:

- a DML transaction share-locks the row of every table it touches
  (:meth:`Catalog.use`) and keeps the lock until its upstream COMMIT, after
  its commit_ts was taken;
- a DDL locks the row exclusively (:meth:`Catalog.lock_for_ddl`) before it
  runs and keeps it until its commit_ts is taken and the new schema saved.

So a DML that used the old schema has a commit_ts below the DDL's, and one
that uses the new schema a commit_ts above it. (SQLite's BEGIN IMMEDIATE
serializes every writing transaction, which gives the same order.)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.producer.errors import SchemaDrift, UnknownTable
from bridge.producer.upstream import ColumnAdapter, Session, Upstream
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from bridge.rowvalues import RowValueError
from bridge.schema import key_positions, next_column_id

SCHEMA_TABLE = "bridge_schema"


@dataclass(frozen=True)
class TableEntry:
    """One table at one schema version: what a transaction needs to capture its rows."""

    table_id: int
    version: int
    schema: row_pb2.TableSchema
    codec: RowCodec
    adapters: tuple[ColumnAdapter, ...]
    names: tuple[str, ...] = field(init=False)
    key: tuple[int, ...] = field(init=False)
    auto_increment: int | None = field(init=False)
    _positions: dict[str, int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        names = tuple(c.name for c in self.schema.columns)
        auto = [i for i, c in enumerate(self.schema.columns) if c.auto_increment]
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "key", key_positions(self.schema))
        object.__setattr__(self, "auto_increment", auto[0] if auto else None)
        object.__setattr__(self, "_positions", {n.lower(): i for i, n in enumerate(names)})

    @property
    def name(self) -> str:
        return self.schema.table

    def driver_values(self, values: Mapping[str, object]) -> dict[int, object]:
        """Column position -> driver parameter, for values keyed by column name."""
        out: dict[int, object] = {}
        for name, value in values.items():
            position = self._positions.get(name.lower())
            if position is None:
                raise RowValueError(f"table {self.name}: no column named {name!r}")
            out[position] = None if value is None else self.adapters[position].to_db(value)
        return out

    def codec_values(self, image: tuple[Any, ...]) -> tuple[Any, ...]:
        """A driver row image as row codec values."""
        return tuple(None if v is None else a.from_db(v) for v, a in zip(image, self.adapters, strict=True))


def assign_ids(
    live: row_pb2.TableSchema,
    previous: row_pb2.TableSchema | None,
    table_id: int,
    renames: Mapping[str, str] | None = None,
) -> row_pb2.TableSchema:
    """``live`` (as described, ids 0) with ``table_id`` and column ids carried over from ``previous``.

    A column keeps its id when ``previous`` had a column of the same name
    (case-insensitively) or one renamed to it (``renames``: old lower name ->
    new lower name); any other column takes :func:`bridge.schema.next_column_id`,
    so a dropped column's id is never reused.
    """
    schema = row_pb2.TableSchema()
    schema.CopyFrom(live)
    schema.table_id = table_id
    old_ids: dict[str, int] = {}
    if previous is not None:
        moved = {old: new for old, new in (renames or {}).items()}
        for column in previous.columns:
            old_ids[moved.get(column.name.lower(), column.name.lower())] = column.id
        schema.max_column_id = next_column_id(previous) - 1
    for column in schema.columns:
        column.id = old_ids.get(column.name.lower(), 0)
    for column in schema.columns:
        if not column.id:
            column.id = next_column_id(schema)
            schema.max_column_id = column.id
    schema.max_column_id = max([schema.max_column_id, *(c.id for c in schema.columns)])
    return schema


def without_ids(schema: row_pb2.TableSchema) -> row_pb2.TableSchema:
    """A copy with table and column ids cleared: what describing the live table gives."""
    copy = row_pb2.TableSchema()
    copy.CopyFrom(schema)
    copy.table_id = copy.max_column_id = copy.session_time_us = 0
    for column in copy.columns:
        column.id = 0
    return copy


def definitions_stripped(schema: row_pb2.TableSchema) -> row_pb2.TableSchema:
    """A copy without what binlogs carry since issue 19 (generated columns, expression defaults,
    ON UPDATE, comments, partitioning, index prefixes): the shape older writers saved."""
    copy = row_pb2.TableSchema()
    copy.CopyFrom(schema)
    copy.comment = copy.partitioning = ""
    for column in copy.columns:
        column.default_is_expression = False
        column.generated = row_pb2.NOT_GENERATED
        column.generation_expression = column.on_update = column.comment = ""
    for index in copy.indexes:
        del index.prefix_lengths[:]
    return copy


def matches_live(saved: row_pb2.TableSchema, live: row_pb2.TableSchema) -> bool:
    """Whether the live table is still the one ``saved`` describes. A schema an older writer saved
    (no session time) is compared without the definitions it did not record."""
    mine = without_ids(saved)
    if mine == live:
        return True
    return not saved.session_time_us and definitions_stripped(mine) == definitions_stripped(live)


class Catalog:
    """The writer's view of ``bridge_schema``, cached per process; thread-safe."""

    def __init__(self, upstream: Upstream) -> None:
        self._upstream = upstream
        self._db = upstream.database
        self._entries: dict[str, TableEntry] = {}
        self._lock = threading.Lock()
        d = upstream.dialect
        self._t = d.quote(SCHEMA_TABLE)
        self._p = d.param

    def use(self, session: Session, table: str) -> TableEntry:
        """In a DML transaction: share-lock ``table``'s row and return its current entry.

        Raises :class:`UnknownTable` when no live table has that name, and
        :class:`SchemaDrift` when the live table no longer matches its schema.
        """
        p, d = self._p, self._upstream.dialect
        rows = session.query(
            f"SELECT table_id, version FROM {self._t} WHERE db = {p} AND tbl = {p} AND live = 1"  # noqa: S608
            f"{d.lock_shared}",
            [self._db, table],
        )
        if not rows:
            raise UnknownTable(
                f"table {self._db}.{table} has no schema in {SCHEMA_TABLE}: "
                "create it through the writer's DDL (writer.ddl) first"
            )
        table_id, version = int(rows[0][0]), int(rows[0][1])
        with self._lock:
            cached = self._entries.get(table)
        if cached is not None and (cached.table_id, cached.version) == (table_id, version):
            return cached
        entry = self._load(session, table_id, version)
        with self._lock:
            self._entries[table] = entry
        return entry

    def _load(self, session: Session, table_id: int, version: int) -> TableEntry:
        blob = session.query(f"SELECT schema_pb FROM {self._t} WHERE table_id = {self._p}", [table_id])  # noqa: S608
        schema = row_pb2.TableSchema.FromString(bytes(blob[0][0]))
        live = self._upstream.describe_table(session, schema.table)
        if live is None or not matches_live(schema, live):
            raise SchemaDrift(
                f"table {self._db}.{schema.table} differs from the schema its last DDL binlog carried "
                f"(version {version}): a DDL ran outside the writer or its binlog was lost"
            )
        return self.entry(table_id, version, schema)

    def entry(self, table_id: int, version: int, schema: row_pb2.TableSchema) -> TableEntry:
        return TableEntry(table_id, version, schema, RowCodec(schema), self._upstream.adapters(schema))

    def forget(self, table: str) -> None:
        with self._lock:
            self._entries.pop(table, None)

    def lock_for_ddl(self, session: Session, table: str) -> tuple[int, row_pb2.TableSchema] | None:
        """In the DDL's bookkeeping transaction: lock ``table``'s row exclusively.

        Returns (table_id, schema) of the live table, or None when there is none.
        """
        p, d = self._p, self._upstream.dialect
        rows = session.query(
            f"SELECT table_id, schema_pb FROM {self._t} WHERE db = {p} AND tbl = {p} AND live = 1"  # noqa: S608
            f"{d.lock_rows}",
            [self._db, table],
        )
        if not rows:
            return None
        return int(rows[0][0]), row_pb2.TableSchema.FromString(bytes(rows[0][1]))

    def reserve_id(self, session: Session, table: str, table_id: int) -> None:
        """Claim ``table_id`` for a new table (not live until :meth:`save`); rolled back with the DDL."""
        p = self._p
        sql = (
            f"INSERT INTO {self._t} (table_id, db, tbl, live, version, schema_pb) "  # noqa: S608
            f"VALUES ({p}, {p}, {p}, 0, 0, {p})"
        )
        session.execute(sql, [table_id, self._db, table, b""])

    def save(self, session: Session, schema: row_pb2.TableSchema, version: int, *, live: bool) -> None:
        """Record the schema a DDL left (``live = False`` for a drop), at ``version`` = its commit_ts."""
        p = self._p
        session.execute(
            f"UPDATE {self._t} SET tbl = {p}, live = {p}, version = {p}, schema_pb = {p} "  # noqa: S608
            f"WHERE table_id = {p}",
            [schema.table, int(live), version, schema.SerializeToString(), schema.table_id],
        )
        self.forget(schema.table)

    def tables(self, session: Session) -> list[str]:
        """Names of the live tables, in table id order."""
        rows = session.query(
            f"SELECT tbl FROM {self._t} WHERE db = {self._p} AND live = 1 ORDER BY table_id",  # noqa: S608
            [self._db],
        )
        return [str(r[0]) for r in rows]
