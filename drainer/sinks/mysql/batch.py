"""Batching for the MySQL sink: a worker's row changes as few statements as their semantics allow.

A worker receives its row changes in binlog order (:class:`Op`) and applies
them in *groups*, each as few round trips as possible.

**Tables with a key.** A group is a run of consecutive changes (of any table and
kind, one mode, at most ``batch-rows``) in which no causality key occurs twice
(:mod:`drainer.sinks.mysql.causality`: primary and unique key values, old and
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

Statement text comes from :class:`~drainer.sinks.mysql.translate.TableWriter`.

:func:`units` groups and plans a worker's ops; it runs in the dispatcher's thread,
so the worker threads do little but wait for the server (under the GIL, Python
work is serialized anyway; the server's work then overlaps with it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from bridge.proto import row_pb2
from bridge.sink.errors import SinkApplyError
from drainer.sinks.mysql.translate import TableWriter

T = row_pb2.ColumnType
Literal = Callable[[object], str]

STATEMENT_BYTES = 1 << 20  # one statement (or multi-statement round trip) stays below this


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
            or (keyed and not seen.isdisjoint(keys))
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
    if len(prefix) + sum(map(len, parts)) + len(separator) * len(parts) <= STATEMENT_BYTES:
        if parts:  # the loop below would not split them either
            yield prefix + separator.join(parts) + suffix, len(parts)
        return
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
    first = group[0].table
    tables: dict[int, list[Op]] = {}
    for op in group:
        if op.table is not first:  # several tables: each its own statements
            for op in group:
                ops = tables.get(id(op.table))
                if ops is None:
                    ops = tables[id(op.table)] = []
                ops.append(op)
            break
    else:
        tables[id(first)] = list(group)
    batches: list[Batch] = []
    for ops in tables.values():
        table, sql = ops[0].table, ops[0].table.sql
        row = table.row
        olds: list[tuple[object, ...]] = []
        news: list[str] = []
        updates: list[Op] = []
        low = high = ops[0].commit_ts
        for op in ops:  # one pass: the old keys, the new rows, the updates left as UPDATEs
            kind, commit_ts = op.kind, op.commit_ts
            if commit_ts < low:
                low = commit_ts
            elif commit_ts > high:
                high = commit_ts
            if op.before is not None and (kind == "delete" or merge_updates):
                olds.append(op.before)
            if op.after is not None and (kind == "insert" or merge_updates):
                news.append(row(op.after))
            if kind == "update" and not merge_updates:
                updates.append(op)
        span = Span("", low, high)
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
        counts: dict[tuple[str, str], int] = Counter([(op.table.name, op.kind) for op in group])
        last = group[-1]
        planned.append(Unit(batches, len(group), max([op.commit_ts for op in group]), last.seq, counts))
    return planned
