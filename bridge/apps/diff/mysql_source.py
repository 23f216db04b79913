"""A MySQL/MariaDB database (or every user database of a server) as a diff side."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pymysql
import pymysql.cursors

from bridge import mysql
from bridge.apps.diff.normalize import mysql_kind
from bridge.apps.diff.sources import (
    FETCH,
    SYSTEM_DATABASES,
    Column,
    DiffSourceError,
    DiffSourceUnreachable,
    KeyRange,
    TableInfo,
    is_internal,
    range_condition,
)
from bridge.dsn import Dsn


class MySQLSource:
    """Reads through pymysql: a buffered connection for metadata, a new unbuffered one per row scan."""

    def __init__(self, dsn: Dsn) -> None:
        self.label = dsn.redacted()
        self._dsn = dsn
        self._meta = self._connect(pymysql.cursors.Cursor)
        if dsn.database and not self._query(
            "SELECT 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (dsn.database,)
        ):
            self._meta.close()
            raise DiffSourceError(f"{self.label}: database {dsn.database!r} does not exist")

    def _connect(self, cursor: type[Any]) -> pymysql.connections.Connection[Any]:
        try:
            # No default database: without /db the source spans every database of the server.
            conn = mysql.connect(self._dsn, database=None, autocommit=True, cursorclass=cursor)
        except pymysql.MySQLError as exc:
            raise DiffSourceUnreachable(f"{self.label}: cannot connect: {exc.args[-1]}") from exc
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")  # TIMESTAMP values in UTC, as the binlog carries them
        return conn

    def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        try:
            with self._meta.cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall())
        except pymysql.MySQLError as exc:
            raise DiffSourceError(f"{self.label}: {exc.args[-1]}") from exc

    def tables(self) -> list[tuple[str, str]]:
        rows = self._query(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_TYPE = 'BASE TABLE' AND (%s = '' OR TABLE_SCHEMA = %s)",
            (self._dsn.database, self._dsn.database),
        )
        return sorted((db, t) for db, t in rows if db.lower() not in SYSTEM_DATABASES and not is_internal(t))

    def table_info(self, db: str, table: str) -> TableInfo:
        rows = self._query(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (db, table),
        )
        columns = tuple(Column(n, mysql_kind(dt, ct), nullable == "YES") for n, dt, ct, nullable in rows)
        indexes = self._query(
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 ORDER BY INDEX_NAME = 'PRIMARY' "
            "DESC, INDEX_NAME, SEQ_IN_INDEX",
            (db, table),
        )
        not_null = {c.name for c in columns if not c.nullable}
        grouped: dict[str, list[str]] = {}
        for index, column in indexes:
            grouped.setdefault(index, []).append(column)
        key: tuple[str, ...] = ()
        for index, names in grouped.items():
            if index == "PRIMARY" or all(n in not_null for n in names):
                key = tuple(names)
                break
        return TableInfo(db, table, columns, key)

    def rows(
        self, db: str, table: str, columns: Sequence[str], where: KeyRange | None = None
    ) -> Iterator[tuple[object, ...]]:
        names = ", ".join(mysql.quote_identifier(c) for c in columns)
        condition, params = range_condition(where, "`", "%s")
        ref = f"{mysql.quote_identifier(db)}.{mysql.quote_identifier(table)}"
        query = f"SELECT {names} FROM {ref}{condition}"  # noqa: S608 - quoted names, placeholders
        conn = self._connect(pymysql.cursors.SSCursor)
        try:
            with conn.cursor() as cur:
                cur.execute(query, params)
                while batch := cur.fetchmany(FETCH):
                    yield from batch
        except pymysql.MySQLError as exc:
            raise DiffSourceError(f"{self.label}: reading {db}.{table}: {exc.args[-1]}") from exc
        finally:
            conn.close()

    def close(self) -> None:
        self._meta.close()
