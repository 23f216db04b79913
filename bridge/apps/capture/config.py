"""``binlog-bridge capture`` configuration: the ``[capture]`` and ``[pump-client]`` tables.

::

    [capture]
    upstream = "mysql://repl@127.0.0.1:3306/?ssl-mode=disabled"  # password: BRIDGE_UPSTREAM_PASSWORD
    meta = "127.0.0.1:8248"          # the meta service (TSO and pump registry)
    data-dir = "var/capture"         # the position journal
    server-id = 1001                 # this replica's id, unique among the server's replicas
    databases = ["shop"]             # databases captured (required)
    tables = []                      # "db.table" names; empty = every table of `databases`
    snapshot = "initial"             # initial | never | when-needed
    snapshot-chunk = 1000            # rows per snapshot binlog
    position = "auto"                # auto | gtid | file
    status-addr = "127.0.0.1:8262"   # GET /status, GET /metrics; "" = none
    fsync = true                     # fsync the position journal on every record
    heartbeat = "1s"                 # the server's heartbeat while the binlog is idle

Every error names its key (``capture.snapshot: expected one of ...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from bridge.config import check_addr
from bridge.dsn import Dsn, parse_mysql_dsn
from bridge.errors import ConfigError
from bridge.meta.client import DEFAULT_ADDR
from bridge.pumpclient import PumpClientConfig

SnapshotMode = Literal["initial", "never", "when-needed"]
PositionMode = Literal["auto", "gtid", "file"]

SYSTEM_DATABASES = frozenset(("mysql", "information_schema", "performance_schema", "sys"))
_NAME = re.compile(r"^[^.\s`]+\.[^.\s`]+$")


@dataclass
class CaptureConfig:
    """``[capture]``: where to read, what to capture, where to keep the position."""

    upstream: str = field(
        default="", metadata={"help": "mysql://user@host:port/ of the source; password from the environment"}
    )
    meta: str = field(default=DEFAULT_ADDR, metadata={"help": "meta service address(es), comma separated"})
    data_dir: str = field(default="var/capture", metadata={"help": "where the position journal is kept"})
    server_id: int = field(default=1001, metadata={"help": "replica server id, unique on the source"})
    databases: list[str] = field(default_factory=list, metadata={"help": "databases to capture"})
    tables: list[str] = field(default_factory=list, metadata={"help": "db.table names; empty = all"})
    snapshot: SnapshotMode = field(default="initial", metadata={"help": "initial | never | when-needed"})
    snapshot_chunk: int = field(default=1000, metadata={"help": "rows per snapshot binlog"})
    position: PositionMode = field(default="auto", metadata={"help": "auto | gtid | file"})
    status_addr: str = field(default="127.0.0.1:8262", metadata={"help": "status/metrics HTTP; empty = off"})
    fsync: bool = field(default=True, metadata={"help": "fsync the position journal on every record"})
    heartbeat: float = field(default=1.0, metadata={"duration": True, "help": "source heartbeat period"})

    def validate(self) -> None:
        if not self.upstream:
            raise ConfigError("capture.upstream: required (mysql://user@host:port/)")
        self.dsn()
        if not self.databases:
            raise ConfigError("capture.databases: name at least one database to capture")
        for db in self.databases:
            if db.lower() in SYSTEM_DATABASES or not db or "." in db:
                raise ConfigError(f"capture.databases: {db!r} cannot be captured")
        for name in self.tables:
            if not _NAME.match(name) or name.split(".")[0] not in self.databases:
                raise ConfigError(
                    f"capture.tables: {name!r} must be db.table with db one of capture.databases"
                )
        if not 0 < self.server_id < 2**32:
            raise ConfigError(f"capture.server-id: must be in 1..4294967295, got {self.server_id}")
        if self.snapshot_chunk < 1:
            raise ConfigError(f"capture.snapshot-chunk: must be at least 1, got {self.snapshot_chunk}")
        if not self.meta.strip():
            raise ConfigError("capture.meta: required (host:port of the meta service)")
        if self.status_addr:
            check_addr(self.status_addr, "capture.status-addr")
        if self.heartbeat <= 0:
            raise ConfigError("capture.heartbeat: must be positive")

    def dsn(self) -> Dsn:
        """The upstream DSN with the password from ``BRIDGE_UPSTREAM_PASSWORD`` when it has none."""
        return parse_mysql_dsn(self.upstream, key="capture.upstream").with_password_from_env()

    def selects(self, db: str, table: str) -> bool:
        """Whether rows of ``db.table`` are captured (the bridge's own bookkeeping tables never are)."""
        if db not in self.databases or table in ("bridge_txn_status", "bridge_schema"):
            return False
        return not self.tables or f"{db}.{table}" in self.tables


@dataclass
class CaptureFile:
    """The whole TOML file of ``binlog-bridge capture --config``."""

    capture: CaptureConfig = field(default_factory=CaptureConfig)
    pump_client: PumpClientConfig = field(default_factory=lambda: PumpClientConfig(strategy="hash"))
