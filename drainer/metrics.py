"""Prometheus metrics of the drainer, in the process-wide default registry.

Every drainer metric is defined here once; ``GET /metrics`` on the status
address exports them. Label values are small sets: a pump's node id, a
``db.table`` name, a change kind, an event type, a place an error happened
(named beside each metric) — never a ts, a key or an error message.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

CHECKPOINT_TS = Gauge(
    "bridge_drainer_checkpoint_ts",
    "commit_ts of the last saved checkpoint: every transaction at or below it is durable downstream",
)
LAG_SECONDS = Gauge(
    "bridge_drainer_lag_seconds",
    "Wall-clock seconds between now and the physical time of the checkpoint ts",
)
RESOLVED_TS = Gauge(
    "bridge_drainer_resolved_ts",
    "The merge's resolved ts: every transaction of every pump at or below it has been merged",
)
ROWS = Counter(
    "bridge_drainer_rows_total",
    "Row changes handed to the sink, by table (db.table) and kind (insert, update, delete)",
    ["table", "kind"],
)
EVENTS = Counter(
    "bridge_drainer_events_total",
    "Merged transactions by what became of them: txn, ddl, resolved (events handed to the sink); "
    "filtered (no table of it is replicated), ignored (ignore-txn-commit-ts)",
    ["type"],
)
DUPLICATES = Counter(
    "bridge_drainer_duplicates_total",
    "Pulled transactions dropped because they were already merged (re-sent or held by two pumps)",
)
PUMP_WATERMARK = Gauge(
    "bridge_drainer_pump_watermark",
    "The position of each merged pump: no transaction at or below it is still to come from it",
    ["pump"],
)
PUMP_BUFFERED_BYTES = Gauge(
    "bridge_drainer_pump_buffered_bytes",
    "Payload bytes pulled from each pump and waiting to be merged",
    ["pump"],
)
CHUNKED_TXNS = Counter(
    "bridge_drainer_chunked_txns_total",
    "Transactions pulled in chunks (their parts gathered on disk before the merge)",
)
SPILLED_BYTES = Counter(
    "bridge_drainer_spilled_bytes_total",
    "Bytes of chunked transactions' parts written to the spill directory",
)
PULLED_MESSAGES = Counter(
    "bridge_drainer_pulled_messages_total",
    "PullBinlogs stream messages received, by pump",
    ["pump"],
)
ERRORS = Counter(
    "bridge_drainer_errors_total",
    "Errors by where they happened: pull, spill (the spill-dir could not take a chunked transaction's "
    "parts; retried), registry, heartbeat, sink (retried), checkpoint (a save that may pass: retried at the "
    "next interval), fatal (stopped the drainer), http",
    ["where"],
)
SINK_WRITE_SECONDS = Histogram(
    "bridge_drainer_sink_write_seconds",
    "Time one sink.write(batch) took",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0),
)
SINK_FLUSH_SECONDS = Histogram(
    "bridge_drainer_sink_flush_seconds",
    "Time one sink.flush() took",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0),
)
QUEUED_EVENTS = Gauge(
    "bridge_drainer_queued_events",
    "Events built and waiting for the sink thread",
)
