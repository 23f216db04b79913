"""The calls behind a benchmark's rows, read where they are counted: a MySQL server's global
status (statements, fsyncs) and a drainer's metrics (pulled messages, the MySQL sink's statements
and COMMITs). Each reader is a :data:`bench.cpu.Counter` for :class:`bench.cpu.Counters`."""

from __future__ import annotations

from typing import Any

from bench.cpu import scraped
from bridge import mysql
from bridge.dsn import Dsn


def server_status(dsn: Dsn, names: tuple[str, ...]) -> float:
    """The sum of the server's global status counters ``names``."""
    conn = mysql.connect(dsn, autocommit=True)
    try:
        with conn.cursor() as cursor:
            marks = ", ".join(["%s"] * len(names))
            cursor.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({marks})", names)
            return float(sum(int(value) for _, value in cursor.fetchall()))
    finally:
        conn.close()


def drainer_counters(status_addr: str, dsn: Dsn) -> dict[str, Any]:
    """The calls behind the drainer's rows: messages it pulled from the pumps, the sink's
    statements and COMMITs (its metrics, worker processes included), and the server's statements
    and fsyncs (global status: every client's, none but ours during the run)."""
    url = f"http://{status_addr}/metrics"

    def status(*names: str) -> Any:
        return lambda: server_status(dsn, names)

    return {
        "drainer_pulled_messages": scraped("bridge_drainer_pulled_messages_total", url),
        "sink_statements": scraped("bridge_sink_mysql_statement_seconds_count", url),
        "sink_commits": scraped("bridge_sink_mysql_commit_seconds_count", url),
        "server_statements (server-wide)": status("Questions"),
        "server_fsyncs (server-wide)": status("Innodb_data_fsyncs", "Innodb_os_log_fsyncs"),
    }
