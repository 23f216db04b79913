"""Shadow tables: the captured tables' schemas as of the binlog position being read.

A DDL is read from the binlog some time after it ran; the source's own table
may have changed again since (or be gone: ``CREATE``, ``RENAME`` and ``DROP``
in quick succession). So the capture keeps an empty copy of each captured
table in a database of its own on the source (``bridge_shadow_<server-id>_<db>``),
applies each captured DDL statement to it, and describes the copy — with the
SQL producer's code — when it needs a schema. The copy is made with
``CREATE TABLE ... LIKE`` when a table is first announced.

Shadow statements run with ``sql_log_bin = 0`` where the capture's user may
set it; otherwise they reach the binlog in the shadow database, which is
never captured. A statement the shadow cannot run (a foreign key to a table
that is not captured, ...) leaves the table to be described from the source
itself, as it is now; :meth:`TableCatalog.entry` then refuses rows whose
columns do not match.
"""

from __future__ import annotations

import logging
import re

from bridge.dsn import Dsn
from bridge.producer.errors import UpstreamError
from bridge.producer.mysql import MySQLSession, MySQLUpstream, create_database
from bridge.proto import row_pb2

log = logging.getLogger(__name__)


def shadow_name(server_id: int, db: str) -> str:
    return f"bridge_shadow_{server_id}_{db}"[:64]


def retarget(sql: str, db: str, shadow: str) -> str:
    """``sql`` with names qualified by ``db`` qualified by ``shadow`` instead."""
    pattern = re.compile(rf"(?:`{re.escape(db)}`|(?<![\w`.]){re.escape(db)})(\s*\.\s*)(?=[`\w])")
    return pattern.sub(lambda m: f"`{shadow}`{m.group(1)}", sql)


def show_create(session: MySQLSession, db: str, table: str) -> str:
    """``SHOW CREATE TABLE`` text of ``db.table`` (names in it are unqualified)."""
    q = session.dialect.quote
    return str(session.query(f"SHOW CREATE TABLE {q(db)}.{q(table)}")[0][1])


class Shadow:
    """The shadow database of one captured database."""

    def __init__(self, dsn: Dsn, server_id: int, db: str) -> None:
        self.db = db
        self.name = shadow_name(server_id, db)
        create_database(dsn.with_database(self.name))
        self._upstream = MySQLUpstream(dsn.with_database(self.name))
        self._session: MySQLSession = self._upstream.connect()
        try:
            self._session.execute("SET SESSION sql_log_bin = 0")
        except UpstreamError as exc:
            log.info("shadow DDL of %s will be binlogged (sql_log_bin: %s)", db, exc)

    def copy(self, table: str, create_sql: str | None = None) -> None:
        """(Re)create the shadow of ``db.table`` from ``create_sql`` (its ``SHOW CREATE TABLE``
        text, unqualified), or from the source table as it is now."""
        q = self._session.dialect.quote
        if create_sql is None:
            create_sql = show_create(self._session, self.db, table)
        self._session.execute(f"DROP TABLE IF EXISTS {q(table)}")
        self._session.execute(create_sql)

    def definitions(self, tables: list[str]) -> dict[str, str | None]:
        """Each shadow table's ``SHOW CREATE TABLE`` text, None for one that does not exist."""
        found: dict[str, str | None] = {}
        for table in tables:
            try:
                found[table] = show_create(self._session, self.name, table)
            except UpstreamError:
                found[table] = None
        return found

    def restore(self, definitions: dict[str, str | None]) -> None:
        """Put shadow tables back as :meth:`definitions` gave them."""
        q = self._session.dialect.quote
        for table, create_sql in definitions.items():
            self._session.execute(f"DROP TABLE IF EXISTS {q(table)}")
            if create_sql is not None:
                self._session.execute(create_sql)

    def apply(self, sql: str) -> bool:
        """Run a captured DDL on the shadow; False when the shadow could not take it."""
        try:
            self._session.execute(retarget(sql, self.db, self.name))
        except UpstreamError as exc:
            log.warning(
                "shadow of %s could not run a DDL (%s); describing the source table instead", self.db, exc
            )
            return False
        return True

    def describe(self, table: str) -> row_pb2.TableSchema | None:
        schema = self._upstream.describe_table(self._session, table)
        if schema is not None:
            schema.db = self.db
        return schema

    def close(self) -> None:
        self._session.close()
