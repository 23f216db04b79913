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

Full definitions (:mod:`drainer.sinks.sql.mysql_ddl` has the MySQL side).
SQLite evaluates expressions by its own rules, so only a *portable*
expression — integer arithmetic (``+ - * %``, parentheses, integer literals)
over integer columns, into an integer column — is recreated:

- a generated column with a portable expression becomes ``GENERATED ALWAYS
  AS (expr) VIRTUAL|STORED`` (added in place when VIRTUAL, by a rebuild when
  STORED: SQLite's ADD COLUMN cannot add a STORED one); any other generation
  expression is refused (:class:`Unexpressible`): its values would differ;
- a column added with an expression DEFAULT fills the existing rows by
  evaluating a portable expression in the rebuild's copy; a
  ``CURRENT_TIMESTAMP``/``NOW()`` default fills them with the DDL's session
  time (``session_time_us``) when the binlog records it; any other expression
  is refused when the table has rows (an empty table loses nothing: rows
  always carry every written column);
- lost without a data effect: partitioning, comments, ``ON UPDATE`` (rows
  carry the value the upstream stored), index prefix lengths and non-unique
  indexes, charsets and collations (SQLite compares bytes).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from bridge.proto import row_pb2
from bridge.rowdefaults import fill_value
from bridge.sink.errors import SinkApplyError
from drainer.sinks.sql.sql import Statement
from drainer.sinks.sql.sqlite import SQLiteDialect, declared_type

Change = row_pb2.SchemaChange
T = row_pb2.ColumnType
REBUILD_PREFIX = "_bridge_rebuild_"
_INTEGER_TYPES = frozenset((T.TINYINT, T.SMALLINT, T.MEDIUMINT, T.INT, T.BIGINT))
_PORTABLE_TOKEN = re.compile(r"\s*(?:`((?:[^`]|``)+)`|([A-Za-z_]\w*)|(\d+)|([-+*%()]))")
_NOW = re.compile(r"^(current_timestamp|now|localtimestamp|localtime)\s*(?:\(\s*(\d*)\s*\))?$", re.IGNORECASE)


class Unexpressible(SinkApplyError):
    """A change SQLite cannot make without giving rows other values than the upstream has."""


def portable(expression: str, schema: row_pb2.TableSchema, target: row_pb2.Column) -> bool:
    """Whether SQLite computes ``expression`` (MySQL text) exactly as MySQL does for ``target``:
    integer arithmetic over integer columns of ``schema`` into an integer column."""
    integer = {c.name.lower() for c in schema.columns if c.type in _INTEGER_TYPES and not c.generated}
    if target.type not in _INTEGER_TYPES:
        return False
    position, text = 0, expression.strip()
    while position < len(text):
        token = _PORTABLE_TOKEN.match(text, position)
        if token is None or token.end() == position:
            return False
        name = token.group(1) or token.group(2)
        if name is not None and name.replace("``", "`").lower() not in integer:
            return False
        position = token.end()
    return bool(text)


def session_now(column: row_pb2.Column, session_time_us: int) -> object:
    """What a CURRENT_TIMESTAMP[(n)]/NOW() default gave existing rows at the DDL's session time:
    the instant cut to the function's precision (None when the default is no such call)."""
    text = column.default_value.strip() if column.HasField("default_value") else ""
    match = _NOW.match(text)
    if match is None or not session_time_us or column.type not in (T.DATETIME, T.TIMESTAMP):
        return None
    digits = int(match.group(2) or 0)
    step = 10 ** (6 - digits)
    moment = datetime.fromtimestamp((session_time_us // step * step) / 1_000_000, UTC)
    return moment if column.type == T.TIMESTAMP else moment.replace(tzinfo=None)


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

    def __init__(
        self, dialect: SQLiteDialect | None = None, has_rows: Callable[[str, str], bool] | None = None
    ) -> None:
        self.dialect = dialect or SQLiteDialect()
        # whether table (db, name) holds rows: a change that would fill them wrongly is refused
        self._has_rows = has_rows or (lambda db, table: True)

    def column_def(self, column: row_pb2.Column, fill: object = None) -> str:
        text = f"{self.dialect.quote(column.name)} {declared_type(column)}"
        if column.generated:
            kind = "STORED" if column.generated == row_pb2.STORED else "VIRTUAL"
            return f"{text} GENERATED ALWAYS AS ({column.generation_expression}) {kind}"
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
        """Statements for a table-level ``change``; ``old`` is the table's schema before it.

        Raises :class:`Unexpressible` for what SQLite cannot recreate (module docstring)."""
        ref = self.dialect.table_ref(change.db, change.table)
        new = change.table_schema
        if change.HasField("table_schema"):
            self._refuse_generated(new, old, commit_ts)
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

    def _refuse_generated(
        self, new: row_pb2.TableSchema, old: row_pb2.TableSchema | None, commit_ts: int
    ) -> None:
        before = {c.id: c for c in old.columns} if old is not None else {}
        for column in new.columns:
            if not column.generated or portable(column.generation_expression, new, column):
                continue
            previous = before.get(column.id)
            if previous is not None and (previous.generated, previous.generation_expression) == (
                column.generated,
                column.generation_expression,
            ):
                continue  # refused when it came, or created by an older release: unchanged now
            raise Unexpressible(
                f"sqlite sink: DDL at commit_ts {commit_ts}: generated column "
                f"{new.db}.{new.table}.{column.name} AS ({column.generation_expression}) cannot be "
                "recreated in SQLite (only integer arithmetic over integer columns is computed the same "
                "way): its values would differ from the upstream's; use a MySQL downstream for this table "
                "or skip it ([skip] tables)"
            )

    def _added_fill(
        self, column: row_pb2.Column, new: row_pb2.TableSchema, commit_ts: int
    ) -> tuple[str | None, object]:
        """How existing rows get an added column: (SQL expression over the old row, or None; value)."""
        if column.generated:
            return None, None
        if not (column.default_is_expression and column.HasField("default_value")):
            return None, fill_value(column, commit_ts)
        text = column.default_value.strip()
        if _NOW.match(text):  # without a recorded session time (capture), the DDL's commit time
            now = session_now(column, new.session_time_us)
            return None, now if now is not None else fill_value(column, commit_ts)
        if portable(text, new, column):
            return text, None
        if self._has_rows(new.db, new.table):
            raise Unexpressible(
                f"sqlite sink: column {new.db}.{new.table}.{column.name} is added with DEFAULT {text}, "
                "which SQLite cannot evaluate as MySQL did for the rows the table holds; use a MySQL "
                "downstream for this table or skip it ([skip] tables)"
            )
        return None, None

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
            if _shape(before) != _shape(column):
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
                if column.generated == row_pb2.STORED:
                    return None  # SQLite's ADD COLUMN cannot add a STORED generated column
                source, fill = self._added_fill(column, new, commit_ts)
                if source is not None or (fill is None and not column.nullable and not column.generated):
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
            if column.generated:
                continue  # computed by SQLite
            targets.append(q(column.name))
            before = old_by_id.get(column.id)
            if before is not None:
                sources.append(q(before.name))
                continue
            source, fill = self._added_fill(column, new, commit_ts)
            if source is not None:
                sources.append(f"({source})")
            else:
                sources.append("?")
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


def _shape(column: row_pb2.Column) -> tuple[object, ...]:
    """What SQLite's own ALTER cannot change in place."""
    return (declared_type(column), column.nullable, column.generated, column.generation_expression)


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
