"""Schema changes as SQLite DDL, generated from the resulting ``TableSchema``.

SQLite cannot run MySQL's DDL text, so the SQLite sink rebuilds each change
from the :class:`bridge.proto.row_pb2.SchemaChange` the DDL binlog carries and
the schema the table had before (which the sink stores beside the data):

- CREATE TABLE: one declared type per column (:func:`declared_type`), the
  primary key and every unique index as table constraints (SQLite names and
  renames their indexes itself); non-unique indexes are not created;
- ALTER TABLE: SQLite's own ``RENAME COLUMN`` / ``DROP COLUMN`` /
  ``ADD COLUMN`` when the change is only those (columns matched by id, key
  and unique indexes unchanged, types unchanged); anything else rebuilds the
  table: create the new one, copy the rows column by column id, drop the old,
  rename. Added columns are filled with what MySQL fills
  (:func:`bridge.rowdefaults.fill_value`);
- RENAME TABLE within a database is ``ALTER TABLE ... RENAME TO``; across
  databases the table is created in the new one, copied and dropped;
- TRUNCATE is ``DELETE FROM``, DROP TABLE is ``DROP TABLE IF EXISTS``.

The statements run inside the sink's transaction, so a crash never leaves a
half-rebuilt table. Database-level changes are the sink's (attachments).
"""

from __future__ import annotations

from collections.abc import Sequence

from bridge.proto import row_pb2
from bridge.rowdefaults import fill_value
from drainer.sinks.sql.sql import Statement
from drainer.sinks.sql.sqlite import SQLiteDialect, declared_type

Change = row_pb2.SchemaChange
REBUILD_PREFIX = "_bridge_rebuild_"


def sql_literal(value: object) -> str:
    """A constant as SQLite literal text, for the one place DDL cannot take a parameter."""
    if value is None:
        return "NULL"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, bytes):
        return f"X'{value.hex()}'"
    text = str(value)
    return "'" + text.replace("'", "''") + "'"


class SQLiteDDL:
    """Plans the statements of one table-level schema change."""

    def __init__(self, dialect: SQLiteDialect | None = None) -> None:
        self.dialect = dialect or SQLiteDialect()

    def column_def(self, column: row_pb2.Column, fill: object = None) -> str:
        text = f"{self.dialect.quote(column.name)} {declared_type(column)}"
        if not column.nullable:
            text += " NOT NULL"
        if fill is not None:
            text += f" DEFAULT {sql_literal(self.dialect.converter_of(column)(fill))}"
        return text

    def create_table(self, schema: row_pb2.TableSchema, name: str | None = None) -> str:
        q = self.dialect.quote
        parts = [self.column_def(c) for c in schema.columns]
        for index in schema.indexes:
            if index.primary or index.unique:
                kind = "PRIMARY KEY" if index.primary else "UNIQUE"
                parts.append(f"{kind} ({', '.join(q(c) for c in index.columns)})")
        ref = self.dialect.table_ref(schema.db, name or schema.table)
        return f"CREATE TABLE {ref} ({', '.join(parts)})"

    def plan(
        self, change: row_pb2.SchemaChange, old: row_pb2.TableSchema | None, commit_ts: int
    ) -> list[Statement]:
        """Statements for a table-level ``change``; ``old`` is the table's schema before it."""
        ref = self.dialect.table_ref(change.db, change.table)
        new = change.table_schema
        if change.kind == Change.CREATE_TABLE:
            return [(self.create_table(new), ())]
        if change.kind == Change.DROP_TABLE:
            return [(f"DROP TABLE IF EXISTS {ref}", ())]
        if change.kind == Change.TRUNCATE_TABLE:
            return [(f"DELETE FROM {ref}", ())]  # noqa: S608 - quoted identifier
        if change.kind == Change.RENAME_TABLE:
            return self._rename(change, old)
        if change.kind == Change.ALTER_TABLE:
            if old is None:
                raise ValueError(f"ALTER of {change.db}.{change.table}: its previous schema is unknown")
            return self.alter(old, new, commit_ts)
        raise ValueError(f"{Change.Kind.Name(change.kind)} is not a table-level change")

    def _rename(self, change: row_pb2.SchemaChange, old: row_pb2.TableSchema | None) -> list[Statement]:
        old_ref = self.dialect.table_ref(change.old_db, change.old_table)
        if change.old_db == change.db:
            return [(f"ALTER TABLE {old_ref} RENAME TO {self.dialect.quote(change.table)}", ())]
        new = change.table_schema
        names = ", ".join(self.dialect.quote(c.name) for c in new.columns)
        new_ref = self.dialect.table_ref(new.db, new.table)
        return [
            (self.create_table(new), ()),
            (f"INSERT INTO {new_ref} ({names}) SELECT {names} FROM {old_ref}", ()),  # noqa: S608
            (f"DROP TABLE {old_ref}", ()),
        ]

    def alter(self, old: row_pb2.TableSchema, new: row_pb2.TableSchema, commit_ts: int) -> list[Statement]:
        """In-place statements when SQLite's ALTER can do the change, else a rebuild."""
        in_place = self._in_place(old, new, commit_ts)
        return in_place if in_place is not None else self.rebuild(old, new, commit_ts)

    def _in_place(
        self, old: row_pb2.TableSchema, new: row_pb2.TableSchema, commit_ts: int
    ) -> list[Statement] | None:
        if _key_indexes(old) != _key_indexes(new):
            return None
        old_by_id = {c.id: c for c in old.columns}
        new_ids = {c.id for c in new.columns}
        q, ref = self.dialect.quote, self.dialect.table_ref(new.db, new.table)
        taken = {c.name.lower() for c in old.columns}
        renames: list[Statement] = []
        for column in new.columns:
            before = old_by_id.get(column.id)
            if before is None:
                continue
            if (declared_type(before), before.nullable) != (declared_type(column), column.nullable):
                return None
            if before.name != column.name:
                if column.name.lower() in taken and column.name.lower() != before.name.lower():
                    return None  # a swap of names needs an intermediate name: rebuild
                renames.append((f"ALTER TABLE {ref} RENAME COLUMN {q(before.name)} TO {q(column.name)}", ()))
        drops: list[Statement] = [
            (f"ALTER TABLE {ref} DROP COLUMN {q(c.name)}", ()) for c in old.columns if c.id not in new_ids
        ]
        adds: list[Statement] = []
        for column in new.columns:
            if column.id not in old_by_id:
                fill = fill_value(column, commit_ts)
                if fill is None and not column.nullable:
                    return None
                adds.append((f"ALTER TABLE {ref} ADD COLUMN {self.column_def(column, fill)}", ()))
        return renames + drops + adds

    def rebuild(self, old: row_pb2.TableSchema, new: row_pb2.TableSchema, commit_ts: int) -> list[Statement]:
        """Create the new table, copy rows by column id, drop the old one, rename the new one."""
        q = self.dialect.quote
        temp = REBUILD_PREFIX + new.table
        old_by_id = {c.id: c for c in old.columns}
        targets: list[str] = []
        sources: list[str] = []
        params: list[object] = []
        for column in new.columns:
            targets.append(q(column.name))
            before = old_by_id.get(column.id)
            if before is not None:
                sources.append(q(before.name))
            else:
                sources.append("?")
                fill = fill_value(column, commit_ts)
                params.append(None if fill is None else self.dialect.converter_of(column)(fill))
        temp_ref = self.dialect.table_ref(new.db, temp)
        old_ref = self.dialect.table_ref(old.db, old.table)
        select = f"SELECT {', '.join(sources)} FROM {old_ref}"  # noqa: S608 - quoted names, placeholders
        copy = f"INSERT INTO {temp_ref} ({', '.join(targets)}) {select}"
        return [
            (self.create_table(new, temp), ()),
            (copy, tuple(params)),
            (f"DROP TABLE {old_ref}", ()),
            (f"ALTER TABLE {temp_ref} RENAME TO {q(new.table)}", ()),
        ]


def _key_indexes(schema: row_pb2.TableSchema) -> set[tuple[bool, tuple[int, ...]]]:
    """Primary and unique indexes as column ids: what the SQLite table enforces."""
    ids = {c.name.lower(): c.id for c in schema.columns}
    return {
        (index.primary, tuple(ids[n.lower()] for n in index.columns))
        for index in schema.indexes
        if index.primary or index.unique
    }


def schema_from_names(new: row_pb2.TableSchema, names: Sequence[str]) -> row_pb2.TableSchema:
    """A stand-in for an unknown old schema: the existing column names, ids matched to ``new`` by name.

    Its columns carry no types, so :meth:`SQLiteDDL.alter` rebuilds the table.
    """
    by_name = {c.name.lower(): c.id for c in new.columns}
    fresh = max([c.id for c in new.columns] + [new.max_column_id]) + 1
    old = row_pb2.TableSchema(db=new.db, table=new.table)
    for name in names:
        column_id = by_name.get(name.lower())
        if column_id is None:
            column_id, fresh = fresh, fresh + 1
        old.columns.add(id=column_id, name=name, type=row_pb2.ColumnType.BLOB, nullable=True)
    return old
