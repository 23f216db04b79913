"""Translation for the MySQL sink: a table's statement text with its values as literals.

**Literals.** pymysql escapes each parameter through several generic calls,
which costs more than the rest of a row's way through the sink. A
:class:`TableWriter` instead picks one literal function per column from the
column's type when the table is first seen, and builds the statement text
itself: integers and DECIMALs as digits, floats as ``repr`` + ``e0`` (a DOUBLE
literal, as pymysql writes them), text quoted with MySQL's backslash escapes
(the sink refuses ``NO_BACKSLASH_ESCAPES``), binary as ``_binary X'..'``,
temporal values in MySQL's text form, TIME as pymysql writes it. A value of
an unexpected Python type falls back to pymysql's own escaping. The
statement *shape* in messages is the placeholder form of
:mod:`drainer.sinks.sql.sql`; no value is ever shown.

:class:`Tables` keeps one :class:`TableWriter` (and causality key plan) per
schema object the events carry: a DDL gives later events a new schema object,
so a schema change is a new entry, never a stale one.

Generated columns are left out of every column list and VALUES row and of
UPDATE's SET (the server computes them); WHERE clauses still read them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from pymysql.converters import escape_item, escape_timedelta

from bridge.proto import row_pb2
from drainer.sinks.mysql.causality import KeyPlan, key_plan
from drainer.sinks.sql.mysql import MySQLDialect
from drainer.sinks.sql.sql import TableSQL, Translator
from drainer.sinks.sql.sqlite import datetime_text

T = row_pb2.ColumnType
Literal = Callable[[object], str]

_ESCAPES = {
    0: "\\0",
    ord("\\"): "\\\\",
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    26: "\\Z",
    ord('"'): '\\"',
    ord("'"): "\\'",
}
_NEEDS_ESCAPE = re.compile("[\\\\\x00\n\r\x1a'\"]").search
_INTEGERS = frozenset((T.TINYINT, T.SMALLINT, T.MEDIUMINT, T.INT, T.BIGINT, T.YEAR, T.BIT))
_TEXTS = frozenset((T.CHAR, T.VARCHAR, T.TEXT, T.ENUM, T.SET, T.JSON))
_BINARIES = frozenset((T.BINARY, T.VARBINARY, T.BLOB))


def _fallback(value: object) -> str:
    return str(escape_item(value, "utf8mb4"))


def text_literal(value: object) -> str:
    if type(value) is str:
        if _NEEDS_ESCAPE(value) is None:  # the common case: nothing to escape, no translate pass
            return "'" + value + "'"
        return "'" + value.translate(_ESCAPES) + "'"
    return _fallback(value)


def int_literal(value: object) -> str:
    if type(value) is int:
        return str(value)
    return _fallback(value)


def decimal_literal(value: object) -> str:
    if type(value) is Decimal and value.is_finite():
        return format(value, "f")
    return _fallback(value)


def float_literal(value: object) -> str:
    if type(value) is float:
        text = repr(value)
        if text in ("inf", "-inf", "nan"):
            raise ValueError(f"{text} cannot be stored in MySQL")
        return text if "e" in text else text + "e0"
    return _fallback(value)


def bytes_literal(value: object) -> str:
    if type(value) is bytes:
        return "_binary X'" + value.hex() + "'"
    return _fallback(value)


def date_literal(value: object) -> str:
    if type(value) is date:
        return "'" + value.isoformat() + "'"
    return "'" + str(value) + "'" if hasattr(value, "month") else _fallback(value)  # MySQLDate


def datetime_literal(fsp: int) -> Literal:
    def literal(value: object) -> str:
        if type(value) is datetime:
            if value.tzinfo is not None:  # TIMESTAMP: the UTC instant (the connection runs in +00:00)
                value = value.astimezone(UTC).replace(tzinfo=None)
            return "'" + value.isoformat(" ") + "'"
        if hasattr(value, "microsecond"):  # MySQLDateTime: a zero date part
            return "'" + datetime_text(value, fsp) + "'"
        return _fallback(value)

    return literal


def time_literal(value: object) -> str:
    if type(value) is timedelta:
        return str(escape_timedelta(value))
    return _fallback(value)


def literal_of(column: row_pb2.Column) -> Literal:
    """The function writing a non-NULL decoded value of ``column`` as a MySQL literal."""
    kind = column.type
    if kind in _INTEGERS:
        return int_literal
    if kind in _TEXTS:
        return text_literal
    if kind in _BINARIES:
        return bytes_literal
    if kind == T.DECIMAL:
        return decimal_literal
    if kind in (T.FLOAT, T.DOUBLE):
        return float_literal
    if kind == T.DATE:
        return date_literal
    if kind in (T.DATETIME, T.TIMESTAMP):
        return datetime_literal(column.fsp)
    if kind == T.TIME:
        return time_literal
    return _fallback


class TableWriter:
    """One table at one schema version: its statement texts and one literal function per column."""

    def __init__(self, sql: TableSQL, schema: row_pb2.TableSchema) -> None:
        self.sql = sql
        self.name = sql.name
        self.key_positions = sql.key_positions
        self.keyed = bool(sql.key_positions)
        self.literals = tuple(literal_of(c) for c in schema.columns)
        # The TableSQL texts double '%' for pymysql's formatting; these run unformatted.
        self.ref = sql.ref % ()
        self.columns = tuple(c % () for c in sql.columns)
        # what INSERT/REPLACE/UPDATE write: every column but the generated ones
        self.written = sql.written if sql.written is not None else tuple(range(len(self.columns)))
        self._all_written = sql.written is None
        column_list = ", ".join(self.columns[i] for i in self.written)
        # Quoted identifiers and literals built by this module only:
        self.insert_prefix = f"INSERT INTO {self.ref} ({column_list}) VALUES "  # noqa: S608
        self.replace_prefix = f"REPLACE INTO {self.ref} ({column_list}) VALUES "  # noqa: S608
        self.delete_prefix = f"DELETE FROM {self.ref} WHERE "  # noqa: S608

        self._row = self._unrolled_row()

    def row(self, values: Sequence[object]) -> str:
        """``(v1, v2, ...)`` for a VALUES list (generated columns left out)."""
        if len(values) == len(self.literals):
            return self._row(values)
        return self.row_reference(values)

    def _unrolled_row(self) -> Callable[[Sequence[object]], str]:
        """:meth:`row_reference` as one generated function of a full-width image, without the
        per-column loop: each written column's literal inline (an ``int`` column's ``int`` as
        ``str``, as :func:`int_literal` writes it, a text column's that needs no escape quoted, as
        :func:`text_literal` writes it). Built from fixed snippets and ints only; the
        texts it writes are :meth:`row_reference`'s (``tests/unit/test_mysql_translate.py``)."""
        scope: dict[str, object] = {"str": str, "int": int, "clean": _NEEDS_ESCAPE}
        width = len(self.literals)
        names = ", ".join(f"v{i}" for i in range(width))
        lines = ["def row(values):", f"    {names}{',' if width == 1 else ''} = values"]
        parts = []
        for i in self.written:
            scope[f"f{i}"] = self.literals[i]
            if self.literals[i] is int_literal:
                lines.append(
                    f"    a{i} = str(v{i}) if type(v{i}) is int else ('NULL' if v{i} is None else f{i}(v{i}))"
                )
            elif self.literals[i] is text_literal:  # text_literal's common case: nothing to escape
                lines.append(
                    f'    a{i} = "\'" + v{i} + "\'" if type(v{i}) is str and clean(v{i}) is None '
                    f"else ('NULL' if v{i} is None else f{i}(v{i}))"
                )
            else:
                lines.append(f"    a{i} = 'NULL' if v{i} is None else f{i}(v{i})")
            parts.append(f"a{i}")
        lines.append(
            "    return '(' + " + " + ', ' + ".join(parts) + " + ')'" if parts else "    return '()'"
        )
        exec("\n".join(lines), scope)  # noqa: S102 - fixed snippets and ints
        row: Callable[[Sequence[object]], str] = scope["row"]  # type: ignore[assignment]
        return row

    def row_reference(self, values: Sequence[object]) -> str:
        """:meth:`row`, column by column (the reference of the generated function)."""
        if not self._all_written:
            literals = self.literals
            return (
                "("
                + ", ".join(["NULL" if values[i] is None else literals[i](values[i]) for i in self.written])
                + ")"
            )
        return (
            "("
            + ", ".join(["NULL" if v is None else f(v) for f, v in zip(self.literals, values)])  # noqa: B905
            + ")"
        )

    def assignments(self, values: Sequence[object]) -> str:
        columns, literals = self.columns, self.literals
        return ", ".join(
            [
                f"{columns[i]} = {'NULL' if values[i] is None else literals[i](values[i])}"
                for i in self.written
            ]
        )

    def key_condition(self, values: Sequence[object]) -> str:
        """``k = v`` (AND ...) on the key, or ``c <=> v`` on every column of a keyless table."""
        columns, literals = self.columns, self.literals
        if self.key_positions:
            return " AND ".join(
                [
                    f"{columns[i]} = {'NULL' if values[i] is None else literals[i](values[i])}"
                    for i in self.key_positions
                ]
            )
        return " AND ".join(
            [
                f"{c} <=> {'NULL' if v is None else f(v)}"
                for c, f, v in zip(columns, literals, values, strict=True)
            ]
        )

    def key_literal(self, values: Sequence[object]) -> str:
        """The literal of a one-column key's value."""
        i = self.key_positions[0]
        value = values[i]
        return "NULL" if value is None else self.literals[i](value)


@dataclass(frozen=True, slots=True)
class Table:
    """One table at one schema version: its statement writer and causality keys. ``number``
    names it to worker processes (never reused by one :class:`Tables`); ``key_columns`` are the
    positions every key reads."""

    writer: TableWriter
    keys: KeyPlan
    number: int = 0
    key_columns: tuple[int, ...] = ()


def make_table(translator: Translator, schema: row_pb2.TableSchema, number: int = 0) -> Table:
    keys = key_plan(schema)
    columns = tuple(sorted({p for positions in keys.indexes for p in positions}))
    return Table(TableWriter(translator.table(schema), schema), keys, number, columns)


class Tables:
    """The :class:`Table` of each schema object seen lately (bounded; cleared after a DDL)."""

    def __init__(self) -> None:
        self._translator = Translator(MySQLDialect())
        self._tables: dict[int, tuple[row_pb2.TableSchema, Table]] = {}
        self.numbered = 0  # the number of the last Table made

    def get(self, schema: row_pb2.TableSchema) -> Table:
        hit = self._tables.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        self.numbered += 1
        table = make_table(self._translator, schema, self.numbered)
        if len(self._tables) > 512:
            self._tables.clear()
        self._tables[id(schema)] = (schema, table)
        return table

    def clear(self) -> None:
        self._tables.clear()
