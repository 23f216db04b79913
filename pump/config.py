"""Configuration of ``binlog-bridge pump``: one TOML file, flags on top.

::

    addr = "127.0.0.1:8250"            # gRPC listen address (the Pump service)
    advertise-addr = ""                # what producers and drainers dial; default = addr
    node-id = ""                       # registry id; default "pump-<advertise-addr>"
    label = ""                         # registry label (producers may route by it)
    meta = "127.0.0.1:8248"            # meta service members, comma-separated
    data-dir = "./var/pump"            # value log, index and the disk the guard watches
    heartbeat-interval = "2s"          # registry heartbeat; the TTL is 3x this
    join-timeout = "1m"                # how long start waits for every drainer to acknowledge Notify
    max-txn-timeout = "10m"            # a Prewrite unpaired this long is resolved through [resolver]
    fake-binlog-interval = "200ms"     # idle watermark cadence
    gc = "7d"                          # keep binlogs this long and until every drainer read them; 0 = forever
    max-retention = "0"                # older ones go even if a drainer has not read them; 0 = never
    stop-write-at-available-space = 10737418240   # bytes; below it Prewrites are refused
    status-addr = "127.0.0.1:8251"     # HTTP status, metrics and state control
    max-message-size = 134217728       # bytes; the largest gRPC message (and so binlog) taken or sent
    timestamp-slack = "1s"             # binlog timestamps beyond the TSO's by more are refused

    [storage]                          # the storage engine, see pump.storage.config.StorageConfig

    [resolver]                         # lost commits: how to ask the producer side
    type = "mysql"                     # none | mysql
    dsn = "mysql://binlog@10.0.0.5:3306/shop"
    # password: in the DSN, here, or (preferably) in env BRIDGE_RESOLVER_PASSWORD

    [security]                         # TLS for gRPC and HTTP, see bridge.grpcutil.SecurityConfig

The storage engine's own settings (``[storage]``) are defined beside the
engine, in :mod:`pump.storage.config`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from bridge.config import cluster_token_field, format_duration
from bridge.dsn import parse_mysql_dsn
from bridge.errors import ConfigError
from bridge.grpcutil import DEFAULT_MAX_MESSAGE_BYTES, KeepaliveConfig, SecurityConfig
from bridge.nodeconfig import NodeAddressing
from pump.storage.config import StorageConfig

DEFAULT_ADDR = "127.0.0.1:8250"
DEFAULT_STATUS_ADDR = "127.0.0.1:8251"
DEFAULT_META = "127.0.0.1:8248"
GIB = 1 << 30
DEFAULT_STOP_WRITE_BYTES = 10 * GIB
PASSWORD_ENV = "BRIDGE_RESOLVER_PASSWORD"  # noqa: S105 - the variable's name, not a password
MAX_NODE_ID_LEN = 128
MIN_MESSAGE_BYTES = 1 << 20
MAX_MESSAGE_BYTES = (1 << 31) - 1  # gRPC keeps message limits in a signed 32-bit int
_TABLE_NAME_RE = re.compile(r"^[A-Za-z0-9_$]{1,64}$")

ResolverType = Literal["none", "mysql", "sqlite"]


@dataclass
class ResolverConfig:
    """``[resolver]``: how an unpaired Prewrite is resolved after ``max-txn-timeout``."""

    type: ResolverType = field(
        default="none",
        metadata={
            "help": "mysql or sqlite: look start_ts up in the upstream's status table; "
            "none: discard unpaired Prewrites after max-txn-timeout"
        },
    )
    dsn: str = field(
        default="",
        metadata={
            "help": "the upstream: mysql://user[:password]@host[:port]/database or sqlite:///path/file.db",
            "secret": True,
        },
    )
    password: str = field(
        default="",
        metadata={"help": f"upstream password when not in the DSN; else env {PASSWORD_ENV}", "secret": True},
    )
    table: str = field(default="bridge_txn_status", metadata={"help": "status table: start_ts -> commit_ts"})
    interval: float = field(
        default=5.0, metadata={"duration": True, "help": "how often unpaired Prewrites are looked for"}
    )
    timeout: float = field(
        default=5.0, metadata={"duration": True, "help": "connect/read timeout of one status lookup"}
    )

    def validate(self) -> None:
        if self.type != "none" and not self.dsn:
            raise ConfigError(f'resolver.dsn: required when resolver.type = "{self.type}"')
        if self.type == "sqlite":
            if not self.dsn.startswith("sqlite:"):
                raise ConfigError(
                    f"resolver.dsn: expected sqlite:///path/file.db with type sqlite, got {self.dsn!r}"
                )
        elif self.dsn and not self.dsn.startswith("sqlite:"):  # type none may name either form
            parse_mysql_dsn(self.dsn, key="resolver.dsn")
        if not _TABLE_NAME_RE.match(self.table):
            raise ConfigError(f"resolver.table: expected a plain table name, got {self.table!r}")
        if not 0.05 <= self.interval <= 3600:
            raise ConfigError(f"resolver.interval: expected 50ms..1h, got {self.interval:g}s")
        if not 0.1 <= self.timeout <= 600:
            raise ConfigError(f"resolver.timeout: expected 100ms..10m, got {self.timeout:g}s")

    def effective_password(self, env: Mapping[str, str] | None = None) -> str | None:
        """The password from this table or the environment; None lets the DSN's stand."""
        if self.password:
            return self.password
        return (os.environ if env is None else env).get(PASSWORD_ENV) or None


@dataclass
class PumpConfig(NodeAddressing):
    """The pump server: stores binlogs and serves them to drainers in commit order."""

    NODE_KIND = "pump"

    addr: str = field(default=DEFAULT_ADDR, metadata={"help": "gRPC listen address host:port"})
    advertise_addr: str = field(
        default="", metadata={"help": "address producers and drainers dial; default addr"}
    )
    node_id: str = field(
        default="",
        metadata={
            "help": "registry id, unique in the cluster (a second live one is refused); "
            "default pump-<advertise-addr>"
        },
    )
    label: str = field(default="", metadata={"help": "registry label"})
    meta: str = field(
        default=DEFAULT_META, metadata={"help": "meta service members host:port, comma-separated"}
    )
    data_dir: str = field(default="./var/pump", metadata={"help": "where binlogs are stored"})
    heartbeat_interval: float = field(
        default=2.0, metadata={"duration": True, "help": "registry heartbeat period; TTL = 3x this"}
    )
    join_timeout: float = field(
        default=60.0,
        metadata={"duration": True, "help": "start fails when a drainer has not acknowledged Notify by then"},
    )
    max_txn_timeout: float = field(
        default=600.0,
        metadata={"duration": True, "help": "a Prewrite unpaired this long is resolved through [resolver]"},
    )
    fake_binlog_interval: float = field(
        default=0.2,
        metadata={"duration": True, "help": "period of fake binlogs (watermarks) on an idle pump"},
    )
    pull_interval: float = field(
        default=0.01,
        metadata={
            "duration": True,
            "help": "a pull stream reads and sends new binlogs at most this often: one that comes "
            "sooner after the last read waits for the rest (an idle stream sends at once); 0 = every change",
        },
    )
    gc: float = field(
        default=7 * 86400.0,
        metadata={
            "duration": True,
            "help": 'retention of sealed segments (e.g. "7d", "36h"), never past a registered drainer\'s '
            "checkpoint; 0 = forever",
        },
    )
    max_retention: float = field(
        default=0.0,
        metadata={
            "duration": True,
            "help": "binlogs older than this are deleted even when a drainer has not checkpointed them "
            "(logged, naming the drainer); 0 = never: GC waits for every drainer",
        },
    )
    stop_write_at_available_space: int = field(
        default=DEFAULT_STOP_WRITE_BYTES,
        metadata={"help": "bytes free in data-dir below which Prewrites are refused"},
    )
    status_addr: str = field(
        default=DEFAULT_STATUS_ADDR,
        metadata={"help": 'HTTP status/metrics/control address; "8251" = 127.0.0.1:8251'},
    )
    max_message_size: int = field(
        default=DEFAULT_MAX_MESSAGE_BYTES,
        metadata={"help": "largest gRPC message in bytes, either way; a binlog must fit in one"},
    )
    timestamp_slack: float = field(
        default=1.0,
        metadata={
            "duration": True,
            "help": "a binlog whose start_ts/commit_ts is beyond what the TSO has issued "
            "plus this is refused (pump.guard)",
        },
    )
    storage: StorageConfig = field(default_factory=StorageConfig)
    resolver: ResolverConfig = field(default_factory=ResolverConfig)
    cluster_token: str = cluster_token_field()
    keepalive: KeepaliveConfig = field(default_factory=KeepaliveConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def validate(self) -> None:
        self.validate_addressing()
        self._validate_identity()
        if not self.data_dir:
            raise ConfigError("data-dir: must not be empty")
        self._validate_durations()
        if self.stop_write_at_available_space < 0:
            raise ConfigError(
                "stop-write-at-available-space: expected bytes >= 0, "
                f"got {self.stop_write_at_available_space}"
            )
        if not MIN_MESSAGE_BYTES <= self.max_message_size <= MAX_MESSAGE_BYTES:
            raise ConfigError(
                f"max-message-size: expected {MIN_MESSAGE_BYTES}..{MAX_MESSAGE_BYTES} bytes, "
                f"got {self.max_message_size}"
            )

    def _validate_identity(self) -> None:
        node_id = self.node_id
        if node_id and (
            len(node_id) > MAX_NODE_ID_LEN
            or "/" in node_id
            or not node_id.isprintable()
            or any(c.isspace() for c in node_id)
        ):
            raise ConfigError(
                f"node-id: expected 1..{MAX_NODE_ID_LEN} printable characters without '/' or spaces, "
                f"got {node_id!r}"
            )
        if len(self.label) > MAX_NODE_ID_LEN or not self.label.isprintable():
            raise ConfigError(
                f"label: expected up to {MAX_NODE_ID_LEN} printable characters, got {self.label!r}"
            )

    def _validate_durations(self) -> None:
        ranges = {
            "heartbeat-interval": (self.heartbeat_interval, 0.05, 60.0),
            "join-timeout": (self.join_timeout, 0.1, 3600.0),
            "max-txn-timeout": (self.max_txn_timeout, 0.05, 7 * 86400.0),
            "fake-binlog-interval": (self.fake_binlog_interval, 0.01, 60.0),
            "timestamp-slack": (self.timestamp_slack, 0.0, 3600.0),
            "pull-interval": (self.pull_interval, 0.0, 1.0),
        }
        for key, (value, low, high) in ranges.items():
            if not low <= value <= high:
                raise ConfigError(
                    f"{key}: expected {format_duration(low)}..{format_duration(high)}, got {value:g}s"
                )
        if self.gc and self.gc < 60:
            raise ConfigError(f"gc: expected 0 (keep forever) or at least 1m, got {self.gc:g}s")
        if self.max_retention and (not self.gc or self.max_retention < self.gc):
            raise ConfigError(
                f"max-retention: expected 0 (unset) or at least gc ({self.gc:g}s), "
                f"got {self.max_retention:g}s"
            )
