"""Configuration of ``binlog-bridge drainer``: one TOML file, flags on top.

::

    addr = "127.0.0.1:8249"            # gRPC listen address (the Cistern service pumps Notify)
    advertise-addr = ""                # what pumps dial; default = addr
    node-id = ""                       # registry id; default "drainer-<advertise-addr>"
    meta = "127.0.0.1:8248"            # meta service members, comma-separated
    data-dir = "./var/drainer"         # checkpoint and sink files
    status-addr = "127.0.0.1:8252"     # HTTP /status and /metrics
    initial-commit-ts = 0              # where a drainer without a checkpoint starts; 0 = the beginning
    spill-dir = "spill"                # chunked transactions' parts (unlinked files; relative: in data-dir)

    [filter]                           # do-db, do-table, ignore-db, ignore-table, ignore-txn-commit-ts
    [skip]                             # commit-ts ranges, tables, unknown-table-ids (drainer.sync.skip)
    [checkpoint]                       # type = "file" | "mysql" (+ that type's keys)
    [relay]                            # dir = "" (off), max-file-size: the relay log (drainer.relay.sink)
    [sink]                             # type = "sqlite" | "file" | [...]; [sink.<type>] per sink
    [security]                         # TLS, see bridge.grpcutil.SecurityConfig

``[checkpoint]`` and ``[sink]`` hold a ``type`` and tables of the chosen
implementation's own keys, which that implementation checks
(:mod:`drainer.checkpoint`, :mod:`bridge.sink.registry`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.config import (
    build,
    cluster_token_field,
    merge_overrides,
    read_toml,
)
from bridge.errors import ConfigError
from bridge.grpcutil import DEFAULT_MAX_MESSAGE_BYTES, KeepaliveConfig, SecurityConfig
from bridge.nodeconfig import NodeAddressing
from drainer.sync.filter import TableFilter
from drainer.sync.route import RouteConfig, parse_routes
from drainer.sync.skip import SkipConfig

DEFAULT_ADDR = "127.0.0.1:8249"
DEFAULT_STATUS_ADDR = "127.0.0.1:8252"
DEFAULT_META = "127.0.0.1:8248"
MIB = 1 << 20


@dataclass
class FilterConfig:
    """``[filter]``: what is replicated and which transactions are skipped (drainer.sync.filter)."""

    do_db: list[str] = field(default_factory=list, metadata={"help": "replicate only these databases"})
    do_table: list[str] = field(
        default_factory=list, metadata={"help": 'replicate only these tables, "db.table"'}
    )
    ignore_db: list[str] = field(default_factory=list, metadata={"help": "never replicate these databases"})
    ignore_table: list[str] = field(
        default_factory=list, metadata={"help": 'never replicate these tables, "db.table"'}
    )
    ignore_txn_commit_ts: list[int] = field(
        default_factory=list, metadata={"help": "commit_ts of transactions (DML or DDL) to skip, logged"}
    )

    def validate(self) -> None:
        self.table_filter()
        for i, ts in enumerate(self.ignore_txn_commit_ts):
            if ts <= 0:
                raise ConfigError(
                    f"filter.ignore-txn-commit-ts[{i}]: expected a positive commit_ts, got {ts}"
                )

    def table_filter(self) -> TableFilter:
        return TableFilter(self.do_db, self.do_table, self.ignore_db, self.ignore_table)


@dataclass
class CheckpointConfig:
    """``[checkpoint]``: where the checkpoint is kept (drainer.checkpoint)."""

    type: str = field(default="file", metadata={"help": "file or mysql; the type's own keys sit beside it"})
    # Logged as <redacted> by bridge.config.describe: a dsn in it may hold a password.
    options: dict[str, Any] = field(default_factory=dict, init=False, repr=False, metadata={"secret": True})

    def table(self) -> dict[str, Any]:
        return {"type": self.type, **self.options}


@dataclass
class RelayConfig:
    """``[relay]``: the relay log, events stored locally before the sink applies them (drainer.relay.sink)."""

    dir: str = field(
        default="",
        metadata={"help": 'relay log directory (relative: in data-dir); "" = no relay log'},
    )
    max_file_size: int = field(
        default=10 * MIB, metadata={"help": "bytes after which the relay log starts a new file"}
    )

    def validate(self) -> None:
        if not 4096 <= self.max_file_size <= 1 << 40:
            raise ConfigError(
                f"relay.max-file-size: expected 4096..{1 << 40} bytes, got {self.max_file_size}"
            )

    @property
    def enabled(self) -> bool:
        return bool(self.dir)

    def directory(self, data_dir: Path) -> Path:
        """The relay directory (a relative ``dir`` is taken from ``data_dir``)."""
        return Path(data_dir) / self.dir


@dataclass
class SinkConfig:
    """``[sink]``: where the change stream goes; ``[sink.<type>]`` configures each sink."""

    type: str | list[str] = field(
        default="sqlite", metadata={"help": 'sink name, or a list of names: "sqlite", "file", ...'}
    )
    # Logged as <redacted> by bridge.config.describe: a sink's dsn may hold a password.
    tables: dict[str, dict[str, Any]] = field(
        default_factory=dict, init=False, repr=False, metadata={"secret": True}
    )

    @property
    def types(self) -> list[str]:
        return [self.type] if isinstance(self.type, str) else list(self.type)

    def validate(self) -> None:
        if not self.types or any(not t for t in self.types):
            raise ConfigError('sink.type: name at least one sink, e.g. type = "sqlite"')
        if len(set(self.types)) != len(self.types):
            raise ConfigError(f"sink.type: a sink is named twice in {self.types}")


def _positive(key: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ConfigError(f"{key}: expected {low:g}..{high:g}, got {value:g}")


@dataclass
class DrainerConfig(NodeAddressing):
    """The drainer: merges every pump's stream by commit_ts and drives the sink."""

    NODE_KIND = "drainer"

    addr: str = field(default=DEFAULT_ADDR, metadata={"help": "gRPC listen address host:port (Notify)"})
    advertise_addr: str = field(default="", metadata={"help": "address pumps dial; default addr"})
    node_id: str = field(
        default="",
        metadata={
            "help": "registry id, unique in the cluster (a second live one is refused); "
            "default drainer-<advertise-addr>"
        },
    )
    meta: str = field(
        default=DEFAULT_META, metadata={"help": "meta service members host:port, comma-separated"}
    )
    data_dir: str = field(default="./var/drainer", metadata={"help": "checkpoint and sink files"})
    status_addr: str = field(
        default=DEFAULT_STATUS_ADDR, metadata={"help": 'HTTP /status and /metrics; "8252" = 127.0.0.1:8252'}
    )
    initial_commit_ts: int = field(
        default=0, metadata={"help": "where a drainer without a checkpoint starts; 0 = from the beginning"}
    )
    heartbeat_interval: float = field(
        default=2.0, metadata={"duration": True, "help": "registry heartbeat period; TTL = 3x this"}
    )
    pump_unreachable_timeout: float = field(
        default=30.0,
        metadata={
            "duration": True,
            "help": "a pump nothing was pulled from for this long is shown and logged as unreachable "
            "(the merge still waits for it)",
        },
    )
    flush_interval: float = field(
        default=1.0, metadata={"duration": True, "help": "longest time written events wait for sink.flush()"}
    )
    checkpoint_interval: float = field(
        default=3.0, metadata={"duration": True, "help": "how often the checkpoint is saved (and after DDL)"}
    )
    resolved_interval: float = field(
        default=1.0, metadata={"duration": True, "help": "how often a resolved-ts event goes to the sink"}
    )
    txn_batch: int = field(default=256, metadata={"help": "most events per sink.write() call"})
    flush_events: int = field(default=4096, metadata={"help": "flush once this many events are unflushed"})
    flush_bytes: int = field(
        default=64 * MIB, metadata={"help": "flush once this many payload bytes are unflushed"}
    )
    pump_buffer_bytes: int = field(
        default=64 * MIB, metadata={"help": "payload bytes pulled per pump ahead of the merge"}
    )
    queue_bytes: int = field(
        default=64 * MIB, metadata={"help": "payload bytes of built events waiting for the sink thread"}
    )
    max_message_size: int = field(
        default=DEFAULT_MAX_MESSAGE_BYTES, metadata={"help": "largest gRPC message in bytes (and so binlog)"}
    )
    spill_dir: str = field(
        default="spill",
        metadata={"help": "where chunked transactions' parts are gathered (relative: in data-dir)"},
    )
    filter: FilterConfig = field(default_factory=FilterConfig)
    skip: SkipConfig = field(default_factory=SkipConfig)
    route: list[RouteConfig] = field(default_factory=list)  # [[route]], parsed by config_from_dict
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    relay: RelayConfig = field(default_factory=RelayConfig)
    sink: SinkConfig = field(default_factory=SinkConfig)
    cluster_token: str = cluster_token_field()
    keepalive: KeepaliveConfig = field(default_factory=KeepaliveConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def spill_directory(self) -> Path:
        """Where the parts of chunked transactions are gathered (a relative ``spill-dir`` is in data-dir)."""
        return Path(self.data_dir) / self.spill_dir

    def validate(self) -> None:
        self.validate_addressing()
        if not self.data_dir:
            raise ConfigError("data-dir: must not be empty")
        if not self.spill_dir:
            raise ConfigError('spill-dir: must not be empty (default "spill", in data-dir)')
        if self.initial_commit_ts < 0:
            raise ConfigError(f"initial-commit-ts: expected a commit_ts >= 0, got {self.initial_commit_ts}")
        if self.node_id and ("/" in self.node_id or not self.node_id.isprintable() or " " in self.node_id):
            raise ConfigError(
                f"node-id: expected printable characters without '/' or spaces, got {self.node_id!r}"
            )
        self._validate_tuning()

    def _validate_tuning(self) -> None:
        _positive("heartbeat-interval", self.heartbeat_interval, 0.05, 60)
        _positive("flush-interval", self.flush_interval, 0.001, 600)
        _positive("pump-unreachable-timeout", self.pump_unreachable_timeout, 0.1, 86400)
        _positive("checkpoint-interval", self.checkpoint_interval, 0.001, 3600)
        _positive("resolved-interval", self.resolved_interval, 0.001, 600)
        _positive("txn-batch", self.txn_batch, 1, 1 << 20)
        _positive("flush-events", self.flush_events, 1, 1 << 24)
        _positive("flush-bytes", self.flush_bytes, MIB, 1 << 40)
        _positive("pump-buffer-bytes", self.pump_buffer_bytes, MIB, 1 << 40)
        _positive("queue-bytes", self.queue_bytes, MIB, 1 << 40)
        _positive("max-message-size", self.max_message_size, MIB, (1 << 31) - 1)


def _split_table(data: Mapping[str, Any], key: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A table's plain keys and its sub-tables."""
    section = data.get(key, {})
    if not isinstance(section, Mapping):
        raise ConfigError(f"{key}: expected a table [{key}], got {section!r}")
    plain = {k: v for k, v in section.items() if not isinstance(v, Mapping)}
    tables = {k: dict(v) for k, v in section.items() if isinstance(v, Mapping)}
    return plain, tables


def config_from_dict(data: Mapping[str, Any]) -> DrainerConfig:
    """Build and check a :class:`DrainerConfig` from TOML data (flags merged in)."""
    rest = {k: v for k, v in data.items() if k not in ("sink", "checkpoint", "route")}
    sink_keys, sink_tables = _split_table(data, "sink")
    checkpoint_keys, checkpoint_tables = _split_table(data, "checkpoint")
    if checkpoint_tables:
        raise ConfigError(f"checkpoint.{next(iter(checkpoint_tables))}: unexpected table in [checkpoint]")
    config = build(DrainerConfig, rest)
    config.route = parse_routes(data.get("route"))
    config.sink = build(SinkConfig, sink_keys, prefix="sink.")
    config.sink.tables = sink_tables
    unknown = sorted(set(sink_tables) - set(config.sink.types))
    if unknown:
        raise ConfigError(f"sink.{unknown[0]}: a table for a sink that sink.type does not name")
    config.checkpoint = build(CheckpointConfig, {"type": checkpoint_keys.pop("type", "file")}, "checkpoint.")
    config.checkpoint.options = checkpoint_keys
    _default_checkpoint_dsn(config)
    return config


DEFAULT_MYSQL_SINK_DSN = "mysql://root@127.0.0.1:3306/"


def _default_checkpoint_dsn(config: DrainerConfig) -> None:
    """A MySQL checkpoint without ``dsn`` lives in the MySQL sink's downstream (``[sink.mysql] dsn``)."""
    options = config.checkpoint.options
    if config.checkpoint.type != "mysql" or "dsn" in options or "mysql" not in config.sink.types:
        return
    dsn = config.sink.tables.get("mysql", {}).get("dsn", DEFAULT_MYSQL_SINK_DSN)
    if isinstance(dsn, str):
        options["dsn"] = dsn


def load_config(path: Path | None, overrides: Mapping[str, Any] | None = None) -> DrainerConfig:
    """Load the drainer's config from an optional TOML file with flag overrides on top."""
    data = read_toml(path) if path is not None else {}
    data = merge_overrides(data, overrides or {})
    try:
        return config_from_dict(data)
    except ConfigError as exc:
        if path is not None:
            raise ConfigError(f"{path}: {exc}") from None
        raise
