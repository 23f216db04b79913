"""Prometheus metrics of the pump server, in the process-wide default registry.

Every pump metric is defined here, once, so the service, the storage engine,
the node and the resolver share them; ``GET /metrics`` on the status address
exports them. Label values are small closed sets (named beside each metric):
never a ts, a key or an error message.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

_LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    5.0,
)

WRITES = Counter(
    "bridge_pump_writes_total",
    "Binlogs written to this pump, by type (prewrite, commit, rollback, chunk: a part of a chunked "
    "transaction, fake) and result "
    "(ok; refused: the pump's state or disk guard; invalid: a malformed or unknown binlog; "
    "error: storage failed)",
    ["type", "result"],
)
WRITE_SECONDS = Histogram(
    "bridge_pump_write_seconds",
    "Time from receiving a write call to acknowledging its binlogs durable; one observation per call, type",
    ["type"],
    buckets=_LATENCY_BUCKETS,
)
WRITE_BATCH_SIZE = Histogram(
    "bridge_pump_write_batch_size",
    "Binlogs per group commit (one fsync)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096),
)
WRITE_CALLS = Counter(
    "bridge_pump_write_calls_total",
    "WriteBinlog and WriteBinlogs calls this pump answered (one gRPC call each, any number of binlogs)",
)
FSYNCS = Counter(
    "bridge_pump_storage_fsyncs_total",
    "fdatasync calls of the value log's group commits (none while storage.sync is off)",
)
WRITES_IN_FLIGHT = Gauge(
    "bridge_pump_writes_in_flight",
    "Writes admitted and not yet acknowledged",
)
PULL_ENTITIES = Counter(
    "bridge_pump_pull_entities_total",
    "Entities streamed to drainers by PullBinlogs, by kind (binlog, chunk: a part of a chunked "
    "transaction, watermark)",
    ["kind"],
)
PULL_MESSAGES = Counter(
    "bridge_pump_pull_messages_total",
    "PullBinlogs stream messages sent to drainers (each carries one or more entities)",
)
PULL_STREAMS = Gauge(
    "bridge_pump_pull_streams",
    "PullBinlogs streams open now",
)
WATERMARK = Gauge(
    "bridge_pump_watermark_ts",
    "Highest ts at which every transaction on this pump is final (paired or discarded)",
)
MAX_COMMIT_TS = Gauge(
    "bridge_pump_max_commit_ts",
    "Highest commit ts stored on this pump",
)
GC_TS = Gauge(
    "bridge_pump_gc_ts",
    "Segments holding only binlogs at or below this ts have been deleted",
)
DRAINER_BEHIND_GC = Gauge(
    "bridge_pump_drainer_behind_gc",
    "1 while a registered drainer's max_commit_ts is below this pump's gc ts (it lost binlogs), by drainer",
    ["drainer"],
)
STORAGE_BYTES = Gauge(
    "bridge_pump_storage_bytes",
    "Bytes of the value log and index in data-dir",
)
DISK_AVAILABLE_BYTES = Gauge(
    "bridge_pump_disk_available_bytes",
    "Bytes available to the pump on data-dir's file system",
)
PREWRITES_STOPPED = Gauge(
    "bridge_pump_prewrites_stopped",
    "1 while the disk guard refuses Prewrites (available space below stop-write-at-available-space)",
)
UNPAIRED_PREWRITES = Gauge(
    "bridge_pump_unpaired_prewrites",
    "Prewrites waiting for their Commit or Rollback",
)
LATE_COMMITS_REFUSED = Counter(
    "bridge_pump_late_commits_refused_total",
    "Commits refused because the pump would not deliver them, by reason (settled: the lost-commit "
    "resolver already settled the Prewrite; late: commit_ts at or below the watermark)",
    ["reason"],
)
LOST_COMMITS = Counter(
    "bridge_pump_lost_commits_total",
    "Prewrites unpaired after max-txn-timeout, by outcome (found: committed upstream, Commit written; "
    "discarded: not committed upstream)",
    ["outcome"],
)
ERRORS = Counter(
    "bridge_pump_errors_total",
    "Errors by kind (heartbeat, notify, resolver, lost_commit, storage, gc, http, ...)",
    ["kind"],
)
STATE = Gauge(
    "bridge_pump_state",
    "1 for the pump's current state, 0 for the others (joining, online, pausing, paused, closing, offline)",
    ["state"],
)
SCORE = Gauge(
    "bridge_pump_score",
    "The score this pump reports to the registry (0..1000; higher takes more Prewrites)",
)
