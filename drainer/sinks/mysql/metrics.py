"""Prometheus metrics of the MySQL sink (``bridge_sink_mysql_*``).

Registered once per :class:`~prometheus_client.CollectorRegistry`
(:func:`bridge.sink.batching.metrics_for`; the sink's context names it, the
process-wide one by default), so a sink opened again, or several sinks in one
process, share them. Labels are small sets: ``table`` is ``db.table``,
``kind`` a change kind, ``reason`` why all workers flushed. Counters are added
per batch, not per row.

A worker adds to :class:`WorkerMetrics` only: the sink's own metrics in the
sink's process, stand-ins that record in a worker process
(:mod:`drainer.sinks.mysql.procs` carries what they recorded to the sink's
process at every barrier).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry

from bridge.sink.batching import SinkMetrics


class CounterLike(Protocol):
    def labels(self, *labelvalues: str) -> CounterLike: ...

    def inc(self, amount: float = 1) -> None: ...


class HistogramLike(Protocol):
    def observe(self, amount: float) -> None: ...


@dataclass(frozen=True, slots=True)
class WorkerMetrics:
    """The metrics a worker adds to (the names are what a worker process reports them by)."""

    rows: CounterLike
    retries: CounterLike
    deadlocks: CounterLike
    statement_seconds: HistogramLike
    batch_rows: HistogramLike
    commit_seconds: HistogramLike


WORKER_COUNTERS = ("rows", "retries", "deadlocks")
WORKER_HISTOGRAMS = ("statement_seconds", "batch_rows", "commit_seconds")


class MySQLMetrics(SinkMetrics):
    """The sink's metrics in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        rows = self.counter(
            "bridge_sink_mysql_rows_total",
            "Row changes applied downstream (statements executed, not yet necessarily committed), "
            "by table (db.table) and kind (insert, update, delete)",
            "table",
            "kind",
        )
        batch_rows = self.histogram(
            "bridge_sink_mysql_batch_rows",
            "Row changes per statement batch (one multi-row statement or one multi-statement round trip)",
            (1, 2, 5, 10, 50, 100, 250, 500, 1000, 5000),
        )
        statement_seconds = self.histogram(
            "bridge_sink_mysql_statement_seconds",
            "Time one statement batch took downstream (apply latency of a batch)",
            (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0),
        )
        commit_seconds = self.histogram(
            "bridge_sink_mysql_commit_seconds",
            "Time one worker's COMMIT took",
            (0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
        )
        self.flushes = self.counter(
            "bridge_sink_mysql_flushes_total",
            "Times every worker was made to commit, by reason: flush (the drainer asked), conflict (a "
            "change's keys were held by two workers), ddl (before a DDL), keys (too many keys held)",
            "reason",
        )
        self.retries = self.counter(
            "bridge_sink_mysql_retries_total",
            "Retriable failures (deadlock, lock wait, lost connection...) by scope: worker (one worker "
            "applied its open transaction again), sink (every worker rolled back; the unflushed events "
            "are written again)",
            "scope",
        )
        deadlocks = self.counter(
            "bridge_sink_mysql_deadlocks_total",
            "Deadlocks (error 1213) a worker met while applying; each cost a rollback and a retry of its "
            "open transaction (also counted in bridge_sink_mysql_retries_total)",
        )
        self.skipped = self.counter(
            "bridge_sink_mysql_skipped_total",
            "Changes not applied because the downstream has them already: keyless rows and DDLs at or "
            "below the progress the sink recorded",
            "what",
        )
        self.safe_mode = self.gauge(
            "bridge_sink_mysql_safe_mode", "1 while the sink writes in safe mode (REPLACE, DELETE+REPLACE)"
        )
        self.active_workers = self.gauge(
            "bridge_sink_mysql_active_workers",
            "Workers new keys are spread over: as many as the last flush window gave batch-rows changes to",
        )
        self.worker = WorkerMetrics(
            rows, self.retries, deadlocks, statement_seconds, batch_rows, commit_seconds
        )
