"""Open a side of the diff from a DSN: a SQLite file or directory, or a MySQL database or server.

A :class:`~bridge.apps.diff.sources.Source` is opened from a DSN (:func:`open_source`):

- ``sqlite:///path/file.db``: one SQLite file, database ``main`` (what a
  SQLite upstream names it), or the ``?database=NAME`` the upstream's DSN
  gave it;
- ``sqlite:///path/dir``: a directory laid out like the sqlite sink's, each
  ``<name>.db`` file one database (``_bridge.sqlite`` is the sink's own);
  with ``?database=NAME`` only that database's file;
- ``mysql://user@host:port/db``: that database; without ``/db`` every
  database except the server's own (``mysql``, ``sys``,
  ``information_schema``, ``performance_schema``).

Sources only read: SQLite files are opened read-only; MySQL sessions use UTC
for TIMESTAMP and stream rows with an unbuffered cursor.
"""

from __future__ import annotations

from pathlib import Path

from bridge.apps.diff.mysql_source import MySQLSource
from bridge.apps.diff.sources import Source
from bridge.apps.diff.sqlite_source import SQLiteSource
from bridge.dsn import parse_dsn


def open_source(dsn_text: str, key: str) -> Source:
    """The source a DSN names; ``key`` (``--upstream``) names it in errors."""
    dsn = parse_dsn(dsn_text, key=key)
    if dsn.is_sqlite:
        return SQLiteSource(Path(dsn.path), dsn.database)
    return MySQLSource(dsn.with_password_from_env())
