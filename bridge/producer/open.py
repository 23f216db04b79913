"""The factory of upstreams: the :class:`~bridge.producer.upstream.Upstream` a DSN names."""

from __future__ import annotations

from bridge.dsn import Dsn, parse_dsn
from bridge.producer.mysql import MySQLUpstream
from bridge.producer.sqlite import SQLiteUpstream
from bridge.producer.upstream import Upstream


def open_upstream(dsn: Dsn | str) -> Upstream:
    """The upstream a DSN names (``sqlite:`` or ``mysql://``); see :mod:`bridge.dsn`."""
    parsed = parse_dsn(dsn) if isinstance(dsn, str) else dsn
    if parsed.is_sqlite:
        return SQLiteUpstream(parsed.path, database=parsed.sqlite_database)
    return MySQLUpstream(parsed)
