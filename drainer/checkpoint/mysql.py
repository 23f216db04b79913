"""The MySQL checkpoint: one row per cluster in a table of the downstream itself.

::

    CREATE TABLE IF NOT EXISTS `bridge`.`checkpoint` (
        cluster_id      BIGINT UNSIGNED NOT NULL PRIMARY KEY,
        commit_ts       BIGINT NOT NULL,
        schema_snapshot LONGBLOB NOT NULL,
        consistent      TINYINT NOT NULL,
        updated_at      DATETIME(6) NOT NULL
    )

The row of the drainer's cluster says how far the downstream is durable
(``commit_ts``), the schema snapshot valid there, and ``consistent``: 0
while the drainer runs, 1 after a clean stop or a relay-log recovery (the
downstream then holds exactly the upstream's snapshot at ``commit_ts``, as
the original drainer's ``tidb_binlog.checkpoint`` describes). Rows of other
clusters in the same table are never read or written: the row is keyed by
cluster id.

A save is one ``REPLACE`` statement committed on its own, so the row is the
old one or the new one, never a mix. The database and table are created if
missing on first use. Errors another try may pass (:data:`bridge.mysql.RETRIABLE_CODES`: server gone,
lost connection, cannot connect, connection killed, lock wait, deadlock, a
read-only server during a switchover) are retried with backoff for up to
``retry-timeout`` seconds on a fresh connection, then raise
:class:`~drainer.checkpoint.base.RetriableCheckpointError`. :meth:`MySQLCheckpoint.interrupt`
(the drainer calls it on SIGTERM) ends such retries at once: the call in
progress is broken off (its socket shut down), and from then on each save
or load makes one attempt (connecting for at most ``STOPPING_CONNECT_TIMEOUT``)
and raises the retriable error if it fails, so a stopping drainer leaves the
row at the last position it could save instead of waiting out
``retry-timeout``; anything else
(no privilege, a table of another shape) raises
:class:`~drainer.checkpoint.base.CheckpointError` naming the table.

Options (``[checkpoint]`` with ``type = "mysql"``): see
:class:`MySQLCheckpointConfig`. ``dsn`` defaults to the drainer's
``[sink.mysql] dsn``; a password missing from it is read from the
environment variable ``BRIDGE_SINK_MYSQL_PASSWORD``. The password is never
logged nor part of an error message.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pymysql
import pymysql.err

from bridge import mysql
from bridge.config import build
from bridge.dsn import Dsn, parse_dsn
from bridge.errors import ConfigError
from bridge.mysql import is_retriable, quote_identifier
from bridge.retry import Backoff
from drainer.checkpoint.base import CheckpointError, CheckpointState, RetriableCheckpointError

log = logging.getLogger(__name__)

PASSWORD_ENV = "BRIDGE_SINK_MYSQL_PASSWORD"  # noqa: S105 - the variable's name, not a password
DEFAULT_SCHEMA = "bridge"
DEFAULT_TABLE = "checkpoint"
STOPPING_CONNECT_TIMEOUT = 1.0  # seconds a connection attempt may take once interrupted
_IDENTIFIER = re.compile(r"^[^`\x00/\\.]{1,64}$")

T = TypeVar("T")


@dataclass
class MySQLCheckpointConfig:
    """``[checkpoint]`` with ``type = "mysql"``: the checkpoint row in the MySQL downstream."""

    dsn: str = field(
        default="",
        metadata={
            "help": "mysql://user[:password]@host[:port]/ of the downstream; default: [sink.mysql] dsn. "
            "Password also from BRIDGE_SINK_MYSQL_PASSWORD",
            "secret": True,
        },
    )
    schema: str = field(default=DEFAULT_SCHEMA, metadata={"help": "database of the checkpoint table"})
    table: str = field(default=DEFAULT_TABLE, metadata={"help": "checkpoint table, one row per cluster id"})
    connect_timeout: float = field(
        default=5.0, metadata={"duration": True, "help": "timeout of one connection attempt"}
    )
    read_timeout: float = field(
        default=30.0,
        metadata={"duration": True, "help": "how long one read may wait: a silent downstream fails after it"},
    )
    write_timeout: float = field(
        default=30.0, metadata={"duration": True, "help": "how long one write may wait"}
    )
    retry_timeout: float = field(
        default=60.0,
        metadata={
            "duration": True,
            "help": "how long a load or save retries a lost/refused connection before failing",
        },
    )

    def validate(self) -> None:
        if not self.dsn:
            raise ConfigError(
                'checkpoint.dsn: required for type = "mysql" (or set [sink.mysql] dsn with the mysql sink)'
            )
        dsn = parse_dsn(self.dsn, key="checkpoint.dsn")
        if not dsn.is_mysql:
            raise ConfigError("checkpoint.dsn: expected mysql://user[:password]@host[:port]/")
        for key, value in (("schema", self.schema), ("table", self.table)):
            if not _IDENTIFIER.match(value):
                raise ConfigError(
                    f"checkpoint.{key}: expected 1..64 characters without backquote, dot, slash "
                    f"or NUL, got {value!r}"
                )
        if not 0.1 <= self.connect_timeout <= 300:
            raise ConfigError(
                f"checkpoint.connect-timeout: expected 0.1s..300s, got {self.connect_timeout:g}s"
            )
        for name, timeout in (("read-timeout", self.read_timeout), ("write-timeout", self.write_timeout)):
            if not 1 <= timeout <= 3600:
                raise ConfigError(f"checkpoint.{name}: expected 1s..3600s, got {timeout:g}s")
        if not 0 <= self.retry_timeout <= 3600:
            raise ConfigError(f"checkpoint.retry-timeout: expected 0s..3600s, got {self.retry_timeout:g}s")


class MySQLCheckpoint:
    """A :class:`~drainer.checkpoint.base.Checkpoint` in a MySQL table; see the module docstring."""

    def __init__(self, config: MySQLCheckpointConfig, cluster_id: int) -> None:
        self.config = config
        self.cluster_id = cluster_id
        self.dsn: Dsn = parse_dsn(config.dsn, key="checkpoint.dsn").with_password_from_env(PASSWORD_ENV)
        self.qualified = f"{quote_identifier(config.schema)}.{quote_identifier(config.table)}"
        # Identifiers quoted, values always parameters.
        self._select_sql = (
            f"SELECT commit_ts, schema_snapshot, consistent FROM {self.qualified} WHERE cluster_id = %s"  # noqa: S608
        )
        self._replace_sql = (
            f"REPLACE INTO {self.qualified} (cluster_id, commit_ts, schema_snapshot, consistent, updated_at) "  # noqa: S608
            "VALUES (%s, %s, %s, %s, NOW(6))"
        )
        self._conn: pymysql.connections.Connection[Any] | None = None
        self._created = False
        self._interrupted = threading.Event()

    @classmethod
    def from_options(cls, options: Mapping[str, Any], data_dir: Path, cluster_id: int) -> MySQLCheckpoint:
        """Built from ``[checkpoint]`` (``data_dir`` is unused: everything lives downstream)."""
        return cls(build(MySQLCheckpointConfig, options, prefix="checkpoint."), cluster_id)

    def describe(self) -> str:
        return f"mysql table {self.config.schema}.{self.config.table} at {self.dsn.redacted()}"

    # ------------------------------------------------------------------ protocol

    def load(self) -> CheckpointState | None:
        def select(conn: pymysql.connections.Connection[Any]) -> CheckpointState | None:
            with conn.cursor() as cursor:
                cursor.execute(self._select_sql, (self.cluster_id,))
                row = cursor.fetchone()
            conn.commit()  # end the read's snapshot, so the next load sees new rows
            if row is None:
                return None
            commit_ts, snapshot, consistent = row
            if not isinstance(commit_ts, int) or commit_ts < 0:
                raise CheckpointError(
                    f"checkpoint {self.describe()}: cluster {self.cluster_id} has commit_ts {commit_ts!r}"
                )
            return CheckpointState(int(commit_ts), bytes(snapshot or b""), bool(consistent))

        return self._run("load", select)

    def save(self, state: CheckpointState) -> None:
        def replace(conn: pymysql.connections.Connection[Any]) -> None:
            with conn.cursor() as cursor:
                cursor.execute(
                    self._replace_sql,
                    (self.cluster_id, state.commit_ts, state.schema, 1 if state.consistent else 0),
                )
            conn.commit()

        self._run("save", replace)
        log.debug(
            "checkpoint saved at commit_ts %d%s", state.commit_ts, " (consistent)" if state.consistent else ""
        )

    def close(self) -> None:
        self._disconnect()

    def interrupt(self) -> None:
        """Stop retrying (see the module docstring). Called from the event loop's thread while
        the sink thread may be blocked in a query: shutting the socket down wakes that read."""
        self._interrupted.set()
        conn = self._conn
        sock = getattr(conn, "_sock", None) if conn is not None else None
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)

    # ------------------------------------------------------------------ connection

    def _run(self, what: str, call: Callable[[pymysql.connections.Connection[Any]], T]) -> T:
        deadline = time.monotonic() + self.config.retry_timeout
        backoff = Backoff(initial=0.1, cap=2.0)
        while True:
            fresh = self._conn is None
            try:
                conn = self._connection()
                return call(conn)
            except pymysql.err.MySQLError as exc:
                self._disconnect()
                code = exc.args[0] if exc.args else "?"
                if not is_retriable(exc):
                    raise CheckpointError(
                        f"checkpoint {self.describe()}: {what} failed: "
                        f"MySQL error {code}: {mysql.server_message(exc)}"
                    ) from None
                # Stopping: one attempt on a fresh connection (interrupt() shuts the old one down).
                if self._interrupted.is_set() and fresh:
                    raise RetriableCheckpointError(
                        f"checkpoint {self.describe()}: {what} failed while stopping (not retried): "
                        f"MySQL error {code}: {mysql.server_message(exc)}"
                    ) from None
                delay = backoff.next_delay()
                if time.monotonic() + delay > deadline:
                    raise RetriableCheckpointError(
                        f"checkpoint {self.describe()}: {what} failed for {self.config.retry_timeout:g}s: "
                        f"MySQL error {code}: {mysql.server_message(exc)}"
                    ) from None
                log.warning(
                    "checkpoint %s: %s failed (MySQL error %s: %s); retrying in %.1fs",
                    self.describe(),
                    what,
                    code,
                    mysql.server_message(exc),
                    delay,
                )
                if not self._interrupted.is_set():
                    self._interrupted.wait(delay)

    def _connection(self) -> pymysql.connections.Connection[Any]:
        if self._conn is None:
            connect_timeout = self.config.connect_timeout
            if self._interrupted.is_set():
                connect_timeout = min(connect_timeout, STOPPING_CONNECT_TIMEOUT)
            config = self.config
            timeouts = mysql.MySQLTimeouts(connect_timeout, config.read_timeout, config.write_timeout)
            self._conn = mysql.connect(
                self.dsn,
                timeouts,
                database=None,  # the table is named with its schema
                autocommit=False,
            )
        if not self._created:
            self._create(self._conn)
            self._created = True
        return self._conn

    def _create(self, conn: pymysql.connections.Connection[Any]) -> None:
        with conn.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(self.config.schema)}")
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {self.qualified} ("
                "cluster_id BIGINT UNSIGNED NOT NULL PRIMARY KEY, "
                "commit_ts BIGINT NOT NULL, "
                "schema_snapshot LONGBLOB NOT NULL, "
                "consistent TINYINT NOT NULL, "
                "updated_at DATETIME(6) NOT NULL"
                ")"
            )
        conn.commit()

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(pymysql.err.Error):  # already closed by the server or network
                conn.close()
