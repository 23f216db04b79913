"""Batching for the MySQL sink: a worker's row changes as few statements as their semantics allow.

A worker receives its row changes in binlog order (:class:`Op`) and applies
them in *groups*, each as few round trips as possible.

**Tables with a key.** A group is a run of consecutive changes (of any table and
kind, one mode, at most ``batch-rows``) in which no causality key occurs twice
(:mod:`drainer.sinks.mysql_causality`: primary and unique key values, old and
new images). Such changes touch different rows and compete for no unique
value, so they commute: applying them as a set in any order gives the rows
applying them one by one gives. Per table the group becomes one
``DELETE FROM t WHERE k IN (..)`` of every old key (deletes, and updates),
then one multi-row ``INSERT INTO t (...) VALUES (..), (..)`` of every new row
(inserts, and updates) — ``REPLACE`` in safe mode. With ``batch-updates =
false`` outside safe mode, updates are instead one ``UPDATE ... WHERE key``
per row, sent together as one multi-statement round trip. A composite key is
deleted as ``(a = .. AND b = ..) OR (..)``. So a stream of small mixed
transactions still becomes a few large statements.

**Tables without a key** (the keyless worker): consecutive changes of one
table and kind; inserts as one multi-row INSERT, updates and deletes one
``... WHERE <whole old row> LIMIT 1`` each, in order, in one multi-statement
round trip.

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
:mod:`drainer.translator.sql`; no value is ever shown.

:func:`units` groups and plans a worker's ops; it runs in the dispatcher's thread,
so the worker threads do little but wait for the server (under the GIL, Python
work is serialized anyway; the server's work then overlaps with it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from pymysql.converters import escape_item, escape_timedelta

from bridge.proto import row_pb2
from bridge.sink.errors import SinkApplyError
from drainer.translator.sql import TableSQL
from drainer.translator.sqlite import datetime_text

T = row_pb2.ColumnType
Literal = Callable[[object], str]

STATEMENT_BYTES = 1 << 20  # one statement (or multi-statement round trip) stays below this
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
        column_list = ", ".join(self.columns)
        # Quoted identifiers and literals built by this module only:
        self.insert_prefix = f"INSERT INTO {self.ref} ({column_list}) VALUES "  # noqa: S608
        self.replace_prefix = f"REPLACE INTO {self.ref} ({column_list}) VALUES "  # noqa: S608
        self.delete_prefix = f"DELETE FROM {self.ref} WHERE "  # noqa: S608

    def row(self, values: Sequence[object]) -> str:
        """``(v1, v2, ...)`` for a VALUES list."""
        return (
            "("
            + ", ".join(["NULL" if v is None else f(v) for f, v in zip(self.literals, values)])  # noqa: B905
            + ")"
        )

    def assignments(self, values: Sequence[object]) -> str:
        return ", ".join(
            [
                f"{c} = {'NULL' if v is None else f(v)}"
                for c, f, v in zip(self.columns, self.literals, values, strict=True)
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


class Op(NamedTuple):
    """One row change for a worker. ``keys`` are its causality keys (primary and unique key values,
    old and new image); ``seq`` numbers a transaction's changes of keyless tables."""

    kind: str  # "insert", "update", "delete"
    table: TableWriter
    before: tuple[object, ...] | None
    after: tuple[object, ...] | None
    commit_ts: int
    safe: bool
    seq: int = 0
    keys: Sequence[object] = ()


@dataclass(slots=True)
class Batch:
    """One round trip: ``sql`` is complete statement text (values written as literals); ``multi``
    when it holds several statements separated by ``;``. ``template`` is the placeholder form."""

    sql: str
    multi: bool
    template: str
    table: TableWriter
    kind: str
    rows: int  # row changes this statement carries
    first_ts: int
    last_ts: int

    @property
    def shape(self) -> str:
        """The statement with placeholders, for messages: never any value."""
        unit = "statements" if self.multi else "rows"
        return f"{self.template} [{self.rows} {unit}]"

    @property
    def commit_ts_text(self) -> str:
        return str(self.first_ts) if self.first_ts == self.last_ts else f"{self.first_ts}..{self.last_ts}"


def _op_keys(op: Op) -> Sequence[object]:
    if op.keys:
        return op.keys
    positions = op.table.key_positions
    return [
        (id(op.table), *[image[i] for i in positions]) for image in (op.before, op.after) if image is not None
    ]


def groups(ops: Sequence[Op], batch_rows: int) -> Iterator[list[Op]]:
    """Split ``ops`` into groups that may be applied as a set (see the module docstring).

    Keyed tables: consecutive ops of one mode, at most ``batch_rows``, no key twice — they
    commute, whatever their table and kind. Keyless tables: consecutive ops of one table and kind.
    """
    group: list[Op] = []
    seen: set[object] = set()
    table: TableWriter | None = None
    kind, safe = "", False
    for op in ops:
        keyed = op.table.keyed
        keys = _op_keys(op) if keyed else ()
        if group and (
            keyed != table.keyed  # type: ignore[union-attr]
            or op.safe != safe
            or len(group) >= batch_rows
            or (keyed and any(k in seen for k in keys))
            or (not keyed and (op.table is not table or op.kind != kind))
        ):
            yield group
            group, seen = [], set()
        if not group:
            table, kind, safe = op.table, op.kind, op.safe
        group.append(op)
        seen.update(keys)
    if group:
        yield group


class Span(NamedTuple):
    """What a group's batches apply: the change kind and the commit_ts range."""

    kind: str
    first_ts: int
    last_ts: int


def _chunks(prefix: str, parts: Sequence[str], separator: str, suffix: str = "") -> Iterator[tuple[str, int]]:
    """``prefix + separator.join(parts) + suffix``, split to stay below STATEMENT_BYTES; with part counts."""
    start, size = 0, len(prefix)
    for i, part in enumerate(parts):
        if i > start and size + len(part) + len(separator) > STATEMENT_BYTES:
            yield prefix + separator.join(parts[start:i]) + suffix, i - start
            start, size = i, len(prefix)
        size += len(part) + len(separator)
    if start < len(parts):
        yield prefix + separator.join(parts[start:]) + suffix, len(parts) - start


def _batches(
    chunks: Iterator[tuple[str, int]], multi: bool, template: str, table: TableWriter, span: Span
) -> list[Batch]:
    return [
        Batch(text, multi, template, table, span.kind, n, span.first_ts, span.last_ts) for text, n in chunks
    ]


def _deletes(table: TableWriter, images: Sequence[tuple[object, ...]], span: Span) -> list[Batch]:
    """``DELETE FROM t WHERE <key of each image>`` (each key once), as few statements as fit."""
    if len(table.key_positions) == 1:
        keys = list(dict.fromkeys(table.key_literal(image) for image in images))
        column = table.columns[table.key_positions[0]]
        chunks = _chunks(f"{table.delete_prefix}{column} IN (", keys, ", ", ")")
    else:
        conditions = list(dict.fromkeys("(" + table.key_condition(image) + ")" for image in images))
        chunks = _chunks(table.delete_prefix, conditions, " OR ")
    return _batches(chunks, False, table.sql.delete, table, span)


def _keyless(group: Sequence[Op]) -> list[Batch]:
    """One table, one kind, in order: inserts as one multi-row INSERT, the rest one row at a time."""
    first = group[0]
    table, kind, sql = first.table, first.kind, first.table.sql
    span = Span(kind, first.commit_ts, group[-1].commit_ts)
    if kind == "insert":
        rows = [table.row(op.after) for op in group if op.after is not None]
        return _batches(_chunks(table.insert_prefix, rows, ", "), False, sql.insert, table, span)
    if kind == "delete":
        texts = [
            f"{table.delete_prefix}{table.key_condition(op.before)} LIMIT 1" for op in group if op.before
        ]
        return _batches(_chunks("", texts, ";\n"), True, sql.delete, table, span)
    texts = [
        f"UPDATE {table.ref} SET {table.assignments(op.after)} WHERE {table.key_condition(op.before)} LIMIT 1"  # noqa: S608
        for op in group
        if op.after is not None and op.before is not None
    ]
    return _batches(_chunks("", texts, ";\n"), True, sql.update, table, span)


def plan(group: Sequence[Op], batch_updates: bool = True) -> list[Batch]:
    """The batches applying one group (see the module docstring).

    A keyed group's ops commute, so per table: one DELETE of every old key (deletes, and updates
    when ``batch_updates`` or in safe mode), one multi-row INSERT (REPLACE in safe mode) of every
    new row (inserts and those updates), then one UPDATE per row for the other updates.
    """
    if not group[0].table.keyed:
        return _keyless(group)
    safe = group[0].safe
    merge_updates = safe or batch_updates
    tables: dict[int, list[Op]] = {}
    for op in group:
        tables.setdefault(id(op.table), []).append(op)
    batches: list[Batch] = []
    for ops in tables.values():
        table, sql = ops[0].table, ops[0].table.sql
        span = Span("", min(op.commit_ts for op in ops), max(op.commit_ts for op in ops))
        olds = [op.before for op in ops if op.before is not None and (op.kind == "delete" or merge_updates)]
        news = [
            table.row(op.after)
            for op in ops
            if op.after is not None and (op.kind == "insert" or merge_updates)
        ]
        updates = [op for op in ops if op.kind == "update" and not merge_updates]
        if olds:
            batches += _deletes(table, olds, span._replace(kind="delete"))
        if news:
            prefix, template = (
                (table.replace_prefix, sql.replace) if safe else (table.insert_prefix, sql.insert)
            )
            batches += _batches(
                _chunks(prefix, news, ", "), False, template, table, span._replace(kind="insert")
            )
        if updates:
            texts = [
                f"UPDATE {table.ref} SET {table.assignments(op.after)} WHERE {table.key_condition(op.before)}"  # noqa: S608
                for op in updates
                if op.after is not None and op.before is not None
            ]
            batches += _batches(
                _chunks("", texts, ";\n"), True, sql.update, table, span._replace(kind="update")
            )
    return batches


class Unit(NamedTuple):
    """One group, planned: what a worker runs, how many changes it applies (in total and per table
    and kind, for the metrics), and where they end."""

    batches: list[Batch]
    ops: int
    high_ts: int
    seq: int
    counts: dict[tuple[str, str], int]


def units(ops: Sequence[Op], batch_rows: int, batch_updates: bool = True) -> list[Unit]:
    """``ops`` grouped and planned; a value no literal can hold raises :class:`SinkApplyError`."""
    planned: list[Unit] = []
    for group in groups(ops, batch_rows):
        try:
            batches = plan(group, batch_updates)
        except (TypeError, ValueError, ArithmeticError, LookupError) as exc:
            first, last = group[0], group[-1]
            where = (
                str(first.commit_ts)
                if first.commit_ts == last.commit_ts
                else f"{first.commit_ts}..{last.commit_ts}"
            )
            raise SinkApplyError(
                f"mysql sink: commit_ts {where}: table {first.table.name}: a value cannot be written "
                f"as a MySQL literal ({type(exc).__name__}); statement: {first.table.sql.insert}"
            ) from exc
        counts: dict[tuple[str, str], int] = {}
        for op in group:
            counts[op.table.name, op.kind] = counts.get((op.table.name, op.kind), 0) + 1
        last = group[-1]
        planned.append(Unit(batches, len(group), max(op.commit_ts for op in group), last.seq, counts))
    return planned
