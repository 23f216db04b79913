"""Prometheus metrics of the MySQL sink (``bridge_sink_mysql_*``), in the default registry.

Labels are small sets: ``table`` is ``db.table``, ``kind`` a change kind,
``reason`` why all workers flushed. Counters are added per batch, not per row.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

ROWS = Counter(
    "bridge_sink_mysql_rows_total",
    "Row changes applied downstream (statements executed, not yet necessarily committed), "
    "by table (db.table) and kind (insert, update, delete)",
    ["table", "kind"],
)
BATCH_ROWS = Histogram(
    "bridge_sink_mysql_batch_rows",
    "Row changes per statement batch (one multi-row statement or one multi-statement round trip)",
    buckets=(1, 2, 5, 10, 50, 100, 250, 500, 1000, 5000),
)
STATEMENT_SECONDS = Histogram(
    "bridge_sink_mysql_statement_seconds",
    "Time one statement batch took downstream (apply latency of a batch)",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0),
)
COMMIT_SECONDS = Histogram(
    "bridge_sink_mysql_commit_seconds",
    "Time one worker's COMMIT took",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0),
)
FLUSHES = Counter(
    "bridge_sink_mysql_flushes_total",
    "Times every worker was made to commit, by reason: flush (the drainer asked), conflict (a change's "
    "keys were held by two workers), ddl (before a DDL), keys (too many keys held)",
    ["reason"],
)
RETRIES = Counter(
    "bridge_sink_mysql_retries_total",
    "Retriable failures (deadlock, lock wait, lost connection...) by scope: worker (one worker applied "
    "its open transaction again), sink (every worker rolled back; the unflushed events are written again)",
    ["scope"],
)
DEADLOCKS = Counter(
    "bridge_sink_mysql_deadlocks_total",
    "Deadlocks (error 1213) a worker met while applying; each cost a rollback and a retry of its open "
    "transaction (also counted in bridge_sink_mysql_retries_total)",
)
SKIPPED = Counter(
    "bridge_sink_mysql_skipped_total",
    "Changes not applied because the downstream has them already: keyless rows and DDLs at or below "
    "the progress the sink recorded",
    ["what"],
)
SAFE_MODE = Gauge(
    "bridge_sink_mysql_safe_mode", "1 while the sink writes in safe mode (REPLACE, DELETE+REPLACE)"
)
ACTIVE_WORKERS = Gauge(
    "bridge_sink_mysql_active_workers",
    "Workers new keys are spread over: as many as the last flush window gave batch-rows changes to",
)
