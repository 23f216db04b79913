"""The MySQL/MariaDB upstream (pymysql).

Every session runs with ``autocommit`` on outside explicit transactions,
``time_zone = '+00:00'`` (so TIMESTAMP values read and written are UTC) and
READ COMMITTED isolation: the writer locks what it reads with ``SELECT ...
FOR UPDATE``, and READ COMMITTED takes no gap locks, so unrelated inserts do
not wait on each other. Row locks are held until COMMIT either way, which is
what orders conflicting transactions' commit_ts.

pymysql's exceptions become :class:`~bridge.producer.errors.UpstreamError`
here and nowhere else: deadlock (1213) and lock wait timeout (1205) are
:class:`UpstreamConflict`; client-side errors (2000+: no connection, lost
connection) are :class:`UpstreamUnavailable` and mark the session broken.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pymysql
import pymysql.err
from pymysql.constants import FIELD_TYPE
from pymysql.converters import conversions

from bridge import mysql
from bridge.dsn import Dsn
from bridge.errors import ConfigError
from bridge.producer import mysql_types
from bridge.producer.errors import UpstreamConflict, UpstreamError, UpstreamUnavailable
from bridge.producer.status import STATUS_TABLE
from bridge.producer.upstream import MYSQL, ColumnAdapter, Session
from bridge.proto import row_pb2

log = logging.getLogger(__name__)

_CLIENT_CODES_FROM = 2000  # CR_* client errors: the connection is unusable


def _bit_to_int(data: Any) -> Any:
    return int.from_bytes(data, "big")


# BIT values come back as ints: usable both by the row codec and as parameters
# that compare equal to the column (pymysql's bytes compare as strings).
_CONVERSIONS: dict[Any, Any] = {**conversions, FIELD_TYPE.BIT: _bit_to_int}


def _returning(version: str) -> frozenset[str]:
    """MariaDB 10.5 added INSERT ... RETURNING (DELETE ... RETURNING is older); MySQL has neither."""
    if "mariadb" not in version.lower():
        return frozenset()
    major, minor = (int(part) for part in version.split(".")[:2])
    return frozenset({"insert", "delete"}) if (major, minor) >= (10, 5) else frozenset({"delete"})


class MySQLSession:
    """One pymysql connection; see :class:`bridge.producer.upstream.Session`."""

    dialect = MYSQL

    def __init__(self, dsn: Dsn, connect_timeout: float) -> None:
        self.broken = False
        self.returning: frozenset[str] = frozenset()
        self._where = dsn.redacted()
        try:
            self._conn = mysql.connect(
                dsn,
                replace(mysql.DEFAULT_TIMEOUTS, connect_timeout=connect_timeout),
                autocommit=True,
                init_command="SET time_zone = '+00:00'",
                conv=_CONVERSIONS,
            )
            with self._conn.cursor() as cursor:
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        except pymysql.err.Error as exc:
            raise self._translate(exc, "connect") from exc

    def _translate(self, exc: pymysql.err.Error, what: str) -> UpstreamError:
        code = mysql.error_code(exc) or 0
        message = f"{self._where}: {what} failed: ({code}) {mysql.server_message(exc)}"
        if code in mysql.CONFLICT_CODES:
            return UpstreamConflict(message, code=code)
        if mysql.is_retriable(exc) or code >= _CLIENT_CODES_FROM:
            self.broken = True
            return UpstreamUnavailable(message, code=code)
        return UpstreamError(message, code=code)

    def _run(self, what: str, sql: str, params: Sequence[object]) -> Any:
        if self.broken:
            raise UpstreamUnavailable(f"{self._where}: the connection is broken")
        cursor = self._conn.cursor()
        try:
            cursor.execute(sql, list(params) if params else None)
        except pymysql.err.Error as exc:
            cursor.close()
            raise self._translate(exc, what) from exc
        return cursor

    def begin(self) -> None:
        self._run("BEGIN", "BEGIN", ()).close()

    def commit(self) -> None:
        self._run("COMMIT", "COMMIT", ()).close()

    def rollback(self) -> None:
        if self.broken:
            return
        try:
            self._run("ROLLBACK", "ROLLBACK", ()).close()
        except UpstreamError as exc:
            log.warning("%s", exc)

    def query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        cursor = self._run("query", sql, params)
        try:
            return list(cursor.fetchall())
        finally:
            cursor.close()

    def execute(self, sql: str, params: Sequence[object] = ()) -> int:
        cursor = self._run("statement", sql, params)
        cursor.close()
        return int(cursor.rowcount)

    def insert(self, sql: str, params: Sequence[object]) -> int:
        cursor = self._run("insert", sql, params)
        cursor.close()
        return int(cursor.lastrowid or 0)

    def thread_id(self) -> int:
        """The server's id of this connection (what ``KILL`` takes)."""
        return int(self._conn.thread_id())  # type: ignore[no-untyped-call]

    def close(self) -> None:
        try:
            self._conn.close()
        except pymysql.err.Error:
            log.debug("%s: closing an already broken connection", self._where)
        self.broken = True


class MySQLUpstream:
    """One MySQL/MariaDB database (the DSN's); see :class:`bridge.producer.upstream.Upstream`."""

    dialect = MYSQL
    transactional_ddl = False

    def __init__(self, dsn: Dsn, connect_timeout: float = 10.0) -> None:
        if not dsn.database:
            raise ConfigError(f"upstream {dsn.redacted()}: the DSN must name a database")
        self.dsn = dsn
        self.database = dsn.database
        self._connect_timeout = connect_timeout
        self._mariadb: bool | None = None
        self._returning: frozenset[str] = frozenset()

    def connect(self) -> MySQLSession:
        session = MySQLSession(self.dsn, self._connect_timeout)
        if self._mariadb is None:
            version = str(session.query("SELECT VERSION()")[0][0])
            self._mariadb = "mariadb" in version.lower()
            self._returning = _returning(version)
        session.returning = self._returning
        return session

    def describe(self) -> str:
        return f"mysql upstream {self.dsn.redacted()}"

    def bookkeeping_ddl(self) -> Sequence[str]:
        return (
            f"CREATE TABLE IF NOT EXISTS `{STATUS_TABLE}` "
            "(start_ts BIGINT NOT NULL PRIMARY KEY, commit_ts BIGINT NOT NULL) ENGINE=InnoDB",
            "CREATE TABLE IF NOT EXISTS `bridge_schema` ("
            "table_id BIGINT NOT NULL PRIMARY KEY, "
            "db VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, "
            "tbl VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, "
            "live TINYINT NOT NULL, version BIGINT NOT NULL, schema_pb MEDIUMBLOB NOT NULL, "
            "KEY by_name (db, tbl)) ENGINE=InnoDB",
        )

    def describe_table(self, session: Session, table: str) -> row_pb2.TableSchema | None:
        found = session.query(mysql_types.TABLE_SQL, [self.database, table])
        if not found:
            return None
        name, collation, charset, comment, options = found[0]
        json_names: set[str] = set()
        if self._mariadb:
            checks = session.query(mysql_types.MARIADB_JSON_SQL, [self.database, name])
            json_names = mysql_types.json_columns([str(r[0]) for r in checks])
        where = f"{self.database}.{name}"
        columns = [
            mysql_types.column_from_info(row, where, json_names, bool(self._mariadb))
            for row in session.query(mysql_types.COLUMNS_SQL, [self.database, name])
        ]
        indexes = mysql_types.indexes_from_info(session.query(mysql_types.INDEXES_SQL, [self.database, name]))
        partitioning = ""
        if "partitioned" in str(options or "").lower():
            shown = session.query(f"SHOW CREATE TABLE {MYSQL.quote(self.database)}.{MYSQL.quote(name)}")
            partitioning = mysql_types.partition_clause(str(shown[0][1]))
        return row_pb2.TableSchema(
            db=self.database,
            table=name,
            columns=columns,
            indexes=indexes,
            charset=charset or "",
            collation=collation or "",
            comment=str(comment or ""),
            partitioning=partitioning,
        )

    def adapters(self, schema: row_pb2.TableSchema) -> tuple[ColumnAdapter, ...]:
        return tuple(mysql_types.adapter_for(c) for c in schema.columns)

    def table_for_index(self, session: Session, index: str) -> str | None:
        rows = session.query(
            "SELECT TABLE_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND INDEX_NAME = %s",
            [self.database, index],
        )
        return str(rows[0][0]) if rows else None

    def close(self) -> None:
        """Nothing to release: sessions own their connections."""


def create_database(dsn: Dsn, connect_timeout: float = 10.0) -> bool:
    """CREATE DATABASE IF NOT EXISTS the DSN's database; True when it had to be created."""
    try:
        timeouts = replace(mysql.DEFAULT_TIMEOUTS, connect_timeout=connect_timeout)
        conn = mysql.connect(dsn, timeouts, database=None, autocommit=True)
    except pymysql.err.Error as exc:
        raise UpstreamUnavailable(f"{dsn.redacted()}: connect failed: {exc.args[-1]}") from exc
    try:
        with conn.cursor() as cursor:
            found = "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s"
            if cursor.execute(found, [dsn.database]):
                return False
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS {MYSQL.quote(dsn.database)}")
            return True
    except pymysql.err.Error as exc:
        raise UpstreamError(f"{dsn.redacted()}: creating the database failed: {exc.args[-1]}") from exc
    finally:
        conn.close()
