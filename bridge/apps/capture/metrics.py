"""Prometheus metrics of ``binlog-bridge capture`` (``bridge_capture_*``)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

ROW_CHANGES = Counter(
    "bridge_capture_row_changes_total", "row changes written to the pumps, by source", ["source"]
)  # source: binlog | snapshot
TRANSACTIONS = Counter("bridge_capture_transactions_total", "upstream transactions written to the pumps")
DDL = Counter("bridge_capture_ddl_total", "DDL binlogs written (snapshot announcements included)")
SKIPPED = Counter(
    "bridge_capture_skipped_transactions_total", "upstream transactions with no change to a captured table"
)
LAG = Gauge("bridge_capture_lag_seconds", "now minus the upstream commit time of the last transaction read")
POSITION_TIME = Gauge(
    "bridge_capture_position_timestamp_seconds", "upstream commit time (Unix) of the last transaction written"
)
WRITE_SECONDS = Histogram(
    "bridge_capture_write_seconds",
    "time to write one binlog to the pumps, by kind",
    ["kind"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
)
ERRORS = Counter("bridge_capture_errors_total", "errors, by kind", ["kind"])
RESTARTS = Counter(
    "bridge_capture_stream_restarts_total", "times the binlog stream was opened again from the journal"
)
