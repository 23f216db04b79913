"""``PumpClientConfig``: how a producer reaches the pump cluster.

Loaded like every bridge config (:func:`bridge.config.build` / ``load``), so a
producer's TOML may hold a ``[pump-client]`` table with these keys::

    strategy = "range"          # range | hash | score
    write-timeout = "15s"
    rpc-timeout = "3s"
    retry-backoff = "50ms"
    retry-backoff-max = "1s"
    max-errors = 3
    probe-interval = "1s"
    batch-max = 512
    batch-max-bytes = 4194304
    max-inflight-batches = 2
    batch-linger = "20ms"       # while busy, a batch waits up to this long for more; 0 = never
    chunk-bytes = 4194304       # a larger transaction travels in parts; 0 = never
    max-pending-txns = 200000
    discovery-wait = "5s"
    cluster-id = 0              # 0 = ask the meta service

    [pump-client.security]     # TLS to the pumps and the meta service
    ssl-ca = "..."
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from bridge.errors import ConfigError
from bridge.grpcutil import KeepaliveConfig, SecurityConfig

Strategy = Literal["range", "hash", "score"]

# The smallest chunk-bytes: a part also carries a binlog's fields, and parts of
# a few hundred bytes would make a transaction thousands of calls.
MIN_CHUNK_BYTES = 1024


def _duration(default: float, help_text: str) -> float:
    return field(default=default, metadata={"duration": True, "help": help_text})


@dataclass
class PumpClientConfig:
    """Routing, retry, probing and batching of the pump client."""

    strategy: Strategy = field(
        default="range",
        metadata={"help": "how a Prewrite picks its pump: range (round robin), hash (start_ts), score"},
    )
    write_timeout: float = _duration(
        15.0, "how long one write_binlog call may retry before giving up (Prewrite: NoPumpAvailable)"
    )
    rpc_timeout: float = _duration(
        3.0, "how long one call to a pump may take before the pump counts as failed"
    )
    meta_timeout: float = _duration(
        15.0,
        "how long one request to the meta service (timestamps, the registry) may look for a leader "
        "and retry before it fails with MetaUnavailable: long enough to ride out a meta restart",
    )
    retry_backoff: float = _duration(0.05, "pause after every pump failed a binlog once; doubles per round")
    retry_backoff_max: float = _duration(1.0, "upper bound of the retry pause")
    max_errors: int = field(
        default=3, metadata={"help": "consecutive failed calls that move a pump to the unavailable list"}
    )
    probe_interval: float = _duration(1.0, "how often each unavailable pump is probed with an empty binlog")
    batch_max: int = field(default=512, metadata={"help": "most binlogs in one WriteBinlogs call"})
    batch_max_bytes: int = field(
        default=4 * 1024 * 1024, metadata={"help": "most payload bytes in one WriteBinlogs call"}
    )
    max_inflight_batches: int = field(
        default=2, metadata={"help": "WriteBinlogs calls in flight per pump; more binlogs wait and coalesce"}
    )
    batch_linger: float = _duration(
        0.02,
        "while other calls of this client are in progress, a WriteBinlogs batch or a GetTimestamps "
        "call waits for more before it leaves: 5 ms, growing with the calls in progress to this long "
        "with 64 or more of them (a lone caller never waits); 0 = never wait",
    )
    chunk_bytes: int = field(
        default=4 * 1024 * 1024,
        metadata={
            "help": "a DML Prewrite whose row changes serialize to more bytes is written in parts "
            "(PrewriteChunk binlogs) of at most this size; 0 = never split"
        },
    )
    max_pending_txns: int = field(
        default=200_000,
        metadata={
            "help": "start_ts -> pump routes kept for Commit/Rollback; the oldest are forgotten beyond"
        },
    )
    discovery_wait: float = _duration(5.0, "long-poll time of one registry ListNodes call")
    cluster_id: int = field(default=0, metadata={"help": "the cluster id to send; 0 = ask the meta service"})
    keepalive: KeepaliveConfig = field(default_factory=KeepaliveConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def validate(self) -> None:
        positive = {
            "write-timeout": self.write_timeout,
            "rpc-timeout": self.rpc_timeout,
            "meta-timeout": self.meta_timeout,
            "probe-interval": self.probe_interval,
            "discovery-wait": self.discovery_wait,
            "max-errors": self.max_errors,
            "batch-max": self.batch_max,
            "batch-max-bytes": self.batch_max_bytes,
            "max-inflight-batches": self.max_inflight_batches,
            "max-pending-txns": self.max_pending_txns,
        }
        for key, value in positive.items():
            if value <= 0:
                raise ConfigError(f"{key}: must be greater than 0, got {value!r}")
        if not 0 <= self.batch_linger <= 1:
            raise ConfigError(f"batch-linger: must be between 0 and 1s, got {self.batch_linger}s")
        if self.retry_backoff_max < self.retry_backoff:
            raise ConfigError(
                f"retry-backoff-max: must be at least retry-backoff ({self.retry_backoff}s), "
                f"got {self.retry_backoff_max}s"
            )
        if self.chunk_bytes != 0 and self.chunk_bytes < MIN_CHUNK_BYTES:
            raise ConfigError(
                f"chunk-bytes: must be 0 (never split a transaction) or at least {MIN_CHUNK_BYTES}, "
                f"got {self.chunk_bytes!r}"
            )
        if self.cluster_id < 0:
            raise ConfigError(f"cluster-id: must not be negative, got {self.cluster_id}")
        self.security.validate()
