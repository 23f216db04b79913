"""From merged transactions to sink events: schema tracking, filtering, lazy decoding.

:class:`EventBuilder` takes the merged transactions in commit_ts order and
returns what the sink gets:

- a DDL binlog is parsed, its ``SchemaChange`` applied to the
  :class:`~bridge.sink.schema.SchemaTracker`, and a :class:`DDLEvent` built
  with the table's schema before and after it unless the filter drops its
  table (the schema is tracked either way);
- a DML binlog's ``PrewriteValue`` is parsed once to learn its tables and
  row counts (and released); the :class:`TxnEvent` keeps the payload bytes
  and a decode closure bound to the :class:`~bridge.rowcodec.RowCodec` of
  each replicated table as of this commit_ts, so a later DDL never changes
  how it decodes. A transaction none of whose tables is replicated builds
  nothing. A transaction that travelled in chunks (``PulledTxn.parts``, on
  disk) is read part by part, one part parsed at a time, both to learn its
  tables and to decode; its event's ``parts`` reads the chunk binlogs back;
- a commit_ts listed in ``ignore-txn-commit-ts`` or in a ``[skip]``
  commit-ts range builds nothing and is logged; so do rows and DDL of
  ``[skip] tables`` and, with ``[skip] unknown-table-ids``, rows of table
  ids no tracked DDL created (:mod:`drainer.sync.skip`).

Anything the drainer cannot handle — a DDL the tracker cannot apply, a DDL
binlog without ``ddl_schema_change``, rows of a table no DDL created, a
malformed binlog — raises :class:`HaltError` naming the commit_ts and the
``ignore-txn-commit-ts`` way out; rows that do not fit their schema raise
the same way from the decode closure, in the sink thread. Nothing is
skipped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import cast

from google.protobuf.message import DecodeError
from prometheus_client import Counter

from bridge.binlog import MutationType, iter_changes, mutation_problem, parse_binlog, read_schema_change
from bridge.chunks import SpilledParts
from bridge.errors import ProtocolError, UserError, skip_hint
from bridge.proto import binlog_pb2
from bridge.rowcodec import RowCodec
from bridge.sink.events import ChangeKind, DDLEvent, Event, RawChange, RowChange, TxnEvent
from bridge.sink.schema import SchemaTracker, SchemaTrackError, TrackedTable
from drainer import metrics
from drainer.collect.merger import PulledTxn
from drainer.sync.filter import TableFilter
from drainer.sync.skip import NO_SKIP, SkipRules

log = logging.getLogger(__name__)

_KINDS: dict[int, ChangeKind] = {
    MutationType.Insert: "insert",
    MutationType.Update: "update",
    MutationType.DeleteRow: "delete",
}


_EVENTS_TXN = metrics.EVENTS.labels("txn")
_EVENTS_DDL = metrics.EVENTS.labels("ddl")
_EVENTS_FILTERED = metrics.EVENTS.labels("filtered")
_EVENTS_IGNORED = metrics.EVENTS.labels("ignored")


class HaltError(UserError):
    """The drainer cannot go past this transaction; the message names its commit_ts and the way out."""

    def __init__(self, commit_ts: int, problem: str) -> None:
        super().__init__(
            f"cannot replicate the transaction at commit_ts {commit_ts}: {problem}; {skip_hint(commit_ts)}"
        )
        self.commit_ts = commit_ts


@dataclass(frozen=True)
class Built:
    """What one merged transaction became: an event (or None) and, after a DDL, the new schema snapshot."""

    event: Event | None
    snapshot: bytes | None = None


def _prewrite_value(payload: bytes, span: tuple[int, int] | None) -> binlog_pb2.PrewriteValue:
    """The PrewriteValue of a pulled binlog; ``span`` (where it lies, if known) spares a copy."""
    if span is None:
        return binlog_pb2.PrewriteValue.FromString(binlog_pb2.Binlog.FromString(payload).prewrite_value)
    # protobuf parses any buffer; a memoryview slice spares copying a large transaction's rows.
    view = cast(bytes, memoryview(payload)[span[0] : span[1]])
    return binlog_pb2.PrewriteValue.FromString(view)


_NO_MUTATION = binlog_pb2.TableMutation()
_NO_VALUE = binlog_pb2.PrewriteValue()


def _values(
    payload: bytes, span: tuple[int, int] | None, parts: SpilledParts | None
) -> Iterator[binlog_pb2.PrewriteValue]:
    """The transaction's PrewriteValues: each chunk's (read and parsed one at a time), then the
    final binlog's. The caller drops each before asking for the next, so one part is held at a time."""
    if parts is not None:
        for data in parts.values():
            value = binlog_pb2.PrewriteValue.FromString(data)
            del data
            yield value
            del value
    yield _prewrite_value(payload, span)


def decode_changes(
    payload: bytes,
    span: tuple[int, int] | None,
    codecs: Mapping[int, RowCodec],
    commit_ts: int,
    parts: SpilledParts | None = None,
) -> Iterator[RowChange]:
    """The row changes of the replicated tables (``codecs``), in the transaction's order
    (``parts`` first, for a transaction that travelled in chunks)."""
    try:
        values = (_prewrite_value(payload, span),) if parts is None else _values(payload, span, parts)
        for value in values:
            for mutation in value.mutations:
                codec = codecs.get(mutation.table_id)
                if codec is None:
                    continue
                schema = codec.schema
                decode = codec.decode
                snapshot = mutation.snapshot
                inserted = mutation.inserted_rows
                if (
                    len(inserted) == len(mutation.sequence)
                    and not mutation.updated_rows
                    and not mutation.deleted_rows
                    and mutation_problem(mutation) is None
                ):  # inserts only (the sequence holds as many INSERTs as rows): no Change per row
                    for after in inserted:
                        yield RowChange("insert", schema, None, decode(after), snapshot)
                    continue
                for change in iter_changes(mutation):
                    yield RowChange(
                        _KINDS[change.kind],
                        schema,
                        None if change.before is None else decode(change.before),
                        None if change.after is None else decode(change.after),
                        snapshot,
                    )
            # a mutation keeps its whole PrewriteValue alive: let this part go before the next
            value, mutation = _NO_VALUE, _NO_MUTATION
    except DecodeError as exc:
        raise ProtocolError(
            f"commit_ts {commit_ts}: prewrite_value is not a PrewriteValue ({exc}); {skip_hint(commit_ts)}"
        ) from None
    except ProtocolError as exc:
        raise ProtocolError(
            f"commit_ts {commit_ts}: a row does not fit its schema: {exc}; {skip_hint(commit_ts)}"
        ) from None


def raw_changes(
    payload: bytes,
    span: tuple[int, int] | None,
    codecs: Mapping[int, RowCodec],
    commit_ts: int,
    parts: SpilledParts | None = None,
) -> Iterator[RawChange]:
    """Like :func:`decode_changes`, the row images left as the row codec's bytes, each with the
    codec that decodes it: for a sink that hands rows to other processes undecoded."""
    try:
        values = (_prewrite_value(payload, span),) if parts is None else _values(payload, span, parts)
        for value in values:
            for mutation in value.mutations:
                codec = codecs.get(mutation.table_id)
                if codec is not None:
                    schema = codec.schema
                    for change in iter_changes(mutation):
                        yield _KINDS[change.kind], schema, change.before, change.after, codec
            value, mutation = _NO_VALUE, _NO_MUTATION  # see decode_changes
    except DecodeError as exc:
        raise ProtocolError(
            f"commit_ts {commit_ts}: prewrite_value is not a PrewriteValue ({exc}); {skip_hint(commit_ts)}"
        ) from None
    except ProtocolError as exc:
        raise ProtocolError(f"commit_ts {commit_ts}: {exc}; {skip_hint(commit_ts)}") from None


class _Decoder:
    """The decode closure a TxnEvent carries (a class, so it shows what it holds); :meth:`raw`
    gives the same changes undecoded (the event's ``raw``)."""

    __slots__ = ("_codecs", "_commit_ts", "_parts", "_payload", "_span")

    def __init__(
        self,
        payload: bytes,
        span: tuple[int, int] | None,
        codecs: dict[int, RowCodec],
        commit_ts: int,
        parts: SpilledParts | None = None,
    ) -> None:
        self._payload = payload
        self._span = span
        self._codecs = codecs
        self._commit_ts = commit_ts
        self._parts = parts

    def __call__(self) -> Iterator[RowChange]:
        return decode_changes(self._payload, self._span, self._codecs, self._commit_ts, self._parts)

    def raw(self) -> Iterator[RawChange]:
        return raw_changes(self._payload, self._span, self._codecs, self._commit_ts, self._parts)


class EventBuilder:
    """Builds events from merged transactions; see the module docstring."""

    def __init__(
        self,
        tracker: SchemaTracker,
        table_filter: TableFilter,
        ignored: frozenset[int] = frozenset(),
        skip: SkipRules = NO_SKIP,
        on_skip: Callable[[PulledTxn], None] | None = None,
    ):
        """``on_skip``: called with each transaction a rule skips whole (the dead-letter store)."""
        self.tracker = tracker
        self._filter = table_filter
        self._ignored = ignored
        self._skip = skip
        self._on_skip = on_skip
        self._unknown_skipped: set[int] = set()  # table ids whose skip was logged
        self._row_counters: dict[tuple[str, str], Counter] = {}
        self._decided: dict[int, tuple[TrackedTable, bool]] = {}  # see _replicated

    def build(self, txn: PulledTxn) -> Built:
        rule = (
            "listed in [filter] ignore-txn-commit-ts"
            if txn.commit_ts in self._ignored
            else "in a [skip] commit-ts range"
            if self._skip.skips_commit_ts(txn.commit_ts)
            else ""
        )
        if rule:
            log.warning(
                "skipping the transaction at commit_ts %d (start_ts %d): %s",
                txn.commit_ts,
                txn.start_ts,
                rule,
            )
            _EVENTS_IGNORED.inc()
            if self._on_skip is not None:
                self._on_skip(txn)
            return Built(None)
        if txn.ddl:
            if txn.parts is not None:
                raise HaltError(txn.commit_ts, "a DDL binlog came in chunks (a DDL is never chunked)")
            return self._ddl(txn)
        return Built(self._dml(txn))

    def _ddl(self, txn: PulledTxn) -> Built:
        try:
            binlog = parse_binlog(txn.payload)
            change = read_schema_change(binlog)
        except ProtocolError as exc:
            raise HaltError(txn.commit_ts, f"malformed DDL binlog: {exc}") from None
        query = binlog.ddl_query.decode("utf-8", "replace")
        if change is not None and change.table and self._skip.skips_table(change.db, change.table):
            log.warning(
                "skipping the DDL at commit_ts %d (%s.%s in [skip] tables; its schema is not tracked): %s",
                txn.commit_ts,
                change.db,
                change.table,
                query[:200],
            )
            _EVENTS_IGNORED.inc()
            return Built(None)
        if change is None:
            raise HaltError(
                txn.commit_ts,
                f"DDL binlog without ddl_schema_change (original format), the schema tracker "
                f"cannot follow it: {query[:200]!r}",
            )
        try:
            before, after = self.tracker.apply(change)
        except SchemaTrackError as exc:
            raise HaltError(
                txn.commit_ts, f"the schema tracker cannot apply {query[:200]!r}: {exc}"
            ) from None
        # the sink logs the DDL it applies (once); this is the schema tracker's side of it
        log.debug("DDL at commit_ts %d tracked: %s", txn.commit_ts, query[:200])
        snapshot = self.tracker.snapshot()
        if not self._filter.allows_change(change):
            _EVENTS_FILTERED.inc()
            return Built(None, snapshot)
        _EVENTS_DDL.inc()
        event = DDLEvent(txn.start_ts, txn.commit_ts, txn.payload, query, change, before, after)
        return Built(event, snapshot)

    def _dml(self, txn: PulledTxn) -> TxnEvent | None:
        codecs: dict[int, RowCodec] = {}
        rows = 0
        try:
            if txn.parts is None:
                rows = self._learn(txn.commit_ts, _prewrite_value(txn.payload, txn.value_span), codecs)
            else:
                for value in _values(txn.payload, txn.value_span, txn.parts):
                    rows += self._learn(txn.commit_ts, value, codecs)
                    value = _NO_VALUE
        except DecodeError as exc:
            raise HaltError(txn.commit_ts, f"prewrite_value is not a PrewriteValue: {exc}") from None
        except ProtocolError as exc:  # a part that cannot be read back
            raise HaltError(txn.commit_ts, str(exc)) from None
        if not codecs:
            _EVENTS_FILTERED.inc()
            return None
        _EVENTS_TXN.inc()
        decode = _Decoder(txn.payload, txn.value_span, codecs, txn.commit_ts, txn.parts)
        parts = None if txn.parts is None else txn.parts.binlogs
        return TxnEvent(txn.start_ts, txn.commit_ts, txn.payload, decode, rows, decode.raw, parts)

    def _learn(self, commit_ts: int, value: binlog_pb2.PrewriteValue, codecs: dict[int, RowCodec]) -> int:
        """Note in ``codecs`` the replicated tables of ``value`` (one part of a chunked transaction,
        or the whole of another); its row count."""
        rows = 0
        for mutation in value.mutations:
            tracked = self.tracker.table(mutation.table_id)
            if tracked is None and self._skip.unknown_table_ids:
                self._skip_unknown(commit_ts, mutation.table_id)
                continue
            if tracked is None:
                raise HaltError(
                    commit_ts,
                    f"rows of table id {mutation.table_id}, which no DDL the drainer tracked created "
                    "(start the drainer from a checkpoint or initial-commit-ts before the table's CREATE, "
                    "or skip every such row with the line unknown-table-ids = true under [skip])",
                )
            if not self._replicated(mutation.table_id, tracked):
                continue
            codecs[mutation.table_id] = tracked.codec
            rows += self._count_rows(tracked.name, mutation)
        return rows

    def _replicated(self, table_id: int, tracked: TrackedTable) -> bool:
        """Whether the filter and the skip rules let ``tracked``'s rows through (kept per table
        until a DDL replaces its tracked entry: asked for every mutation)."""
        known = self._decided.get(table_id)
        if known is not None and known[0] is tracked:
            return known[1]
        db, table = tracked.schema.db, tracked.schema.table
        replicated = self._filter.allows(db, table) and not self._skip.skips_table(db, table)
        if len(self._decided) >= 100_000:
            self._decided.clear()
        self._decided[table_id] = (tracked, replicated)
        return replicated

    def _skip_unknown(self, commit_ts: int, table_id: int) -> None:
        _EVENTS_IGNORED.inc()
        if table_id not in self._unknown_skipped:
            self._unknown_skipped.add(table_id)
            log.warning(
                "skipping rows of table id %d from commit_ts %d on: no tracked DDL created it "
                "([skip] unknown-table-ids; logged once per table id)",
                table_id,
                commit_ts,
            )

    def _count_rows(self, table: str, mutation: binlog_pb2.TableMutation) -> int:
        counts = (len(mutation.inserted_rows), len(mutation.updated_rows) // 2, len(mutation.deleted_rows))
        for kind, count in zip(("insert", "update", "delete"), counts, strict=True):
            if count:
                counter = self._row_counters.get((table, kind))
                if counter is None:
                    counter = self._row_counters[table, kind] = metrics.ROWS.labels(table, kind)
                counter.inc(count)
        return sum(counts)
