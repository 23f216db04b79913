"""Table-schema helpers over ``bridge.row.TableSchema``.

A ``TableSchema`` travels in every DDL binlog (``Binlog.ddl_schema_change``)
and is what a row is decoded against: rows carry column ids and values, never
types. The rules a schema must follow (checked by :func:`validate_table_schema`):

- column ids are positive, unique within the table, and never reused: a new
  column takes :func:`next_column_id`, which stays above every id the table
  ever had (``max_column_id`` remembers dropped ones);
- column names are unique, compared case-insensitively as MySQL does;
- every column has a known type; ENUM and SET columns list their members,
  SET members contain no comma; DECIMAL precision and scale are in MySQL's
  range when given;
- indexes name existing columns, and at most one index is the primary key.

The key of a table (what sinks partition and detect conflicts by) is
:func:`key_columns`: the primary key, else the first unique index whose
columns are all NOT NULL, else none.
"""

from __future__ import annotations

from bridge.errors import UserError
from bridge.proto import row_pb2

ColumnType = row_pb2.ColumnType

_MAX_DECIMAL_PRECISION = 65
_MAX_DECIMAL_SCALE = 30


class SchemaError(UserError, ValueError):
    """A TableSchema breaks the rules above. The message names table and column."""


def table_name(schema: row_pb2.TableSchema) -> str:
    """``db.table`` for messages; either part may be empty in a hand-built schema."""
    return f"{schema.db}.{schema.table}" if schema.db else schema.table


def validate_table_schema(schema: row_pb2.TableSchema) -> None:
    """Raise :class:`SchemaError` unless ``schema`` follows the module's rules."""
    where = table_name(schema)
    seen_ids: set[int] = set()
    seen_names: set[str] = set()
    for column in schema.columns:
        if column.id <= 0:
            raise SchemaError(f"table {where}: column {column.name!r} has id {column.id}; ids start at 1")
        if column.id in seen_ids:
            raise SchemaError(f"table {where}: column id {column.id} is used twice")
        if column.name.lower() in seen_names:
            raise SchemaError(f"table {where}: column name {column.name!r} is used twice")
        if schema.max_column_id and column.id > schema.max_column_id:
            raise SchemaError(
                f"table {where}: column {column.name!r} has id {column.id} above "
                f"max_column_id {schema.max_column_id}"
            )
        seen_ids.add(column.id)
        seen_names.add(column.name.lower())
        _validate_column(where, column)
    _validate_indexes(where, schema, seen_names)


def _validate_column(where: str, column: row_pb2.Column) -> None:
    name = f"table {where}: column {column.name!r}"
    if column.type not in ColumnType.values() or column.type == ColumnType.COLUMN_TYPE_UNSPECIFIED:
        raise SchemaError(f"{name} has no known type (type={column.type})")
    if column.type in (ColumnType.ENUM, ColumnType.SET):
        if not column.elems:
            raise SchemaError(f"{name} is {ColumnType.Name(column.type)} without members")
        if len(set(column.elems)) != len(column.elems):
            raise SchemaError(f"{name} lists a member twice")
        if column.type == ColumnType.SET and any("," in e for e in column.elems):
            raise SchemaError(f"{name} is SET with a member containing ','")
    if column.type == ColumnType.DECIMAL and column.precision:
        if not 1 <= column.precision <= _MAX_DECIMAL_PRECISION:
            raise SchemaError(f"{name} has DECIMAL precision {column.precision}, outside 1..65")
        if not 0 <= column.scale <= min(column.precision, _MAX_DECIMAL_SCALE):
            raise SchemaError(
                f"{name} has DECIMAL scale {column.scale}, outside 0..min(30, {column.precision})"
            )
    if not 0 <= column.fsp <= 6:
        raise SchemaError(f"{name} has fsp {column.fsp}, outside 0..6")
    if column.length < 0:
        raise SchemaError(f"{name} has negative length {column.length}")
    if column.type == ColumnType.BIT and column.length > 64:
        raise SchemaError(f"{name} is BIT({column.length}); at most 64 bits")


def _validate_indexes(where: str, schema: row_pb2.TableSchema, names: set[str]) -> None:
    primaries = 0
    for index in schema.indexes:
        primaries += index.primary
        if not index.columns:
            raise SchemaError(f"table {where}: index {index.name!r} has no columns")
        for name in index.columns:
            if name.lower() not in names:
                raise SchemaError(f"table {where}: index {index.name!r} names unknown column {name!r}")
    if primaries > 1:
        raise SchemaError(f"table {where}: {primaries} indexes are marked primary; at most one may be")


def key_columns(schema: row_pb2.TableSchema) -> tuple[row_pb2.Column, ...]:
    """The columns that identify a row: the primary key, else the first unique
    index (in ``indexes`` order) over NOT NULL columns only, else ``()``.

    A unique index over a nullable column does not qualify: MySQL lets many
    rows hold NULL there. Raises :class:`SchemaError` if an index names an
    unknown column.
    """
    by_name = {c.name.lower(): c for c in schema.columns}

    def resolve(index: row_pb2.Index) -> tuple[row_pb2.Column, ...]:
        try:
            return tuple(by_name[name.lower()] for name in index.columns)
        except KeyError as exc:
            raise SchemaError(
                f"table {table_name(schema)}: index {index.name!r} names unknown column {exc.args[0]!r}"
            ) from None

    for index in schema.indexes:
        if index.primary:
            return resolve(index)
    for index in schema.indexes:
        if index.unique:
            columns = resolve(index)
            if columns and not any(c.nullable for c in columns):
                return columns
    return ()


def key_positions(schema: row_pb2.TableSchema) -> tuple[int, ...]:
    """Positions in ``schema.columns`` (and so in a decoded row) of :func:`key_columns`."""
    position = {c.id: i for i, c in enumerate(schema.columns)}
    return tuple(position[c.id] for c in key_columns(schema))


def next_column_id(schema: row_pb2.TableSchema) -> int:
    """The id a column added to ``schema`` must take: above every id ever used.

    The caller records it in ``max_column_id`` of the resulting schema.
    """
    highest = max((c.id for c in schema.columns), default=0)
    return max(highest, schema.max_column_id) + 1
