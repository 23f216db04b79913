"""The ``[sink.mysql]`` table: :class:`MySQLSinkConfig` (every key in docs/configuration.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from bridge.dsn import Dsn, parse_dsn
from bridge.errors import ConfigError

PASSWORD_ENV = "BRIDGE_SINK_MYSQL_PASSWORD"  # noqa: S105 - the variable's name
DEFAULT_SQL_MODE = "NO_AUTO_VALUE_ON_ZERO,STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION"
AUTO_MIN_CORES = 4  # "auto" keeps the workers in the drainer's process below this many cores
AUTO_CORES_PER_PROCESS = 4
AUTO_MAX_PROCESSES = 4


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def auto_processes(cores: int, worker_count: int) -> int:
    """``worker-processes = "auto"``: 0 below ``AUTO_MIN_CORES`` cores, else one process per
    ``AUTO_CORES_PER_PROCESS`` cores, at most ``AUTO_MAX_PROCESSES`` and ``worker_count`` (why these
    numbers: docs/mysql-sink.md, *Worker processes*)."""
    if cores < AUTO_MIN_CORES:
        return 0
    return max(1, min(cores // AUTO_CORES_PER_PROCESS, AUTO_MAX_PROCESSES, worker_count))


@dataclass
class MySQLSinkConfig:
    dsn: str = field(
        default="",
        metadata={
            "help": "downstream server, mysql://user[:password]@host:port/ (required; the password may "
            "come from BRIDGE_SINK_MYSQL_PASSWORD instead)",
            "secret": True,
        },
    )
    worker_count: int = field(
        default=16, metadata={"help": "worker threads (one connection each) for keyed tables"}
    )
    worker_processes: int | str = field(
        default="auto",
        metadata={
            "help": "child processes the keyed workers run in (worker w in process w % N), so decoding, "
            "statement text and client work use more than one core; 0: worker threads in the drainer's "
            'process; "auto": 0 below 4 usable cores, else one per 4 cores, at most 4 (docs/mysql-sink.md)'
        },
    )
    batch_rows: int = field(default=500, metadata={"help": "row changes per multi-row statement"})
    txn_rows: int = field(
        default=4096,
        metadata={"help": "row changes a worker applies before it commits (also on every flush)"},
    )
    batch_updates: bool = field(
        default=True,
        metadata={
            "help": "UPDATEs of tables with a key as one DELETE of the old keys + one multi-row INSERT "
            "(several times faster; the row is rewritten whole, so columns only the downstream has get their "
            "defaults); false: one UPDATE per row"
        },
    )
    serial_unique_tables: bool = field(
        default=True,
        metadata={
            "help": "every change of a table with a secondary unique index goes to one worker per flush "
            "window, so workers never deadlock on that index's next-key locks; false: spread by row keys "
            "(more parallel on one large such table; deadlocks are retried)"
        },
    )
    safe_mode: bool = field(
        default=False,
        metadata={"help": "always write in safe mode (INSERT as REPLACE, UPDATE as DELETE+REPLACE)"},
    )
    safe_mode_duration: float = field(
        default=60.0, metadata={"duration": True, "help": "safe mode for this long after every start"}
    )
    retry_max: float = field(
        default=10.0, metadata={"duration": True, "help": "cap of the backoff between reconnect attempts"}
    )
    connect_timeout: float = field(default=5.0, metadata={"duration": True, "help": "connect timeout"})
    read_timeout: float = field(
        default=120.0,
        metadata={
            "duration": True,
            "help": "how long the answer to one statement of a batch (or its COMMIT) may take: a "
            "blackholed or stalled downstream is reported after it (0: no limit); above the "
            "server's lock wait timeout (50s by default); a DSN's ?read_timeout= overrides it",
        },
    )
    ddl_read_timeout: float = field(
        default=3600.0,
        metadata={
            "duration": True,
            "help": "how long the answer to one DDL statement may take (a long ALTER TABLE); 0: no limit",
        },
    )
    write_timeout: float = field(default=60.0, metadata={"duration": True, "help": "socket write timeout"})
    progress_schema: str = field(
        default="bridge", metadata={"help": "database of the sink's progress table sink_progress"}
    )
    sql_mode: str = field(
        default=DEFAULT_SQL_MODE,
        metadata={"help": "session sql_mode of every connection (keep NO_AUTO_VALUE_ON_ZERO: id 0 stays 0)"},
    )
    foreign_key_checks: bool = field(
        default=False,
        metadata={"help": "session foreign_key_checks; off because workers apply tables out of order"},
    )

    def validate(self) -> None:
        if not self.dsn:
            raise ConfigError('sink.mysql.dsn: required, e.g. dsn = "mysql://bridge@127.0.0.1:3306/"')
        parsed = parse_dsn(self.dsn, key="sink.mysql.dsn")
        if not parsed.is_mysql:
            raise ConfigError("sink.mysql.dsn: expected mysql://user[:password]@host:port/")
        for key, value in (("worker-count", self.worker_count), ("batch-rows", self.batch_rows)):
            if not 1 <= value <= 1024 * (1 if key == "worker-count" else 64):
                raise ConfigError(f"sink.mysql.{key}: out of range, got {value}")
        processes = self.worker_processes
        if isinstance(processes, str) and processes != "auto":
            raise ConfigError(
                f'sink.mysql.worker-processes: "auto" or a number 0..worker-count, got {processes!r}'
            )
        if isinstance(processes, int) and not 0 <= processes <= self.worker_count:
            raise ConfigError(
                f"sink.mysql.worker-processes: 0 (threads) up to worker-count ({self.worker_count}) "
                f'or "auto", got {processes}'
            )
        if self.txn_rows < 1:
            raise ConfigError(f"sink.mysql.txn-rows: must be at least 1, got {self.txn_rows}")
        if not self.progress_schema or "`" in self.progress_schema:
            raise ConfigError("sink.mysql.progress-schema: a database name without backticks")
        if "NO_BACKSLASH_ESCAPES" in self.sql_mode.upper():
            raise ConfigError("sink.mysql.sql-mode: NO_BACKSLASH_ESCAPES is not supported (text is escaped)")
        for key, timeout in (
            ("read-timeout", self.read_timeout),
            ("ddl-read-timeout", self.ddl_read_timeout),
        ):
            if timeout < 0 or (timeout and timeout < 1):
                raise ConfigError(f"sink.mysql.{key}: at least 1s (or 0 for no limit), got {timeout:g}s")

    def processes(self) -> int:
        """``worker-processes`` as a number: ``"auto"`` resolved for this machine (:func:`auto_processes`)."""
        if isinstance(self.worker_processes, int):
            return self.worker_processes
        return auto_processes(usable_cores(), self.worker_count)

    def parsed_dsn(self) -> Dsn:
        return parse_dsn(self.dsn, key="sink.mysql.dsn").with_password_from_env(PASSWORD_ENV)
