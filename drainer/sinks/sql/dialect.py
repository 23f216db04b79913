"""What differs between SQL databases when a row change becomes a statement.

A :class:`Dialect` answers the few questions :mod:`drainer.sinks.sql.sql`
asks while it builds statements: how an identifier is quoted, what a
parameter placeholder looks like, which operator compares NULL-safely, how
"change at most one row" is written, and how each column's values are
converted to what the database driver binds losslessly. Everything else —
which statements a change needs, in which order, keyed by what — is the
dialect-neutral code in :mod:`drainer.sinks.sql.sql`.

A MySQL dialect is a subclass that sets ``placeholder = "%s"``,
``null_safe_equal = "<=>"``, quotes with backticks, writes ``LIMIT 1`` directly
on UPDATE/DELETE and converts the few types pymysql does not bind as MySQL
stores them (TIMESTAMP to UTC, unsigned 64-bit as ``int``).
"""

from __future__ import annotations

from collections.abc import Callable

from bridge.proto import row_pb2

Converter = Callable[[object], object]
"""Turns one non-NULL decoded value (:mod:`bridge.rowcodec` type) into what the driver binds."""


class Dialect:
    """The SQL spelling of one database; stateless and shareable between threads."""

    name: str = "sql"
    placeholder: str = "?"
    null_safe_equal: str = "IS"
    replace_verb: str = "REPLACE INTO"
    quote_char: str = '"'

    def quote(self, name: str) -> str:
        """An identifier in quotes, the quote character doubled inside: never injectable."""
        q = self.quote_char
        return q + name.replace(q, q + q) + q

    def table_ref(self, db: str, table: str) -> str:
        """How a statement names table ``db.table``."""
        return f"{self.quote(db)}.{self.quote(table)}" if db else self.quote(table)

    def converter(self, column: row_pb2.Column) -> Converter | None:
        """How values of ``column`` are bound; ``None`` when the decoded value binds as it is."""
        return None

    def converter_of(self, column: row_pb2.Column) -> Converter:
        """:meth:`converter`, or identity where values bind as they are."""
        convert = self.converter(column)
        return convert if convert is not None else _identity

    def update_one(self, table_ref: str, assignments: str, condition: str) -> str:
        """UPDATE changing at most one row matching ``condition`` (tables without a key)."""
        return f"UPDATE {table_ref} SET {assignments} WHERE {condition} LIMIT 1"  # noqa: S608 - quoted parts

    def delete_one(self, table_ref: str, condition: str) -> str:
        """DELETE removing at most one row matching ``condition`` (tables without a key)."""
        return f"DELETE FROM {table_ref} WHERE {condition} LIMIT 1"  # noqa: S608 - quoted parts


def _identity(value: object) -> object:
    return value
