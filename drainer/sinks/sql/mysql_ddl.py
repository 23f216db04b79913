"""Schema changes as MySQL DDL, generated from ``SchemaChange`` (never from the upstream's text).

The upstream may be SQLite, whose DDL MySQL cannot run, and even a MySQL
upstream's text may name things the downstream spells differently; so the
MySQL sink rebuilds every change from the :class:`bridge.proto.row_pb2.SchemaChange`
the DDL binlog carries and the schema the table had before:

==================  ======================================================================
change              statement
==================  ======================================================================
CREATE DATABASE     ``CREATE DATABASE IF NOT EXISTS``
DROP DATABASE       ``DROP DATABASE IF EXISTS``
CREATE TABLE        ``CREATE TABLE IF NOT EXISTS`` with every column, the primary key, unique
                    and plain indexes, charset and collation
DROP TABLE          ``DROP TABLE IF EXISTS``
TRUNCATE TABLE      ``TRUNCATE TABLE``
RENAME TABLE        ``RENAME TABLE a TO b`` (MariaDB: ``RENAME TABLE IF EXISTS``)
ALTER TABLE         one ``ALTER TABLE`` from the difference of the old and new schema: columns
                    matched by id (DROP / CHANGE / ADD ... AFTER), indexes by name and definition
                    (DROP then ADD), the primary key; MariaDB gets ``IF [NOT] EXISTS`` on each
==================  ======================================================================

Idempotent where the server allows, so a DDL replayed after a crash does not
fail: every CREATE/DROP is guarded, and on MariaDB (``flavor="mariadb"``) so
are the ALTER clauses and RENAME. MySQL 8 has no ``IF [NOT] EXISTS`` for
columns; there the sink's DDL progress record (it skips DDLs at or below the
commit_ts it recorded) covers replays, except for a crash between the DDL and
that record.

Column types (:mod:`drainer.sinks.sql.mysql_columns`): a column's ``sql_type``
is MySQL text for MySQL upstreams (tables that carry a charset) and is used
when it is a plain type of the column's type family; otherwise — SQLite
upstreams, ENUM/SET, anything unexpected — the type is derived from ``type``,
``length``, ``precision``, ``scale``, ``fsp``, ``elems`` and ``unsigned``.
Tables without a charset (SQLite upstreams, which compare text byte-wise) get
``utf8mb4`` with ``utf8mb4_bin``; their unbounded TEXT/BLOB become
LONGTEXT/LONGBLOB, or VARCHAR(768)/VARBINARY(3072) when an index uses them
(MySQL cannot index an unbounded column without a prefix). Indexed TEXT/BLOB
columns of MySQL upstreams are indexed by the prefix length the binlog
carries, else by a 255-character prefix (binlogs before issue 19 carry none).

Identifiers are backtick-quoted; ENUM/SET members, DEFAULT literals and
comments are SQL string literals built here.

Full definitions (binlogs written since issue 19 carry them): a generated
column is created ``GENERATED ALWAYS AS (expr) VIRTUAL|STORED`` (the row DML
never writes it); an expression DEFAULT (``default_is_expression``) is
``DEFAULT (expr)``; ``ON UPDATE CURRENT_TIMESTAMP``, column and table
comments and the table's partitioning are recreated; an index uses the
prefix lengths it carries. Expressions are the upstream's own text. When the
schema records the DDL's session time (``session_time_us``), the statements
run between ``SET timestamp = <that time>`` and ``SET timestamp = DEFAULT``,
so CURRENT_TIMESTAMP/NOW() give existing rows the value they got upstream.
A DEFAULT of an older binlog that is neither a literal nor
``CURRENT_TIMESTAMP`` is left out with a warning, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from bridge.proto import row_pb2
from drainer.sinks.sql.mysql_columns import (
    INDEX_PREFIX,
    NOW_CALL,
    SAFE_NAME,
    STRING_TYPES,
    column_type,
    default_clause,
    derived_type,
    expression,
    from_mysql,
    indexed_columns,
    quote,
    string_literal,
    table_ref,
)

log = logging.getLogger(__name__)

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange

__all__ = [
    "INDEX_PREFIX",
    "MySQLDDL",
    "column_type",
    "default_clause",
    "derived_type",
    "from_mysql",
    "indexed_columns",
    "quote",
    "string_literal",
    "table_ref",
]


class MySQLDDL:
    """Plans the statements of one ``SchemaChange`` for a MySQL-family server.

    ``flavor`` is ``"mariadb"``, ``"mysql"`` or ``"tidb"``: MariaDB accepts
    ``IF [NOT] EXISTS`` on ALTER clauses and RENAME, the others do not.
    """

    def __init__(self, flavor: str = "mariadb") -> None:
        self.flavor = flavor

    @property
    def guarded(self) -> bool:
        return self.flavor == "mariadb"

    def column_def(self, column: row_pb2.Column, schema: row_pb2.TableSchema) -> str:
        mysql_origin = from_mysql(schema)
        indexed = column.name.lower() in indexed_columns(schema)
        text = f"{quote(column.name)} {column_type(column, mysql_origin, indexed)}"
        if column.type in STRING_TYPES and mysql_origin:
            if column.charset and SAFE_NAME.match(column.charset):
                text += f" CHARACTER SET {column.charset}"
            if column.collation and SAFE_NAME.match(column.collation):
                text += f" COLLATE {column.collation}"
        if column.generated:
            kind = "STORED" if column.generated == row_pb2.STORED else "VIRTUAL"
            text += f" GENERATED ALWAYS AS {expression(column.generation_expression)} {kind}"
        else:
            text += " NULL" if column.nullable else " NOT NULL"
            text += default_clause(column, expressions=self.flavor != "tidb")
        if column.on_update and NOW_CALL.match(column.on_update.strip()):
            text += f" ON UPDATE {column.on_update.strip()}"
        if column.auto_increment and indexed:
            text += " AUTO_INCREMENT"
        if column.comment:
            text += f" COMMENT {string_literal(column.comment)}"
        return text

    def index_def(self, index: row_pb2.Index, schema: row_pb2.TableSchema) -> str:
        by_name = {c.name.lower(): c for c in schema.columns}
        mysql_origin = from_mysql(schema)
        parts = []
        lengths = list(index.prefix_lengths) + [0] * (len(index.columns) - len(index.prefix_lengths))
        for name, length in zip(index.columns, lengths, strict=True):
            column = by_name.get(name.lower())
            prefix = f"({length})" if length > 0 else ""
            if not prefix and column is not None and mysql_origin and column.type in (T.TEXT, T.BLOB):
                prefix = f"({INDEX_PREFIX})"
            parts.append(quote(column.name if column is not None else name) + prefix)
        columns = ", ".join(parts)
        if index.primary:
            return f"PRIMARY KEY ({columns})"
        if index.unique:
            return f"UNIQUE KEY {quote(index.name)} ({columns})"
        return f"KEY {quote(index.name)} ({columns})"

    def create_table(self, schema: row_pb2.TableSchema) -> str:
        parts = [self.column_def(c, schema) for c in schema.columns]
        parts += [self.index_def(i, schema) for i in schema.indexes]
        options = ""
        if from_mysql(schema):
            if schema.charset and SAFE_NAME.match(schema.charset):
                options += f" DEFAULT CHARSET={schema.charset}"
            if schema.collation and SAFE_NAME.match(schema.collation):
                options += f" COLLATE={schema.collation}"
        else:
            options = " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        if schema.comment:
            options += f" COMMENT={string_literal(schema.comment)}"
        if schema.partitioning:
            options += f" {schema.partitioning}"
        ref = table_ref(schema.db, schema.table)
        return f"CREATE TABLE IF NOT EXISTS {ref} (\n  " + ",\n  ".join(parts) + f"\n){options}"

    def plan(self, change: row_pb2.SchemaChange, old: row_pb2.TableSchema | None) -> list[str]:
        """The statements of ``change``; ``old`` is the table's schema before it (ALTER needs it).

        At the DDL's session time when the schema records one (see the module docstring)."""
        statements = self._statements(change, old)
        moment = change.table_schema.session_time_us if change.HasField("table_schema") else 0
        if not statements or moment <= 0:
            return statements
        seconds, micros = divmod(moment, 1_000_000)
        return [f"SET timestamp = {seconds}.{micros:06d}", *statements, "SET timestamp = DEFAULT"]

    def _statements(self, change: row_pb2.SchemaChange, old: row_pb2.TableSchema | None) -> list[str]:
        kind = change.kind
        if kind == Change.CREATE_DATABASE:
            return [f"CREATE DATABASE IF NOT EXISTS {quote(change.db)}"]
        if kind == Change.DROP_DATABASE:
            return [f"DROP DATABASE IF EXISTS {quote(change.db)}"]
        ref = table_ref(change.db, change.table)
        if kind == Change.CREATE_TABLE:
            return [
                f"CREATE DATABASE IF NOT EXISTS {quote(change.db)}",
                self.create_table(change.table_schema),
            ]
        if kind == Change.DROP_TABLE:
            return [f"DROP TABLE IF EXISTS {ref}"]
        if kind == Change.TRUNCATE_TABLE:
            return [f"TRUNCATE TABLE {ref}"]
        if kind == Change.RENAME_TABLE:
            guard = " IF EXISTS" if self.guarded else ""
            old_ref = table_ref(change.old_db, change.old_table)
            return [
                f"CREATE DATABASE IF NOT EXISTS {quote(change.db)}",
                f"RENAME TABLE{guard} {old_ref} TO {ref}",
            ]
        if kind == Change.ALTER_TABLE:
            if old is None:
                raise ValueError(
                    f"ALTER TABLE {change.db}.{change.table}: the table's previous schema is unknown"
                )
            new = change.table_schema
            clauses = self.alter_clauses(old, new)
            statements = [f"ALTER TABLE {ref} " + ", ".join(clauses)] if clauses else []
            if old.partitioning != new.partitioning:
                if new.partitioning:
                    statements.append(f"ALTER TABLE {ref} {new.partitioning}")
                else:
                    statements.insert(0, f"ALTER TABLE {ref} REMOVE PARTITIONING")
            return statements
        raise ValueError(f"schema change kind {Change.Kind.Name(kind)} is not supported")

    def alter_clauses(self, old: row_pb2.TableSchema, new: row_pb2.TableSchema) -> list[str]:
        """The clauses turning ``old`` into ``new``: drop indexes, columns; change; add columns, indexes."""
        exists = " IF EXISTS" if self.guarded else ""
        not_exists = " IF NOT EXISTS" if self.guarded else ""
        old_by_id = {c.id: c for c in old.columns}
        new_ids = {c.id for c in new.columns}
        # Index identity includes the column ids, so a renamed column keeps its index.
        old_keyed = {_index_identity(i, old): i for i in old.indexes}
        new_keyed = {_index_identity(i, new): i for i in new.indexes}
        clauses: list[str] = []
        for identity, index in old_keyed.items():
            if identity not in new_keyed:
                if index.primary:
                    clauses.append("DROP PRIMARY KEY")
                else:
                    clauses.append(f"DROP INDEX{exists} {quote(index.name)}")
        for column in old.columns:
            if column.id not in new_ids:
                clauses.append(f"DROP COLUMN{exists} {quote(column.name)}")
        previous = ""
        for column in new.columns:
            before = old_by_id.get(column.id)
            definition = self.column_def(column, new)
            place = f" AFTER {quote(previous)}" if previous else " FIRST"
            if before is None:
                clauses.append(f"ADD COLUMN{not_exists} {definition}{place}")
            elif column.generated == row_pb2.VIRTUAL and before.generated != row_pb2.VIRTUAL:
                # MariaDB cannot CHANGE a column into a VIRTUAL one (error 1907), and its values are
                # computed: drop and add it (a table replicated before binlogs carried generation)
                clauses.append(f"DROP COLUMN {quote(before.name)}")
                clauses.append(f"ADD COLUMN {definition}{place}")
            elif (
                before.name != column.name
                or self.column_def(_renamed(before, column.name), new) != definition
            ):
                clauses.append(f"CHANGE COLUMN{exists} {quote(before.name)} {definition}")
            previous = column.name
        for identity, index in new_keyed.items():
            if identity not in old_keyed:
                if index.primary:
                    clauses.append(f"ADD {self.index_def(index, new)}")
                else:
                    definition = self.index_def(index, new)
                    head, _, rest = definition.partition("KEY ")
                    clauses.append(f"ADD {head}KEY{not_exists} {rest}")
        if old.comment != new.comment:
            clauses.append(f"COMMENT = {string_literal(new.comment)}")
        return clauses


def _renamed(column: row_pb2.Column, name: str) -> row_pb2.Column:
    copy = row_pb2.Column()
    copy.CopyFrom(column)
    copy.name = name
    return copy


def _index_identity(index: row_pb2.Index, schema: row_pb2.TableSchema) -> tuple[object, ...]:
    ids = {c.name.lower(): c.id for c in schema.columns}
    columns: Sequence[object] = tuple(ids.get(n.lower(), n.lower()) for n in index.columns)
    name = "" if index.primary else index.name.lower()
    prefixes = tuple(length for length in index.prefix_lengths if length > 0)
    return (index.primary, index.unique, name, *columns, prefixes and tuple(index.prefix_lengths))
