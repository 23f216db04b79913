"""Binlog events -> whole upstream transactions, their rows encoded as the pumps take them.

A transaction is what lies between a GTID event (or ``BEGIN``) and its
``XID`` event (or ``COMMIT`` for non-transactional engines). Its row events
are converted (:mod:`bridge.apps.capture.values`), encoded with the table's
row codec and collected per table, in the order the upstream made them, into
``TableMutation`` builders — one per table, ordered by first change, as the
SQL producer collects a transaction. A query event other than
BEGIN/COMMIT is a DDL (or a statement the capture ignores).

:func:`transactions` yields, in binlog order:

- :class:`RowsTxn` at each commit — its mutations (maybe none: a transaction
  of unselected tables still moves the position), the position just after
  it and the upstream commit time;
- :class:`DdlEvent` for each other query event, with the position after it;
- :class:`Idle` when the source sends a heartbeat between transactions, with the
  position of the heartbeat (the binlog's end).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pymysqlreplication.event import (  # type: ignore[import-untyped]
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (  # type: ignore[import-untyped]
    DeleteRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from bridge.apps.capture.config import CaptureConfig
from bridge.apps.capture.position import Position
from bridge.apps.capture.tables import TableCatalog, TableEntry
from bridge.binlog import TableMutationBuilder
from bridge.proto import binlog_pb2


@dataclass
class RowsTxn:
    mutations: list[binlog_pb2.TableMutation]
    rows: int
    position: Position
    timestamp: int  # upstream commit time, Unix seconds


@dataclass
class DdlEvent:
    db: str
    sql: str
    position: Position
    timestamp: int


@dataclass
class Idle:
    """The source sent a heartbeat: it has nothing newer than ``position``."""

    position: Position


Item = RowsTxn | DdlEvent | Idle


@dataclass
class _Open:
    """The transaction being read."""

    gtid: str = ""
    builders: dict[str, TableMutationBuilder] = field(default_factory=dict)
    rows: int = 0

    def builder(self, name: str, table_id: int) -> TableMutationBuilder:
        found = self.builders.get(name)
        if found is None or found.table_id != table_id:
            found = self.builders[name] = TableMutationBuilder(table_id)
        return found


class Transactions:
    """Reads ``stream`` from ``start``; iterate for :class:`RowsTxn` and :class:`DdlEvent`."""

    def __init__(self, stream: Any, start: Position, catalog: TableCatalog, config: CaptureConfig) -> None:
        self._stream = stream
        self._position = start
        self.catalog = catalog
        self._config = config
        self._entries: dict[int, TableEntry | None] = {}  # binlog table-map id -> entry (None: not captured)
        self._open = _Open()
        self._handlers: dict[type, Callable[[Any], Item | None]] = {
            WriteRowsEvent: self._inserts,
            UpdateRowsEvent: self._updates,
            DeleteRowsEvent: self._deletes,
            XidEvent: self._commit,
            QueryEvent: self._query,
            HeartbeatLogEvent: self._heartbeat,
            GtidEvent: self._gtid,
            MariadbGtidEvent: self._gtid,
        }

    def forget_tables(self) -> None:
        """After a DDL: look the tables of later row events up again."""
        self._entries.clear()

    def __iter__(self) -> Iterator[Item]:
        for event in self._stream:
            handler = self._handlers.get(type(event))
            if handler is None:
                continue  # rotate: the stream keeps the file name
            item = handler(event)
            if item is not None:
                yield item

    def _here(self, gtid: str) -> Position:
        return self._position.after(self._stream.log_file, self._stream.log_pos, gtid)

    def _heartbeat(self, event: Any) -> Idle | None:
        """Between transactions, a heartbeat's coordinates (the stream's, which the reader updates
        from it) are the source's binlog end: every event before it was read, including events
        that end no transaction here (MariaDB's binlog checkpoints, filtered schemas' statements),
        so the position moves there, and an idle source shows no lag."""
        if self._open.gtid or self._open.rows:
            return None
        self._position = self._here("")
        return Idle(self._position)

    def _gtid(self, event: Any) -> None:
        self._open = _Open(gtid=str(event.gtid))

    def _commit(self, event: Any) -> RowsTxn:
        done, self._open = self._open, _Open()
        self._position = self._here(done.gtid)
        mutations = [b.build() for b in done.builders.values() if len(b)]
        return RowsTxn(mutations, done.rows, self._position, int(event.timestamp))

    def _query(self, event: Any) -> RowsTxn | DdlEvent | None:
        sql = event.query if isinstance(event.query, str) else bytes(event.query).decode("utf-8", "replace")
        word = sql.strip().split(None, 1)[0].upper() if sql.strip() else ""
        if word == "BEGIN":
            return None
        if word == "COMMIT":
            return self._commit(event)
        done, self._open = self._open, _Open()
        self._position = self._here(done.gtid)
        schema = event.schema if isinstance(event.schema, str) else bytes(event.schema).decode()
        return DdlEvent(schema, sql, self._position, int(event.timestamp))

    def _entry(self, event: Any) -> TableEntry | None:
        key = event.table_id
        if key in self._entries:
            return self._entries[key]
        entry = None
        if self._config.selects(event.schema, event.table):
            entry = self.catalog.entry(event.schema, event.table, [c.name for c in event.columns])
        self._entries[key] = entry
        return entry

    def _inserts(self, event: Any) -> None:
        self._whole_rows(event, "insert")

    def _deletes(self, event: Any) -> None:
        self._whole_rows(event, "delete")

    def _whole_rows(self, event: Any, kind: str) -> None:
        """Inserts and deletes: one image per row (the after image, or the before image)."""
        entry = self._entry(event)
        if entry is None:
            return
        builder = self._open.builder(f"{event.schema}.{event.table}", entry.table_id)
        add_all = builder.insert_all if kind == "insert" else builder.delete_all
        encode, convert = entry.encode, entry.converter
        rows = event.rows
        add_all([encode(convert(row["values"], row["none_sources"])) for row in rows])
        self._open.rows += len(rows)

    def _updates(self, event: Any) -> None:
        entry = self._entry(event)
        if entry is None:
            return
        builder = self._open.builder(f"{event.schema}.{event.table}", entry.table_id)
        encode, convert = entry.encode, entry.converter  # encode_update is the two images' encode
        rows = event.rows
        images = []
        for row in rows:
            images.append(encode(convert(row["before_values"], row["before_none_sources"])))
            images.append(encode(convert(row["after_values"], row["after_none_sources"])))
        builder.update_all(images)
        self._open.rows += len(rows)
