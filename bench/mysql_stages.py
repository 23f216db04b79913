"""µs per row change of each stage the drainer runs for the MySQL sink (``bench mysql``'s ``stages``).

The CPU stages run in the bench's own process, on a sample of the preload's
own transactions (the first ``SAMPLE_ROWS`` row changes, in commit order, as
the pumps serve them: Prewrite bytes with ``tp = Commit`` and the commit_ts),
through the drainer's own code, one stage after the other, each timed alone
(``time.process_time``, best of ``REPEAT``):

- ``build``: :func:`drainer.collect.pull.scan_header` and
  :meth:`drainer.sync.builder.EventBuilder.build` (the PrewriteValue parsed
  once for its tables and row counts; rows not decoded);
- ``decode``: iterating each event's ``changes()`` (row codec → Python values);
- ``plan``: what the sink's dispatcher does per change — the table's
  :class:`~drainer.sinks.mysql.translate.Table`, the causality keys and route
  (a conflict resets the keys, as the flush the sink would make), the
  :class:`~drainer.sinks.mysql.batch.Op` — and, per ``batch-rows`` of a
  worker, :func:`~drainer.sinks.mysql.batch.units` (grouping and statement text).

With ``worker-processes`` the dispatcher does less and the children the rest
(:mod:`drainer.sinks.mysql.wire`), measured the same way:

- ``route``: the dispatcher's work per change then — the row images undecoded
  (``raw()``), the key columns decoded alone, causality, the wire op (``decode``
  and ``plan`` are not its work any more; ``build`` still is);
- ``child``: a child's work per change, without its pipe — the wire ops of
  each ``batch-rows`` of a worker decoded, keyed again and planned
  (:class:`~drainer.sinks.mysql.wire.Plan`).

The server side comes from the drainer child of the timed run itself (its
``/metrics``): ``execute`` is the workers' time waiting for statement batches
(``bridge_sink_mysql_statement_seconds_sum``), ``commit`` for COMMITs, both
wall-clock seconds summed over the workers, per row change applied. The CPU
stages are the drainer's code without its threads, queues and GIL hand-offs;
their sum next to the drainer child's CPU µs per row (``cpu_us_per_row``)
shows what those cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from bridge.binlog import BinlogType
from bridge.proto import binlog_pb2, row_pb2
from bridge.sink.events import RawChange, RowChange, TxnEvent
from bridge.sink.schema import SchemaTracker
from drainer.collect.merger import PulledTxn
from drainer.collect.pull import scan_header
from drainer.sinks.mysql.batch import Op, units
from drainer.sinks.mysql.causality import Causality, Key
from drainer.sinks.mysql.translate import Tables
from drainer.sinks.mysql.wire import ChildTables, WireOp, sparse_keys
from drainer.sync.builder import EventBuilder
from drainer.sync.filter import TableFilter

SAMPLE_ROWS = 100_000
REPEAT = 3


@dataclass
class Sample:
    """The preload's first transactions as the pumps serve them: (payload, start_ts, commit_ts)."""

    limit: int = SAMPLE_ROWS
    ddl: tuple[bytes, int, int] | None = None
    txns: list[tuple[bytes, int, int]] = field(default_factory=list)
    rows: int = 0

    def add(self, binlog: binlog_pb2.Binlog, commit_ts: int, rows: int = 0) -> None:
        """Record ``binlog`` (a Prewrite) committed at ``commit_ts``; the first one is the DDL."""
        if self.ddl is not None and self.rows >= self.limit:
            return
        served = binlog_pb2.Binlog()
        served.CopyFrom(binlog)
        served.tp, served.commit_ts = BinlogType.Commit, commit_ts
        item = (served.SerializeToString(), binlog.start_ts, commit_ts)
        if self.ddl is None:
            self.ddl = item
        else:
            self.txns.append(item)
            self.rows += rows


def pulled(item: tuple[bytes, int, int]) -> PulledTxn:
    payload, start_ts, commit_ts = item
    header = scan_header(payload)
    return PulledTxn(start_ts, commit_ts, payload, header.ddl_job_id > 0, header.value_span)


def best(run: Callable[[], int]) -> tuple[float, int]:
    """The least CPU seconds of ``REPEAT`` calls of ``run``, and what it returned (rows)."""
    seconds, rows = float("inf"), 0
    for _ in range(REPEAT):
        began = time.process_time()
        rows = run()
        seconds = min(seconds, time.process_time() - began)
    return seconds, rows


def stage_costs(sample: Sample, worker_count: int, batch_rows: int, batch_updates: bool) -> dict[str, float]:
    """CPU µs per row change of ``build``, ``decode`` and ``plan`` over ``sample``."""
    if sample.ddl is None or not sample.txns:
        return {}
    txns = sorted(sample.txns, key=lambda t: t[2])

    def builder() -> EventBuilder:
        built = EventBuilder(SchemaTracker(), TableFilter())
        assert sample.ddl is not None
        built.build(pulled(sample.ddl))
        return built

    def build() -> int:
        events = build_events(builder(), txns)
        return sum(e.row_count for e in events)

    events = build_events(builder(), txns)
    changes = [list(e.changes()) for e in events]

    def decode() -> int:
        return sum(sum(1 for _ in e.changes()) for e in events)

    def plan() -> int:
        return plan_changes(events, changes, worker_count, batch_rows, batch_updates)

    batches: list[list[WireOp]] = []

    def route() -> int:
        batches.clear()
        return route_raw(events, worker_count, batch_rows, batches)

    def child() -> int:
        tables = ChildTables()
        tables.add(1, txns_schema(events).SerializeToString())
        for wire in batches:
            tables.plan(wire, batch_rows, batch_updates)()
        return sum(len(wire) for wire in batches)

    costs = {}
    stages = (("build", build), ("decode", decode), ("plan", plan), ("route", route), ("child", child))
    for name, run in stages:
        seconds, rows = best(run)
        costs[name] = round(seconds / max(1, rows) * 1e6, 2)
    return costs


def build_events(builder: EventBuilder, txns: list[tuple[bytes, int, int]]) -> list[TxnEvent]:
    events = []
    for item in txns:
        event = builder.build(pulled(item)).event
        if isinstance(event, TxnEvent):
            events.append(event)
    return events


def plan_changes(
    events: list[TxnEvent],
    changes: list[list[RowChange]],
    worker_count: int,
    batch_rows: int,
    batch_updates: bool,
) -> int:
    """The dispatcher's work per change (see the module docstring), without workers; rows planned."""
    tables, causality = Tables(), Causality(worker_count)
    buffers: list[list[Op]] = [[] for _ in range(worker_count)]
    rows = 0
    for event, event_changes in zip(events, changes, strict=True):
        for change in event_changes:
            table = tables.get(change.table)
            keys = table.keys.keys(change.before, change.after)
            target = route_keys(causality, keys if table.keys.serial is None else (table.keys.serial, *keys))
            buffer = buffers[target]
            buffer.append(
                Op(change.kind, table.writer, change.before, change.after, event.commit_ts, False, 0, keys)
            )
            if len(buffer) >= batch_rows:
                units(buffer, batch_rows, batch_updates)
                buffers[target] = []
            rows += 1
    for buffer in buffers:
        if buffer:
            units(buffer, batch_rows, batch_updates)
    return rows


def route_keys(causality: Causality, keys: Sequence[Key]) -> int:
    """The worker for ``keys``; a conflict resets the keys, as the flush the sink would make."""
    target = causality.route(keys)
    if target is None:
        causality.reset()
        target = causality.route(keys)
        assert target is not None
    return target


def txns_schema(events: list[TxnEvent]) -> row_pb2.TableSchema:
    """The bench table's schema, as the events' rows are encoded with."""
    return next(raw(events[0]))[1]


def raw(event: TxnEvent) -> Iterator[RawChange]:
    assert event.raw is not None, "the bench's events come from EventBuilder, which gives raw rows"
    return event.raw()


def route_raw(events: list[TxnEvent], worker_count: int, batch_rows: int, out: list[list[WireOp]]) -> int:
    """The dispatcher's work per change with worker processes (see the module docstring): wire
    ops per worker, each ``batch_rows`` of them appended to ``out``; rows routed."""
    tables, causality = Tables(), Causality(worker_count)
    buffers: list[list[WireOp]] = [[] for _ in range(worker_count)]
    rows = 0
    for event in events:
        for kind, schema, before, after, codec in raw(event):
            table = tables.get(schema)
            target = route_keys(causality, sparse_keys(table, codec, before, after))
            buffer = buffers[target]
            buffer.append((1, kind, before, after, event.commit_ts, False))
            if len(buffer) >= batch_rows:
                out.append(buffer)
                buffers[target] = []
            rows += 1
    out.extend(buffer for buffer in buffers if buffer)
    return rows


def server_costs(metrics: dict[str, float], rows: int) -> dict[str, float]:
    """Wall µs per row change the workers waited for statements and COMMITs (from ``/metrics``)."""
    return {
        "execute": round(metrics.get("bridge_sink_mysql_statement_seconds_sum", 0.0) / max(1, rows) * 1e6, 2),
        "commit": round(metrics.get("bridge_sink_mysql_commit_seconds_sum", 0.0) / max(1, rows) * 1e6, 2),
    }
