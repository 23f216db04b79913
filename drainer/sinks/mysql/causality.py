"""Causality for the MySQL sink: which worker applies a row change, and when all must flush first.

Row changes of different rows may be applied by different workers in any
order; changes of the same row (or of rows that compete for the same unique
key value) must be applied in binlog order. Every change therefore carries
*keys*: for the table's primary key and for every unique index, the index's
values in the old image and in the new image (an index value containing NULL
is no key: NULL never conflicts). Two changes conflict when they share a key.

:class:`Causality` remembers, for every key dispatched since the last flush
of all workers, which worker it went to:

- no key of the change is held: the change goes to the worker chosen by the
  hash of its first key (among the ``active`` first workers: the sink spreads
  a light stream over fewer workers, so that each gets statements worth
  sending; the number changes only when no key is held);
- every held key of the change is held by one worker: the change goes to that
  worker, behind the earlier changes of the same rows (no flush needed);
- its keys are held by two or more workers: a **conflict** — the caller
  flushes (commits) every worker first, :meth:`Causality.reset` forgets the
  keys, and the change is then routed as if nothing were held.

This is the conflict detection of the original binlog drainer, refined by
routing a change to the one worker that already holds its keys.

**Tables with a secondary unique index** (a unique index besides the one InnoDB
clusters the rows by: the primary key, or without one the first unique index of
NOT NULL columns) get one more key, :attr:`KeyPlan.serial`, naming the table:
with it first among a change's keys, every change of the table goes to one
worker until the next flush. Keys of rows are not enough there: when InnoDB
inserts a value into a unique secondary index that holds the same value
delete-marked (the DELETE + INSERT of a batched update, a value moving between
rows, a REPLACE in safe mode), its duplicate check takes shared next-key locks on
that entry *and on the next entry of the index*, even in READ COMMITTED — the
entry of a neighbouring value, which another worker may be deleting or inserting
next to. Two workers then wait for each other's neighbours: a deadlock (error
1213) no key of the rows involved predicts. One worker per such table means no
two workers ever lock entries of one index. Tables keyed by their clustered
index alone take no such locks across rows and stay spread over the workers. Key values
are compared the way MySQL's default collations compare them, loosely: text
is case-folded and trailing spaces are stripped, so ``'a'`` and ``'A '`` are
one key (treating two values as one key only costs a flush, never a wrong
order; accent-insensitive equality of distinct code points is not modelled).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bridge.proto import row_pb2
from bridge.schema import table_name

Key = tuple[object, ...]


@dataclass(frozen=True, slots=True)
class KeyPlan:
    """Where the key values of one table's rows are: one position tuple per identifying index."""

    table: str  # db.table, lower-cased: the first element of every key of this table
    indexes: tuple[tuple[int, ...], ...]  # primary key first, then unique indexes in schema order
    text: frozenset[int]  # positions of text columns (normalized before comparing)
    serial: Key | None = None  # the table's own key when it has a secondary unique index

    def keys(self, before: Sequence[object] | None, after: Sequence[object] | None) -> list[Key]:
        """The change's keys: each index's values in ``before`` then in ``after`` (duplicates once)."""
        if len(self.indexes) == 1 and len(self.indexes[0]) == 1 and not self.text:
            # The common case, kept lean: one single-column key that is not text.
            (position,) = self.indexes[0]
            old = None if before is None else before[position]
            new = None if after is None else after[position]
            if old is None:
                return [] if new is None else [(self.table, 0, new)]
            if new is None or new == old:
                return [(self.table, 0, old)]
            return [(self.table, 0, old), (self.table, 0, new)]
        keys: list[Key] = []
        for image in (before, after):
            if image is None:
                continue
            for number, positions in enumerate(self.indexes):
                values = [image[i] for i in positions]
                if any(v is None for v in values):
                    continue
                if self.text:
                    values = [
                        _fold(v) if p in self.text and isinstance(v, str) else v
                        for p, v in zip(positions, values, strict=True)
                    ]
                key = (self.table, number, *values)
                if key not in keys:
                    keys.append(key)
        return keys


_TEXT = frozenset(
    (row_pb2.ColumnType.CHAR, row_pb2.ColumnType.VARCHAR, row_pb2.ColumnType.TEXT, row_pb2.ColumnType.ENUM,
     row_pb2.ColumnType.SET)
)  # fmt: skip


def _fold(text: str) -> str:
    return text.rstrip(" ").casefold()


def key_plan(schema: row_pb2.TableSchema) -> KeyPlan:
    """The identifying indexes of ``schema``: the primary key and every unique index."""
    position = {c.name.lower(): i for i, c in enumerate(schema.columns)}
    ordered = [i for i in schema.indexes if i.primary] + [
        i for i in schema.indexes if i.unique and not i.primary
    ]
    indexes: list[tuple[int, ...]] = []
    for index in ordered:
        try:
            positions = tuple(position[name.lower()] for name in index.columns)
        except KeyError:
            continue  # a schema the tracker accepted never gets here; such an index cannot key rows
        if positions and positions not in indexes:
            indexes.append(positions)
    text = frozenset(i for i, c in enumerate(schema.columns) if c.type in _TEXT)
    used = {p for positions in indexes for p in positions}
    name = table_name(schema).lower()
    clustered = _clustered(schema, position)
    secondary = any(positions != clustered for positions in indexes)
    return KeyPlan(name, tuple(indexes), frozenset(text & used), (name, -1) if secondary else None)


def _clustered(schema: row_pb2.TableSchema, position: dict[str, int]) -> tuple[int, ...] | None:
    """The positions of the index InnoDB clusters rows by: the primary key, else the first unique
    index of NOT NULL columns; ``None`` when it clusters by a hidden row id."""
    nullable = {c.name.lower(): c.nullable for c in schema.columns}
    for index in [i for i in schema.indexes if i.primary] + [i for i in schema.indexes if i.unique]:
        names = [name.lower() for name in index.columns]
        if (
            names
            and all(n in position for n in names)
            and (index.primary or not any(nullable[n] for n in names))
        ):
            return tuple(position[n] for n in names)
    return None


class Causality:
    """Keys dispatched since the last flush of all workers, and the worker holding each."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError("at least one worker")
        self.workers = workers
        self.active = workers  # workers new keys are spread over (see reset)
        self.held: dict[Key, int] = {}
        self.conflicts = 0

    def __len__(self) -> int:
        return len(self.held)

    def route(self, keys: Sequence[Key]) -> int | None:
        """The worker for a change with ``keys``, recording them; ``None`` on a conflict.

        On ``None`` nothing is recorded: the caller flushes every worker, calls
        :meth:`reset` and routes the change again. A change without keys goes
        to worker 0 (callers send keyless tables elsewhere anyway).
        """
        if not keys:
            return 0
        held = self.held
        owner = -1
        for key in keys:
            holder = held.get(key)
            if holder is not None and holder != owner:
                if owner >= 0:
                    self.conflicts += 1
                    return None
                owner = holder
        if owner < 0:
            owner = hash(keys[0]) % self.active
        for key in keys:
            held[key] = owner
        return owner

    def reset(self, active: int | None = None) -> None:
        """Every worker flushed: no key is held any more. New keys may then be spread over
        ``active`` workers (the first ones) instead: no held key can be on a worker left out."""
        self.held.clear()
        if active is not None:
            self.active = max(1, min(self.workers, active))
