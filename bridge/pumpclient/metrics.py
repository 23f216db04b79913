"""Prometheus metrics of the pump client (the process-wide default registry)."""

from __future__ import annotations

from functools import cache

from prometheus_client import Counter, Gauge, Histogram

WRITES = Counter(
    "bridge_pump_client_writes_total",
    "Binlogs sent to pumps, by pump, binlog type and result (ok, failed, rejected)",
    ["pump", "type", "result"],
)
WRITE_SECONDS = Histogram(
    "bridge_pump_client_write_seconds",
    "Time one write_binlog call took, retries included",
    ["type"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
BATCH_SIZE = Histogram(
    "bridge_pump_client_batch_size",
    "Binlogs per WriteBinlogs call",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
)
AVAILABLE_PUMPS = Gauge(
    "bridge_pump_client_available_pumps",
    "Pumps in the available list (online, alive in the registry, not failing)",
)
COMMIT_UNSENT = Counter(
    "bridge_pump_client_commit_unsent_total",
    "Commit/Rollback binlogs that no attempt delivered within write-timeout; "
    "the Prewrite's pump resolves them after max_txn_timeout",
)


# Label lookups cost microseconds on a path that runs per binlog: cache the children.
@cache
def write_seconds(kind: str) -> Histogram:
    return WRITE_SECONDS.labels(type=kind)


@cache
def writes(pump: str, kind: str, result: str) -> Counter:
    return WRITES.labels(pump=pump, type=kind, result=result)
