"""The events every sink of the contract suite is fed, and the rows they must leave downstream.

:class:`Workload` builds real binlog events (:class:`tests.support.binlog_events.EventStream`)
and, beside them, a model of the upstream: every table's rows after each commit_ts. A check
writes the model as of a position into a SQLite file (:meth:`Workload.upstream_at`), the
upstream that ``bridge.apps.diff`` compares a downstream with, as the end-to-end tests do.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from bridge.proto import row_pb2
from bridge.sink.events import Event, ResolvedEvent
from tests.support.binlog_events import EventStream, table_schema

T = row_pb2.ColumnType
Row = tuple[object, ...]
BIG = 900  # bytes of text in a "large" row: a few of them pass the file sink's 4096-byte rotation


@dataclass
class TableModel:
    columns: list[str]
    declared: list[str]  # SQLite declared types of the expected upstream
    rows: dict[object, Row] = field(default_factory=dict)  # by primary key (the first column)
    # each row as last written, as a cache of after-images holds them: an ALTER empties the table's
    images: dict[object, dict[str, object]] = field(default_factory=dict)


@dataclass
class Step:
    """One event and the model's tables right after it."""

    event: Event
    tables: dict[str, TableModel]


class Workload:
    """Events on database ``db``: tables ``k`` (id, v; later + extra) and ``m`` (id, w), created
    and altered between row changes; ``steps`` pairs each event with the model after it."""

    def __init__(self, db: str) -> None:
        self.db = db
        self.stream = EventStream()
        self.steps: list[Step] = []
        self._tables: dict[str, TableModel] = {}

    # -- building -------------------------------------------------------------------

    def _record(self, event: Event) -> Event:
        snapshot = {
            name: TableModel(list(t.columns), list(t.declared), dict(t.rows), dict(t.images))
            for name, t in self._tables.items()
        }
        self.steps.append(Step(event, snapshot))
        return event

    def create_k(self) -> Event:
        schema = table_schema(self.db, "k", [("id", T.BIGINT), ("v", T.TEXT)], key=["id"], table_id=1)
        self._tables["k"] = TableModel(["id", "v"], ["BIGINT PRIMARY KEY", "TEXT"])
        return self._record(self.stream.create(schema))

    def create_m(self) -> Event:
        schema = table_schema(self.db, "m", [("id", T.BIGINT), ("w", T.TEXT)], key=["id"], table_id=2)
        self._tables["m"] = TableModel(["id", "w"], ["BIGINT PRIMARY KEY", "TEXT"])
        return self._record(self.stream.create(schema))

    def add_extra_to_k(self) -> Event:
        schema = self.stream.schema(self.db, "k")
        schema.columns.add(id=3, name="extra", type=T.INT, nullable=True)
        schema.max_column_id = 3
        table = self._tables["k"]
        table.columns.append("extra")
        table.declared.append("INT")
        table.rows = {key: (*row, None) for key, row in table.rows.items()}
        table.images = {}
        return self._record(self.stream.alter(schema))

    def txn(self, changes: list[tuple[str, str, Row | None, Row | None]]) -> Event:
        """``(kind, table, before, after)`` changes; ``before`` of an update or delete is looked up
        in the model when given as ``None`` (by ``after``'s key; a delete's ``after`` is then only
        that key)."""
        full = []
        for kind, name, before, after in changes:
            table = self._tables[name]
            rows = table.rows
            if kind != "insert" and before is None:
                assert after is not None
                before = rows[after[0]]
            if kind == "delete":
                after = None
            full.append((kind, f"{self.db}.{name}", before, after))
            if kind == "delete":
                assert before is not None
                del rows[before[0]]
                table.images.pop(before[0], None)
            else:
                assert after is not None
                rows[after[0]] = after
                table.images[after[0]] = dict(zip(table.columns, after, strict=True))
        return self._record(self.stream.txn(full))

    def delete(self, name: str, key: object) -> Event:
        return self.txn([("delete", name, self._tables[name].rows[key], None)])

    def resolved(self) -> Event:
        self.stream.ts += 10
        return self._record(ResolvedEvent(self.stream.ts))

    # -- the model --------------------------------------------------------------------

    @property
    def events(self) -> list[Event]:
        return [step.event for step in self.steps]

    def tables_at(self, position: int) -> dict[str, TableModel]:
        """The model's tables once every event at or below ``position`` is applied."""
        tables: dict[str, TableModel] = {}
        for step in self.steps:
            if step.event.commit_ts > position:
                break
            tables = step.tables
        return tables

    def upstream_at(self, path: Path, position: int) -> str:
        """The model at ``position`` as a SQLite file at ``path``; its DSN (database ``db``)."""
        path.unlink(missing_ok=True)
        conn = sqlite3.connect(path)
        try:
            for name, table in self.tables_at(position).items():
                columns = ", ".join(f'"{c}" {d}' for c, d in zip(table.columns, table.declared, strict=True))
                conn.execute(f'CREATE TABLE "{name}" ({columns})')
                marks = ", ".join("?" for _ in table.columns)
                conn.executemany(f'INSERT INTO "{name}" VALUES ({marks})', list(table.rows.values()))
            conn.commit()
        finally:
            conn.close()
        return f"sqlite://{path}?database={self.db}"


def phases(db: str) -> tuple[Workload, list[list[Event]]]:
    """The suite's workload in three batches: ``a`` small row changes, ``b`` large rows (they
    make the file sink rotate), ``c`` DDL between row changes; each ends with a resolved event."""
    w = Workload(db)
    a = [
        w.create_k(),
        w.txn([("insert", "k", None, (i, f"a{i}")) for i in range(1, 7)]),
        w.txn([("update", "k", None, (2, "a2-updated")), ("update", "k", None, (5, "a5-updated"))]),
        w.delete("k", 3),
        w.resolved(),
    ]
    b = [w.txn([("insert", "k", None, (10 + i, f"b{i}" + "x" * BIG))]) for i in range(6)]
    b += [w.txn([("update", "k", None, (1, "b-update" + "y" * BIG))]), w.delete("k", 12), w.resolved()]
    c = [
        w.add_extra_to_k(),
        w.txn([("update", "k", None, (1, "c1", 7)), ("insert", "k", None, (31, "c31", 31))]),
        w.create_m(),
        w.txn([("insert", "m", None, (1, "m1")), ("insert", "k", None, (32, "c32", None))]),
        w.txn([("insert", "m", None, (2, "m2")), ("delete", "k", None, (4,))]),
        w.txn([("update", "m", None, (1, "m1-updated")), ("update", "k", None, (31, "c31", 310))]),
        w.resolved(),
    ]
    return w, [a, b, c]
