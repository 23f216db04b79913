"""Row changes for the MySQL sink's worker processes, as the row codec's bytes (``worker-processes`` > 0).

With worker processes the dispatcher does not decode the rows of keyed tables nor plan their
statements: per row change it reads only the columns of the table's keys
(:meth:`~bridge.rowcodec.RowCodec.decode_sparse`: the row is parsed, only those datums
converted), routes the change by them (:mod:`drainer.sinks.mysql.causality`, unchanged) and
buffers a :data:`WireOp` — the table's number, the kind, the two row images as they came from
the pump, the commit_ts and the mode. A worker's buffer crosses the pipe as a list of those
tuples of ints, str and bytes (no events, no decoded values, no table objects).

In the child, each table is announced once (``("table", number, TableSchema bytes)``, before any
row of it) and kept as a :class:`ChildTables` entry: its own :class:`~bridge.rowcodec.RowCodec`,
statement writer and key plan. A worker's list becomes a :class:`Plan` job, which the worker's
thread runs: decode both images, compute the change's keys again (the same
:meth:`~drainer.sinks.mysql.causality.KeyPlan.keys` on the same values) and
:func:`~drainer.sinks.mysql.batch.units` — the grouping and statement text the dispatcher runs
for worker threads. Workers in one child share its interpreter; workers in different children
decode and plan on different cores.

Tables the dispatcher no longer uses (after a DDL, a rollback, or when it keeps too many) are
dropped by ``("forget", below)``: numbers only grow, so a job already queued keeps the entries
it was made with.
"""

from __future__ import annotations

from collections.abc import Sequence

from bridge.errors import ProtocolError, skip_hint
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from bridge.sink.errors import SinkApplyError
from drainer.sinks.mysql.batch import Op, Unit, units
from drainer.sinks.mysql.causality import Key
from drainer.sinks.mysql.translate import Table, make_table
from drainer.sinks.sql.mysql import MySQLDialect
from drainer.sinks.sql.sql import Translator

# (table number, kind, before image, after image, commit_ts, safe mode)
WireOp = tuple[int, str, bytes | None, bytes | None, int, bool]


def sparse_keys(table: Table, codec: RowCodec, before: bytes | None, after: bytes | None) -> list[Key]:
    """The causality keys of a change from its row images, decoding only the key columns."""
    columns = table.key_columns
    return table.keys.keys(
        None if before is None else codec.decode_sparse(before, columns),
        None if after is None else codec.decode_sparse(after, columns),
    )


def unfit(commit_ts: int, exc: ProtocolError) -> str:
    """The message of a row that does not fit its schema (as the drainer's decoding words it)."""
    return f"commit_ts {commit_ts}: a row does not fit its schema: {exc}; {skip_hint(commit_ts)}"


class ChildTables:
    """A child's tables by number: (:class:`Table`, :class:`RowCodec`) built from the schema."""

    def __init__(self) -> None:
        self._translator = Translator(MySQLDialect())
        self.entries: dict[int, tuple[Table, RowCodec]] = {}

    def add(self, number: int, schema_bytes: bytes) -> None:
        schema = row_pb2.TableSchema.FromString(schema_bytes)
        self.entries[number] = (make_table(self._translator, schema, number), RowCodec(schema))

    def forget(self, below: int) -> None:
        """Drop the tables numbered below ``below`` (a new dict: queued jobs keep the old one)."""
        self.entries = {n: entry for n, entry in self.entries.items() if n >= below}

    def plan(self, wire: Sequence[WireOp], batch_rows: int, batch_updates: bool) -> Plan:
        return Plan(self.entries, wire, batch_rows, batch_updates)


class Plan:
    """A worker's job in a child: its wire ops decoded and planned, when the worker calls it."""

    __slots__ = ("_batch_rows", "_batch_updates", "_entries", "_wire")

    def __init__(
        self,
        entries: dict[int, tuple[Table, RowCodec]],
        wire: Sequence[WireOp],
        batch_rows: int,
        batch_updates: bool,
    ) -> None:
        self._entries, self._wire = entries, wire
        self._batch_rows, self._batch_updates = batch_rows, batch_updates

    def __call__(self) -> list[Unit]:
        ops: list[Op] = []
        append = ops.append
        entries = self._entries
        number = -1
        table, codec = None, None
        for n, kind, before, after, commit_ts, safe in self._wire:
            if n != number:
                number = n
                table, codec = entries[n]
            assert table is not None and codec is not None
            try:
                old = None if before is None else codec.decode(before)
                new = None if after is None else codec.decode(after)
            except ProtocolError as exc:
                raise SinkApplyError(f"mysql sink: {unfit(commit_ts, exc)}") from None
            append(Op(kind, table.writer, old, new, commit_ts, safe, 0, table.keys.keys(old, new)))
        return units(ops, self._batch_rows, self._batch_updates)
