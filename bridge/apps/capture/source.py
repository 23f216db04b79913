"""The upstream server as a binlog source: its checks, its positions, its event stream.

:func:`check_server` runs at start and refuses a server the capture cannot
read exactly, naming the variable and the fix:

====================  ========  ==============================================
variable              needed    why
====================  ========  ==============================================
``log_bin``           ON        no binlog, nothing to read
``binlog_format``     ROW       statement events carry no row images
``binlog_row_image``  FULL      before/after images of every column
``binlog_row_metadata`` FULL    column names in the binlog (checked per event)
====================  ========  ==============================================

:func:`open_stream` opens a ``mysql-replication`` reader at a
:class:`Position`. The reader's own reconnect (on a lost connection it
re-requests the stream from a point that may lie inside a transaction) is
disabled: it may open its two connections once, and a third attempt raises
:class:`SourceUnavailable`, so the capture reconnects from its journal.
"""

from __future__ import annotations

import logging
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader  # type: ignore[import-untyped]
from pymysqlreplication.event import (  # type: ignore[import-untyped]
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (  # type: ignore[import-untyped]
    DeleteRowsEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)

from bridge import mysql
from bridge.apps.capture.errors import PositionLost, SourceUnavailable, UpstreamNotReady
from bridge.apps.capture.position import Position
from bridge.dsn import Dsn

log = logging.getLogger(__name__)

REQUIRED = (
    ("log_bin", "ON", "start the server with --log-bin (and a --server-id)"),
    ("binlog_format", "ROW", "SET GLOBAL binlog_format = 'ROW' (and binlog-format=ROW in the server config)"),
    (
        "binlog_row_image",
        "FULL",
        "SET GLOBAL binlog_row_image = 'FULL' (and binlog-row-image=FULL in the config)",
    ),
    (
        "binlog_row_metadata",
        "FULL",
        "SET GLOBAL binlog_row_metadata = 'FULL' (and binlog-row-metadata=FULL in the config); "
        "without it the binlog carries no column names",
    ),
)
EVENTS = [
    HeartbeatLogEvent,
    GtidEvent,
    MariadbGtidEvent,
    QueryEvent,
    XidEvent,
    RotateEvent,
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
]


def connect(dsn: Dsn, **extra: Any) -> pymysql.connections.Connection[Any]:
    """A plain pymysql connection to the source (no default database); errors translated."""
    try:
        return mysql.connect(dsn, database=None, autocommit=True, **extra)
    except pymysql.err.MySQLError as exc:
        raise SourceUnavailable(f"{dsn.redacted()}: connect failed: {exc.args[-1]}") from exc


def close_quietly(conn: pymysql.connections.Connection[Any]) -> None:
    """Close ``conn`` if it is still open."""
    if conn.open:
        conn.close()


def query(conn: pymysql.connections.Connection[Any], sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
    except pymysql.err.MySQLError as exc:
        raise SourceUnavailable(f"source query {sql.split()[0]} failed: {exc.args[-1]}") from exc


def flavor_of(conn: pymysql.connections.Connection[Any]) -> str:
    version = str(query(conn, "SELECT VERSION()")[0][0])
    return "mariadb" if "mariadb" in version.lower() else "mysql"


def check_server(conn: pymysql.connections.Connection[Any]) -> None:
    """Raise :class:`UpstreamNotReady` naming the first variable that is not as needed."""
    names = ", ".join(f"'{name}'" for name, _, _ in REQUIRED)
    found = {
        str(k).lower(): str(v).upper()
        for k, v in query(conn, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
    }
    for name, wanted, fix in REQUIRED:
        value = found.get(name)
        if value != wanted:
            raise UpstreamNotReady(
                f"the source has {name} = {value or '(unset)'}; the capture needs {wanted}: {fix}"
            )


def choose_mode(conn: pymysql.connections.Connection[Any], flavor: str, wanted: str) -> str:
    """``gtid`` or ``file`` for ``position = wanted`` (auto: GTID where the server has it)."""
    if wanted == "file" or flavor == "mariadb":
        return "file" if wanted == "file" else "gtid"
    rows = query(conn, "SHOW GLOBAL VARIABLES LIKE 'gtid_mode'")
    on = bool(rows) and str(rows[0][1]).upper() == "ON"
    if wanted == "gtid" and not on:
        raise UpstreamNotReady('capture.position = "gtid" needs gtid_mode = ON on the MySQL source')
    return "gtid" if on else "file"


def current_position(conn: pymysql.connections.Connection[Any], flavor: str, mode: str) -> Position:
    """The end of the source's binlog now (between two transactions)."""
    try:
        status = query(conn, "SHOW MASTER STATUS")
    except SourceUnavailable:
        status = query(conn, "SHOW BINARY LOG STATUS")  # MySQL 8.4 renamed it
    if not status:
        raise UpstreamNotReady("SHOW MASTER STATUS is empty: start the source with --log-bin")
    file, offset = str(status[0][0]), int(status[0][1])
    if flavor == "mariadb":
        gtid = str(query(conn, "SELECT BINLOG_GTID_POS(%s, %s)", (file, offset))[0][0] or "")
    else:
        gtid = str(status[0][4]) if len(status[0]) > 4 else ""
    return Position(flavor, mode, file, offset, gtid.replace("\n", ""))


def check_available(conn: pymysql.connections.Connection[Any], position: Position) -> None:
    """Raise :class:`PositionLost` when ``position``'s binlog file was purged."""
    files = {str(row[0]) for row in query(conn, "SHOW BINARY LOGS")}
    if position.file and position.file not in files:
        raise PositionLost(
            f"the source no longer has binlog {position.file} ({position.describe()}): it was purged; "
            'empty capture.data-dir and start again with snapshot = "initial", '
            'or use snapshot = "when-needed"'
        )


class _TwoConnections:
    """``pymysql_wrapper`` that lets the reader connect its stream and control connection once each."""

    def __init__(self, limit: int = 2) -> None:
        self._left = limit

    def __call__(self, **settings: Any) -> pymysql.connections.Connection[Any]:
        if self._left <= 0:
            raise SourceUnavailable("the replication connection broke; reconnecting from the journal")
        self._left -= 1
        return pymysql.connect(**settings)


def open_stream(dsn: Dsn, server_id: int, position: Position, databases: list[str], heartbeat: float) -> Any:
    """A blocking ``BinLogStreamReader`` positioned just after ``position``."""
    # The heartbeat (seconds) keeps an idle stream under the read timeout.
    timeouts = mysql.DEFAULT_TIMEOUTS
    args = dsn.pymysql_args(
        connect_timeout=timeouts.connect_timeout,
        read_timeout=max(timeouts.read_timeout, 3 * heartbeat),
        write_timeout=timeouts.write_timeout,
        database=None,
    )
    settings = {k: v for k, v in args.items() if k != "database" and v is not None}
    kwargs: dict[str, Any] = {}
    by_gtid = position.mode == "gtid" and bool(position.gtid)
    if by_gtid:
        kwargs["auto_position"] = position.gtid
    else:
        kwargs.update(resume_stream=True, log_file=position.file, log_pos=position.offset)
    log.info("reading the source's binlog from %s", position.describe())
    return BinLogStreamReader(
        connection_settings=settings,
        server_id=server_id,
        blocking=True,
        only_events=EVENTS,
        only_schemas=databases,
        # the reader's MariaDB mode always starts by GTID (or at the first binlog's start): a
        # file/offset start takes the MySQL-style request, which MariaDB serves too
        is_mariadb=by_gtid and position.flavor == "mariadb",
        slave_heartbeat=heartbeat,
        pymysql_wrapper=_TwoConnections(),
        enable_logging=False,
        **kwargs,
    )
