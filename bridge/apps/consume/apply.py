"""Apply released changes to a SQL database through the registered sinks the drainer uses.

:class:`Applier` turns what :class:`~bridge.apps.consume.ordering.ResolvedBuffer`
releases (row changes and DDL events in commit order) back into the events
the drainer hands its sinks — a :class:`~bridge.sink.events.DDLEvent` per DDL
(its ``SchemaChange`` rebuilt from the DDL event record) and a
:class:`~bridge.sink.events.TxnEvent` per commit_ts (its rows as
:class:`~bridge.sink.events.RowChange` with values from
:meth:`bridge.avro.TableAvro.values`) — and writes them to a sink built for
the target DSN, found by name in the sink registry
(:mod:`bridge.sink.registry`): the ``sqlite`` sink (``sqlite:`` DSNs, the
path is a directory with one file per upstream database) or the ``mysql``
sink (``mysql://``). After each batch a
:class:`~bridge.sink.events.ResolvedEvent` at the released watermark moves the
sink's own checkpoint there, so a restarted consumer skips what it applied.

A transaction the buffer spilled to disk (:mod:`bridge.apps.consume.spill`)
becomes a TxnEvent whose ``decode()`` reads its rows back from there one
page at a time, so applying it holds no more than a page of rows; its
rows are deleted once the flush after it succeeded.

Table schemas come from the DDL stream only: a CREATE TABLE (or ALTER,
RENAME, TRUNCATE) event carries the table's whole schema after it. DDL
events at or below the target's checkpoint are still read (to know the
schemas) but not applied again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from bridge.apps.consume.items import OPS, DDLItem, Ordered, RowItem
from bridge.apps.consume.spill import SpilledRows
from bridge.dsn import parse_dsn
from bridge.errors import ConfigError, UserError
from bridge.proto import row_pb2
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.driver import SinkDriver, as_raised
from bridge.sink.events import ChangeKind, DDLEvent, Event, ResolvedEvent, RowChange, TxnEvent
from bridge.sink.registry import sink_class
from bridge.sink.schema import SchemaTracker, SchemaTrackError, TableChange

log = logging.getLogger(__name__)

SchemaChange = row_pb2.SchemaChange
ValuesOf = Callable[[row_pb2.TableSchema, Mapping[str, Any]], tuple[object, ...]]
Released = Ordered | SpilledRows  # what the ordering buffer releases

EVENTS_PER_WRITE = 256  # events handed to one sink.write call
RETRIES = 10  # attempts of a write/flush the sink calls retriable
RETRY_PAUSE, RETRY_PAUSE_MAX = 0.5, 8.0  # seconds between attempts, doubling


class ApplyError(UserError):
    """A change cannot be applied (no schema for its table, a row that does not fit it)."""


def avro_values() -> ValuesOf:
    """``TableAvro.values`` of :mod:`bridge.avro`, with one ``TableAvro`` per schema object."""
    from bridge.avro import table_avro

    cache: dict[int, tuple[row_pb2.TableSchema, Any]] = {}

    def values_of(schema: row_pb2.TableSchema, record: Mapping[str, Any]) -> tuple[object, ...]:
        entry = cache.get(id(schema))
        if entry is None or entry[0] is not schema:
            if len(cache) > 4096:
                cache.clear()
            entry = cache[id(schema)] = (schema, table_avro(schema))
        return tuple(entry[1].values(dict(record)))

    return values_of


def schema_change(record: Mapping[str, Any]) -> row_pb2.SchemaChange:
    """The ``SchemaChange`` a DDL event record describes."""
    kind_name = str(record.get("kind") or "")
    try:
        kind = cast(SchemaChange.Kind, SchemaChange.Kind.Value(kind_name))
    except ValueError:
        raise ApplyError(
            f"DDL event at commit_ts {record.get('commit_ts')}: unknown kind {kind_name!r}"
        ) from None
    change = SchemaChange(
        kind=kind,
        db=str(record.get("db") or ""),
        table=str(record.get("table") or ""),
        old_db=str(record.get("old_db") or ""),
        old_table=str(record.get("old_table") or ""),
    )
    raw = record.get("table_schema") or b""
    if raw:
        change.table_schema.ParseFromString(bytes(raw))
    return change


def _name(db: str, table: str) -> tuple[str, str]:
    return db.lower(), table.lower()


class SchemaBook:
    """Each table's schema as of the last DDL event read (names compare case-insensitively)."""

    def __init__(self) -> None:
        self._tables: dict[tuple[str, str], row_pb2.TableSchema] = {}

    def get(self, db: str, table: str) -> row_pb2.TableSchema | None:
        return self._tables.get(_name(db, table))

    def __len__(self) -> int:
        return len(self._tables)

    def copy(self) -> SchemaBook:
        """The schemas as of now (a later DDL does not change the copy)."""
        book = SchemaBook()
        book._tables = dict(self._tables)
        return book

    def snapshot(self) -> bytes:
        """The tables as a :class:`bridge.sink.schema.SchemaTracker` snapshot (what a sink is opened with)."""
        tracker = SchemaTracker()
        try:
            for schema in self._tables.values():
                tracker.apply(
                    SchemaChange(
                        kind=SchemaChange.CREATE_TABLE, db=schema.db, table=schema.table, table_schema=schema
                    )
                )
        except SchemaTrackError as exc:
            raise ApplyError(
                f"the tables known from the DDL topic do not form a schema snapshot: {exc}"
            ) from exc
        return tracker.snapshot()

    def apply(self, change: row_pb2.SchemaChange) -> TableChange:
        """Apply one DDL; returns the table's schema before and after it (as a DDLEvent carries)."""
        kind = change.kind
        before: row_pb2.TableSchema | None = None
        if kind == SchemaChange.RENAME_TABLE:
            before = self.get(change.old_db, change.old_table)
        elif kind not in (
            SchemaChange.CREATE_DATABASE,
            SchemaChange.DROP_DATABASE,
            SchemaChange.CREATE_TABLE,
        ):
            before = self.get(change.db, change.table)
        self._apply(change)
        after = None
        if change.HasField("table_schema") and kind != SchemaChange.DROP_TABLE:
            after = change.table_schema
        return TableChange(before, after)

    def _apply(self, change: row_pb2.SchemaChange) -> None:
        kind = change.kind
        if kind == SchemaChange.DROP_DATABASE:
            db = change.db.lower()
            for name in [n for n in self._tables if n[0] == db]:
                del self._tables[name]
        elif kind == SchemaChange.DROP_TABLE:
            self._tables.pop(_name(change.db, change.table), None)
        elif kind == SchemaChange.RENAME_TABLE:
            self._tables.pop(_name(change.old_db, change.old_table), None)
        if change.HasField("table_schema") and kind != SchemaChange.DROP_TABLE:
            schema = change.table_schema
            self._tables[_name(schema.db or change.db, schema.table or change.table)] = schema


@dataclass
class ApplyStats:
    rows: int = 0
    ddl: int = 0
    transactions: int = 0
    skipped: int = 0  # changes at or below the target's checkpoint (applied by an earlier run)


SinkFactory = Callable[[], Sink]


def sink_for(
    dsn_text: str, key: str = "--apply", worker_count: int = 4, progress_schema: str = "bridge_consume"
) -> SinkFactory:
    """A factory of the registered sink that applies to ``dsn_text``: a sqlite directory, or a MySQL
    server (``mysql://user[:password]@host:port/``; password also from BRIDGE_SINK_MYSQL_PASSWORD;
    the mysql sink keeps its progress rows in ``progress_schema``)."""
    dsn = parse_dsn(dsn_text, key=key)
    if dsn.is_sqlite:
        sqlite = sink_class("sqlite")
        return lambda: sqlite({"path": dsn.path}, Path(dsn.path))
    try:
        mysql = sink_class("mysql")
    except ConfigError as exc:
        raise UserError(f"{key} {dsn.redacted()}: the mysql sink is not available: {exc}") from None
    table = {"dsn": dsn_text.strip(), "worker-count": worker_count, "progress-schema": progress_schema}
    mysql(table, Path("."))  # checks the settings now: a bad DSN is a one-line error at start
    return lambda: mysql(table, Path("."))


def cluster_of(items: Sequence[Released]) -> int | None:
    """The upstream cluster id the changes carry (the mysql sink keys its progress rows by it)."""
    for released in items:
        item = released.first() if isinstance(released, SpilledRows) else released
        if item is None:
            continue
        holder = item.source if isinstance(item, RowItem) else item.record
        if holder.get("cluster_id") is not None:
            return int(holder["cluster_id"])
    return None


def _close_spilled(items: Sequence[Released]) -> None:
    for item in items:
        if isinstance(item, SpilledRows):
            item.close()


class Applier:
    """Feeds released changes to sinks made by ``factory``; see the module docstring.

    The first :meth:`apply` opens one sink only to learn what the target
    already applied (its checkpoint) and closes it; the sink that writes is
    opened just before the first event above that checkpoint, with the
    tables known as of that point in its context. Both are called through a
    :class:`~bridge.sink.driver.SinkDriver`, as the drainer calls its sink.
    ``values_of(schema, row_record)`` turns an Avro row record into the
    column values (default: :func:`avro_values`).
    """

    def __init__(self, factory: SinkFactory | Sink, values_of: ValuesOf | None = None) -> None:
        if callable(factory):
            self.factory: SinkFactory = factory
        else:
            made = factory  # one sink object: used for the probe and for writing
            self.factory = lambda: made
        self.values_of = values_of or avro_values()
        self.schemas = SchemaBook()
        self.stats = ApplyStats()
        self.checkpoint = 0  # the target's applied commit_ts
        self.cluster_id: int | None = None
        self.driver: SinkDriver | None = None
        self._probed = False

    def _driven(self, sink: Sink) -> SinkDriver:
        return SinkDriver(sink, threading.Event(), RETRY_PAUSE, RETRY_PAUSE_MAX, attempts=RETRIES)

    def open(self, cluster_id: int | None = None) -> int:
        """Learn what the target applied already; returns that commit_ts (0 when fresh)."""
        if not self._probed:
            self.cluster_id = cluster_id
            probe = self._driven(self.factory())
            with as_raised():
                probe.open(SinkContext(cluster_id=self.cluster_id or 0))
                try:
                    self.checkpoint = probe.flush()
                finally:
                    probe.close()
            self._probed = True
            log.info("consume: the target applied up to commit_ts %d", self.checkpoint)
        return self.checkpoint

    def _writer(self) -> SinkDriver:
        """The sink that writes, opened at the checkpoint with the schemas as of now."""
        if self.driver is None:
            driver = self._driven(self.factory())
            context = SinkContext.at(
                self.checkpoint, self.schemas.snapshot(), cluster_id=self.cluster_id or 0
            )
            with as_raised():
                driver.open(context)
            self.driver = driver
            log.info("consume: applying to %s after commit_ts %d", driver.name, self.checkpoint)
        return self.driver

    def close(self) -> None:
        driver, self.driver = self.driver, None
        if driver is not None:
            driver.close()

    def apply(self, items: Sequence[Released], upto_ts: int) -> int:
        """Apply ``items`` (apply order, all at or below ``upto_ts``) and move the target's
        checkpoint to ``upto_ts``; returns the durable position the sink reports.

        A retriable failure (the sink says so: a busy SQLite file, a lost MySQL connection) is
        retried by the driver (a failed flush writes every event of this call again), up to
        ``RETRIES`` times; anything else propagates as the sink raised it.
        """
        if not self._probed:
            self.open(cluster_of(items))
        events = list(self._events(items))
        if upto_ts > self.checkpoint:
            events.append(ResolvedEvent(upto_ts))
        if not events:
            _close_spilled(items)  # all of it applied by an earlier run
            return self.checkpoint
        driver = self._writer()
        with as_raised():
            driver.write_all(events, EVENTS_PER_WRITE)
            position = driver.flush()
        self.checkpoint = max(self.checkpoint, upto_ts)
        _close_spilled(items)  # applied and flushed: their rows on disk are no longer needed
        return position

    def _events(self, items: Sequence[Released]) -> Iterator[Event]:
        """The drainer events for ``items``: one TxnEvent per commit_ts, DDLEvents between."""
        rows: list[RowItem] = []
        for item in items:
            if isinstance(item, SpilledRows):
                if rows:
                    yield from self._txn(rows)
                    rows = []
                yield from self._spilled_txn(item)
            elif isinstance(item, DDLItem):
                if rows:
                    yield from self._txn(rows)
                    rows = []
                event = self._ddl(item)
                if event is not None:
                    yield event
            else:
                if rows and rows[0].commit_ts != item.commit_ts:
                    yield from self._txn(rows)
                    rows = []
                rows.append(item)
        if rows:
            yield from self._txn(rows)

    def _ddl(self, item: DDLItem) -> DDLEvent | None:
        change = schema_change(item.record)
        if item.commit_ts <= self.checkpoint:
            self.schemas.apply(change)
            self.stats.skipped += 1
            return None
        self._writer()  # opened with the schemas before this DDL
        before, after = self.schemas.apply(change)
        self.stats.ddl += 1
        return DDLEvent(item.start_ts, item.commit_ts, b"", item.query, change, before, after)

    def _txn(self, rows: list[RowItem]) -> Iterator[TxnEvent]:
        first = rows[0]
        if first.commit_ts <= self.checkpoint:
            self.stats.skipped += len(rows)
            return
        self._writer()
        changes = [self._row(item) for item in rows]
        self.stats.rows += len(changes)
        self.stats.transactions += 1
        yield TxnEvent(
            first.start_ts, first.commit_ts, b"", decode=lambda: iter(changes), row_count=len(changes)
        )

    def _spilled_txn(self, spilled: SpilledRows) -> Iterator[TxnEvent]:
        """The TxnEvent of a spilled commit_ts: its rows read back and converted as the sink asks."""
        first = spilled.first()
        if first is None:
            return
        if first.commit_ts <= self.checkpoint:
            self.stats.skipped += spilled.count
            return
        self._writer()
        self.stats.rows += spilled.count
        self.stats.transactions += 1

        schemas = self.schemas.copy()  # read lazily, after the DDL events that follow in this batch

        def changes() -> Iterator[RowChange]:
            return (self._row(item, schemas) for item in spilled.items())

        yield TxnEvent(first.start_ts, first.commit_ts, b"", decode=changes, row_count=spilled.count)

    def _row(self, item: RowItem, schemas: SchemaBook | None = None) -> RowChange:
        schema = (schemas or self.schemas).get(item.db, item.table)
        where = f"table {item.db}.{item.table} at commit_ts {item.commit_ts} (topic {item.where.topic})"
        if schema is None:
            raise ApplyError(
                f"{where}: no schema known: no CREATE TABLE event for it on the DDL topic "
                "(the table existed before the drainer started; create it in the target and see "
                "docs/consume.md)"
            )
        kind = OPS.get(item.op)
        if kind is None:
            raise ApplyError(f"{where}: unknown op {item.op!r}")
        try:
            before = self.values_of(schema, item.before) if item.before is not None else None
            after = self.values_of(schema, item.after) if item.after is not None else None
        except (KeyError, TypeError, ValueError) as exc:
            raise ApplyError(f"{where}: the row does not fit the table's schema: {exc}") from exc
        if (kind != "insert" and before is None) or (kind != "delete" and after is None):
            missing = "before" if kind != "insert" and before is None else "after"
            raise ApplyError(f"{where}: {kind} without its {missing} image (a key-only oversize message?)")
        return RowChange(cast(ChangeKind, kind), schema, before, after)
