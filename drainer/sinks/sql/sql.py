"""Row changes to SQL statements, independent of any database.

:class:`Translator` turns a :class:`bridge.sink.events.RowChange` into
``(sql, params)`` statements with the help of a
:class:`~drainer.translator.dialect.Dialect`. The rules:

- a row is identified by the table's key (:func:`bridge.schema.key_columns`:
  the primary key, else the first unique index over NOT NULL columns); a table
  with neither is matched on the whole old row with NULL-safe comparisons and
  changed at most one row at a time (the dialect's ``update_one`` /
  ``delete_one``), since two identical rows are interchangeable;
- generated columns (``Column.generated``) are never written: INSERT, REPLACE
  and UPDATE list the other columns only (the database computes them); a
  keyless table's rows are still matched on them too;
- identifiers are always quoted by the dialect, values are always parameters
  converted by the dialect's per-column converters; the SQL text of a table's
  statements is built once per schema version and reused, so a sink can
  group equal texts into ``executemany`` batches;
- **safe mode** makes replaying a keyed change idempotent: INSERT becomes
  REPLACE, UPDATE becomes DELETE of the old key followed by REPLACE of the new
  row, DELETE stays (deleting twice is harmless). Tables without a key have no
  idempotent form: a sink that replays them needs exactly-once delivery.

The MySQL sink reuses this module with its own dialect; :class:`TableSQL`
exposes the parts (``columns``, ``row``, ``key``) a multi-row batcher needs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from bridge.proto import row_pb2
from bridge.schema import key_positions, table_name
from bridge.sink.events import RowChange
from drainer.sinks.sql.dialect import Converter, Dialect

Statement = tuple[str, tuple[object, ...]]


@dataclass(frozen=True, slots=True)
class TableSQL:
    """The statements of one table at one schema version, and how to fill their parameters."""

    name: str  # db.table, for messages
    ref: str  # the quoted table reference used in the statements
    columns: tuple[str, ...]  # quoted column names in schema order
    key_positions: tuple[int, ...]  # empty: no key, rows are matched on every column
    insert: str
    replace: str
    update: str  # SET every column WHERE key (or whole row, at most one)
    delete: str  # WHERE key (or whole row, at most one)
    converters: tuple[tuple[int, Converter], ...]
    written: tuple[int, ...] | None = None  # positions INSERT/UPDATE write; None = every column

    @property
    def keyed(self) -> bool:
        return bool(self.key_positions)

    def row(self, values: Sequence[object]) -> tuple[object, ...]:
        """``values`` (one per column) converted for the driver."""
        if not self.converters:
            return tuple(values)
        out = list(values)
        for i, convert in self.converters:
            value = out[i]
            if value is not None:
                out[i] = convert(value)
        return tuple(out)

    def written_row(self, values: Sequence[object]) -> tuple[object, ...]:
        """:meth:`row` without the generated columns: the parameters of INSERT/REPLACE/UPDATE SET."""
        row = self.row(values)
        return row if self.written is None else tuple(row[i] for i in self.written)

    def key(self, values: Sequence[object]) -> tuple[object, ...]:
        """The WHERE parameters that find the row ``values`` (converted): key or whole row."""
        row = self.row(values)
        return tuple(row[i] for i in self.key_positions) if self.key_positions else row

    def statements(self, change: RowChange, safe: bool = False) -> list[Statement]:
        """The statements applying ``change``, in order (two for a safe-mode keyed UPDATE)."""
        if change.kind == "insert":
            assert change.after is not None
            return [(self.replace if safe else self.insert, self.written_row(change.after))]
        if change.kind == "delete":
            assert change.before is not None
            return [(self.delete, self.key(change.before))]
        assert change.before is not None and change.after is not None
        if safe and self.key_positions:
            return [(self.delete, self.key(change.before)), (self.replace, self.written_row(change.after))]
        return [(self.update, self.written_row(change.after) + self.key(change.before))]


def build_table_sql(dialect: Dialect, schema: row_pb2.TableSchema) -> TableSQL:
    """Precompute every statement text of ``schema``'s table in ``dialect``."""
    ref = dialect.table_ref(schema.db, schema.table)
    columns = tuple(dialect.quote(c.name) for c in schema.columns)
    written = written_positions(schema)
    targets = columns if written is None else tuple(columns[i] for i in written)
    ph = dialect.placeholder
    values = ", ".join([ph] * len(targets))
    column_list = ", ".join(targets)
    assignments = ", ".join(f"{c} = {ph}" for c in targets)
    keys = key_positions(schema)
    # Identifiers are quoted by the dialect and values are placeholders, so
    # these f-strings assemble SQL from safe parts only.
    insert = f"INSERT INTO {ref} ({column_list}) VALUES ({values})"  # noqa: S608 - see above
    replace = f"{dialect.replace_verb} {ref} ({column_list}) VALUES ({values})"
    if keys:
        condition = " AND ".join(f"{columns[i]} = {ph}" for i in keys)
        update = f"UPDATE {ref} SET {assignments} WHERE {condition}"  # noqa: S608 - see above
        delete = f"DELETE FROM {ref} WHERE {condition}"  # noqa: S608 - see above
    else:
        condition = " AND ".join(f"{c} {dialect.null_safe_equal} {ph}" for c in columns)
        update = dialect.update_one(ref, assignments, condition)
        delete = dialect.delete_one(ref, condition)
    converters = tuple(
        (i, convert) for i, c in enumerate(schema.columns) if (convert := dialect.converter(c)) is not None
    )
    return TableSQL(
        name=table_name(schema),
        ref=ref,
        columns=columns,
        key_positions=keys,
        insert=insert,
        replace=replace,
        update=update,
        delete=delete,
        converters=converters,
        written=written,
    )


def written_positions(schema: row_pb2.TableSchema) -> tuple[int, ...] | None:
    """Positions of the columns row DML writes (all but generated ones); None when that is every one."""
    if not any(c.generated for c in schema.columns):
        return None
    return tuple(i for i, c in enumerate(schema.columns) if not c.generated)


class Translator:
    """Row changes to statements in one dialect, with the per-table SQL cached.

    The cache is keyed by the identity of the ``TableSchema`` message a
    ``RowChange`` carries (the syncer decodes every row of a schema version
    with the same message) and holds a reference to it, so an id is never
    mistaken for another message's. Not thread-safe: one per sink thread.
    """

    def __init__(self, dialect: Dialect, cache_size: int = 256) -> None:
        self.dialect = dialect
        self._cache_size = cache_size
        self._cache: OrderedDict[int, tuple[row_pb2.TableSchema, TableSQL]] = OrderedDict()

    def table(self, schema: row_pb2.TableSchema) -> TableSQL:
        hit = self._cache.get(id(schema))
        if hit is not None and hit[0] is schema:
            self._cache.move_to_end(id(schema))
            return hit[1]
        table_sql = build_table_sql(self.dialect, schema)
        self._cache[id(schema)] = (schema, table_sql)
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return table_sql

    def statements(self, change: RowChange, safe: bool = False) -> list[Statement]:
        return self.table(change.table).statements(change, safe)
