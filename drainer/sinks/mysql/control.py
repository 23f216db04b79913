"""The MySQL sink's control connection (DDL runs on it) and its progress table.

``<progress-schema>.sink_progress`` holds one row per (cluster, worker):
the keyed workers' last committed commit_ts (what a replay must cover in
safe mode), the keyless worker's ``(commit_ts, seq)`` (keyless changes at or
below it are skipped: applied exactly once), the last DDL applied, and the
last DDL started (written before its statements run). A DDL starts only once
every earlier event committed, so either row proves every event before it
applied: a restart after a crash between a DDL and its "applied" row skips
the events before it (their images may name columns the DDL dropped) and
runs the DDL again (replay-safe on MariaDB: ``IF [NOT] EXISTS``). The control connection is
autocommit and idles between DDLs, so it is pinged before each use. Its reads wait at most the
sink's read timeout, except a DDL statement's, which waits ``ddl-read-timeout``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from bridge.mysql import read_timeout
from bridge.proto import row_pb2
from bridge.sink.errors import SinkApplyError, SinkError
from bridge.sink.events import DDLEvent
from drainer.sinks.mysql.connection import ConnectSettings, close_quietly, translate_error
from drainer.sinks.sql.mysql_ddl import MySQLDDL, quote

log = logging.getLogger(__name__)
Change = row_pb2.SchemaChange
KEYLESS_WORKER = -1  # progress row of the keyless path
DDL_WORKER = -2  # progress row of DDLs
DDL_STARTED_WORKER = -3  # progress row of the last DDL whose statements were sent


@dataclass(frozen=True)
class Progress:
    """What ``sink_progress`` says the downstream applied for one cluster."""

    keyless_done: tuple[int, int] = (0, 0)  # (commit_ts, seq) of the last keyless change
    ddl_done: int = 0  # commit_ts of the last DDL
    keyed_high: int = 0  # highest commit_ts a keyed worker committed
    ddl_started: int = 0  # commit_ts of the last DDL whose statements were sent (maybe not applied)


class Control:
    """The control connection of one sink; raises the driver's errors (``DB_ERRORS``) as they come."""

    def __init__(
        self, settings: ConnectSettings, progress_schema: str, ddl_read_timeout: float = 3600.0
    ) -> None:
        self.settings = settings
        self.ddl_read_timeout = ddl_read_timeout
        self.progress_schema = progress_schema
        self.progress_ref = f"{quote(progress_schema)}.`sink_progress`"
        self.ddl = MySQLDDL("mariadb")  # until the server's version is known
        self._conn: Any = None

    def conn(self, ping_errors: tuple[type[BaseException], ...]) -> Any:
        """The connection (made, or pinged when it exists; a failed ping makes a new one)."""
        if self._conn is not None:
            try:
                self._conn.ping(reconnect=False)
            except ping_errors:
                self.drop()
        if self._conn is None:
            self._conn = self.settings.connect(autocommit=True)
            with self._conn.cursor() as cur:
                cur.execute("SELECT VERSION()")
                version = str(cur.fetchone()[0]).lower()
            flavor = "mariadb" if "mariadb" in version else "tidb" if "tidb" in version else "mysql"
            self.ddl = MySQLDDL(flavor)
        return self._conn

    @property
    def connected(self) -> bool:
        return self._conn is not None

    @property
    def connection(self) -> Any:
        """The connection as it is (None when there is none); no ping."""
        return self._conn

    def drop(self) -> None:
        close_quietly(self._conn)
        self._conn = None

    def setup(self, conn: Any) -> None:
        """The progress schema and table, when missing."""
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS {quote(self.progress_schema)}")
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {self.progress_ref} ("
                "cluster_id BIGINT UNSIGNED NOT NULL, worker INT NOT NULL, "
                "commit_ts BIGINT UNSIGNED NOT NULL, seq BIGINT NOT NULL DEFAULT 0, "
                "updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) "
                "ON UPDATE CURRENT_TIMESTAMP(6), "
                "PRIMARY KEY (cluster_id, worker)) DEFAULT CHARSET=utf8mb4"
            )

    def progress_sql(self) -> str:
        """``(cluster_id, worker, commit_ts, seq)`` -> one progress row, inserted or updated."""
        return (
            f"INSERT INTO {self.progress_ref} (cluster_id, worker, commit_ts, seq) "  # noqa: S608 - quoted
            "VALUES (%s, %s, %s, %s) ON DUPLICATE KEY UPDATE commit_ts = VALUES(commit_ts), seq = VALUES(seq)"
        )

    def load(self, conn: Any, cluster_id: int) -> Progress:
        with conn.cursor() as cur:
            cur.execute(
                f"SELECT worker, commit_ts, seq FROM {self.progress_ref} WHERE cluster_id = %s",  # noqa: S608
                (cluster_id,),
            )
            rows = cur.fetchall()
        keyless, ddl, keyed, started = (0, 0), 0, 0, 0
        for worker, commit_ts, seq in rows:
            if worker == KEYLESS_WORKER:
                keyless = (int(commit_ts), int(seq))
            elif worker == DDL_WORKER:
                ddl = int(commit_ts)
            elif worker == DDL_STARTED_WORKER:
                started = int(commit_ts)
            else:
                keyed = max(keyed, int(commit_ts))
        return Progress(keyless, ddl, keyed, started)

    def run_ddl(
        self, event: DDLEvent, cluster_id: int, errors: tuple[type[BaseException], ...]
    ) -> SinkError | None:
        """Run ``event``'s statements and record it as progress; the retriable error it met (the
        connection dropped), else None. Raises :class:`SinkApplyError` when the downstream refuses it."""
        change = event.change
        where = (
            f"mysql sink: DDL at commit_ts {event.commit_ts} ({Change.Kind.Name(change.kind)} "
            f"{change.db}{'.' + change.table if change.table else ''})"
        )
        hint = (
            f"; to skip it, fix the downstream by hand and add {event.commit_ts} to the drainer's "
            "ignore-txn-commit-ts"
        )
        old = event.before if change.kind == Change.ALTER_TABLE else None
        try:
            statements = self.ddl.plan(change, old)
        except ValueError as exc:
            raise SinkApplyError(f"{where}: {exc}{hint}") from exc
        statement = ""
        try:
            conn = self.conn(errors)
            with conn.cursor() as cur:
                # Recorded first: a crash while the statements run (the server finishes a DDL whose
                # client died) or before the row below leaves proof that everything earlier applied.
                cur.execute(self.progress_sql(), (cluster_id, DDL_STARTED_WORKER, event.commit_ts, 0))
                with read_timeout(conn, self.ddl_read_timeout):
                    for statement in statements:
                        cur.execute(statement)
                cur.execute(self.progress_sql(), (cluster_id, DDL_WORKER, event.commit_ts, 0))
        except errors as exc:
            self.drop()
            error = translate_error(exc, where, statement.split("(", 1)[0][:200])
            if not error.retriable:
                raise SinkApplyError(f"{error}{hint}") from exc
            return error
        log.info("mysql sink: DDL at commit_ts %d applied: %s", event.commit_ts, "; ".join(statements)[:300])
        return None
