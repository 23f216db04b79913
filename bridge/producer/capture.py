"""Row changes with their images: the statements the writer runs for one DML call.

Each change locks the rows it touches and reads their images from the
database itself, so the binlog carries what the upstream holds (defaults,
auto-increment values, collation and type coercion included):

- **update/delete**: ``SELECT ... FOR UPDATE`` (under SQLite's BEGIN
  IMMEDIATE the whole database is already locked) reads the before images,
  then each row is changed on its own through a *locator*, and an update's
  after image is read back through the row's new locator;
- **insert**: the INSERT, then the row read back through its locator.

Where the server takes a RETURNING clause (``Session.returning``: MariaDB
10.5+ for INSERT and DELETE, SQLite 3.35+ for all three) the statement itself
returns the image: an INSERT is one statement, a DELETE of any number of rows
is one statement, and on SQLite an update's after image comes with its UPDATE.

A locator names exactly one row. Three kinds, chosen by :func:`locator_for`:

- :class:`KeyLocator` — the table's key (primary key, else a unique NOT NULL
  key) on MySQL;
- :class:`RowidLocator` — SQLite's ``rowid`` for every table (WITHOUT ROWID
  tables are refused when described);
- :class:`ImageLocator` — MySQL tables without a key: the full row image,
  ``LIMIT 1`` (identical rows are interchangeable). Inserts into such a table
  must give every column, and FLOAT columns cannot be matched exactly, so a
  keyless MySQL table with a FLOAT column is refused.

Images here are tuples of *driver* values in schema column order; the writer
turns them into row codec values with the table's adapters.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from bridge.producer.catalog import TableEntry
from bridge.producer.errors import UnsupportedSchema, UpstreamError
from bridge.producer.upstream import Session
from bridge.proto import row_pb2

Image = tuple[Any, ...]
Values = Mapping[int, object]  # column position -> driver value


class Locator(Protocol):
    def select(self, where: Values) -> list[tuple[object, Image]]:
        """Lock and read the rows matching ``where``: (locator, before image) each, in key order."""

    def update(self, loc: object, before: Image, changes: Values) -> tuple[object, Image | None]:
        """Apply ``changes`` to the one row at ``loc``: the row's locator afterwards, and its
        after image when the UPDATE returned it."""

    def read(self, loc: object) -> Image:
        """The current image of the row at ``loc``."""

    def delete(self, loc: object, before: Image) -> None: ...

    def inserted(self, values: Values, last_id: int) -> object:
        """The locator of the row an INSERT of ``values`` just made."""


class _Base:
    def __init__(self, session: Session, entry: TableEntry) -> None:
        self.session = session
        self.entry = entry
        d = session.dialect
        self.d = d
        self.table = d.quote(entry.name)
        self.columns = ", ".join(d.quote(n) for n in entry.names)

    def where(self, positions: Sequence[int]) -> str:
        names = self.entry.names
        return " AND ".join(self.d.eq(names[p]) for p in positions) or "1 = 1"

    def assignments(self, changes: Values) -> tuple[str, list[object]]:
        names = self.entry.names
        sql = ", ".join(f"{self.d.quote(names[p])} = {self.d.param}" for p in changes)
        return sql, list(changes.values())

    def one(self, rows: list[tuple[Any, ...]], what: str) -> Image:
        if len(rows) != 1:
            raise UpstreamError(f"table {self.entry.name}: {what} found {len(rows)} rows, expected one")
        return tuple(rows[0])


class KeyLocator(_Base):
    def __init__(self, session: Session, entry: TableEntry) -> None:
        super().__init__(session, entry)
        self.key = entry.key
        self.order = ", ".join(self.d.quote(entry.names[p]) for p in self.key)
        self.by_key = self.where(self.key)

    def select(self, where: Values) -> list[tuple[object, Image]]:
        sql = (
            f"SELECT {self.columns} FROM {self.table} WHERE {self.where(list(where))} "  # noqa: S608
            f"ORDER BY {self.order}{self.d.lock_rows}"
        )
        rows = self.session.query(sql, list(where.values()))
        return [(tuple(row[p] for p in self.key), tuple(row)) for row in rows]

    def update(self, loc: object, before: Image, changes: Values) -> tuple[object, Image | None]:
        assert isinstance(loc, tuple)
        sets, params = self.assignments(changes)
        sql = f"UPDATE {self.table} SET {sets} WHERE {self.by_key}"  # noqa: S608
        self.session.execute(sql, [*params, *loc])
        return tuple(changes.get(p, old) for p, old in zip(self.key, loc, strict=True)), None

    def read(self, loc: object) -> Image:
        assert isinstance(loc, tuple)
        sql = f"SELECT {self.columns} FROM {self.table} WHERE {self.by_key}"  # noqa: S608
        return self.one(self.session.query(sql, list(loc)), "reading a row back by its key")

    def delete(self, loc: object, before: Image) -> None:
        assert isinstance(loc, tuple)
        self.session.execute(f"DELETE FROM {self.table} WHERE {self.by_key}", list(loc))  # noqa: S608

    def inserted(self, values: Values, last_id: int) -> object:
        key: list[object] = []
        for p in self.key:
            value = values.get(p)
            if p == self.entry.auto_increment and value in (None, 0):
                value = last_id
            elif p not in values:
                raise UnsupportedSchema(
                    f"table {self.entry.name}: an insert must give key column {self.entry.names[p]!r}"
                )
            key.append(value)
        return tuple(key)


class RowidLocator(_Base):
    def select(self, where: Values) -> list[tuple[object, Image]]:
        sql = (
            f"SELECT rowid, {self.columns} FROM {self.table} "  # noqa: S608
            f"WHERE {self.where(list(where))} ORDER BY rowid"
        )
        return [(row[0], tuple(row[1:])) for row in self.session.query(sql, list(where.values()))]

    def update(self, loc: object, before: Image, changes: Values) -> tuple[object, Image | None]:
        sets, params = self.assignments(changes)
        sql = f"UPDATE {self.table} SET {sets} WHERE rowid = ?"  # noqa: S608
        alias = self.entry.auto_increment  # SQLite's INTEGER PRIMARY KEY is the rowid itself
        moved = changes[alias] if alias is not None and alias in changes else loc
        if "update" in self.session.returning:
            return moved, self.one(
                self.session.query(f"{sql} RETURNING {self.columns}", [*params, loc]), "UPDATE"
            )
        self.session.execute(sql, [*params, loc])
        return moved, None

    def read(self, loc: object) -> Image:
        sql = f"SELECT {self.columns} FROM {self.table} WHERE rowid = ?"  # noqa: S608
        return self.one(self.session.query(sql, [loc]), "reading a row back by its rowid")

    def delete(self, loc: object, before: Image) -> None:
        self.session.execute(f"DELETE FROM {self.table} WHERE rowid = ?", [loc])  # noqa: S608

    def inserted(self, values: Values, last_id: int) -> object:
        return last_id


class ImageLocator(_Base):
    def __init__(self, session: Session, entry: TableEntry) -> None:
        super().__init__(session, entry)
        floats = [c.name for c in entry.schema.columns if c.type == row_pb2.ColumnType.FLOAT]
        if floats:
            raise UnsupportedSchema(
                f"table {entry.name} has no key and FLOAT column {floats[0]!r}: its rows cannot be "
                "located exactly; add a primary key or use DOUBLE"
            )
        self.everything = self.where(range(len(entry.names)))

    def select(self, where: Values) -> list[tuple[object, Image]]:
        sql = f"SELECT {self.columns} FROM {self.table} WHERE {self.where(list(where))}{self.d.lock_rows}"  # noqa: S608
        return [(tuple(row), tuple(row)) for row in self.session.query(sql, list(where.values()))]

    def update(self, loc: object, before: Image, changes: Values) -> tuple[object, Image | None]:
        sets, params = self.assignments(changes)
        sql = f"UPDATE {self.table} SET {sets} WHERE {self.everything} LIMIT 1"  # noqa: S608
        self.session.execute(sql, [*params, *before])
        return tuple(changes.get(p, old) for p, old in enumerate(before)), None

    def read(self, loc: object) -> Image:
        assert isinstance(loc, tuple)
        sql = f"SELECT {self.columns} FROM {self.table} WHERE {self.everything} LIMIT 1"  # noqa: S608
        rows = self.session.query(sql, list(loc))
        if not rows:
            raise UpstreamError(
                f"table {self.entry.name} has no key, so the row written is found again by its values, "
                "and none matched: the database changed a value on the way in (rounding a fraction, "
                "truncating); give values exactly as the columns store them"
            )
        return tuple(rows[0])

    def delete(self, loc: object, before: Image) -> None:
        sql = f"DELETE FROM {self.table} WHERE {self.everything} LIMIT 1"  # noqa: S608
        self.session.execute(sql, list(before))

    def inserted(self, values: Values, last_id: int) -> object:
        missing = [n for p, n in enumerate(self.entry.names) if p not in values]
        if missing:
            raise UnsupportedSchema(
                f"table {self.entry.name} has no key: an insert must give every column "
                f"(missing {', '.join(missing)})"
            )
        return tuple(values[p] for p in range(len(self.entry.names)))


def locator_for(session: Session, entry: TableEntry) -> Locator:
    if session.dialect.name == "sqlite":
        return RowidLocator(session, entry)
    return KeyLocator(session, entry) if entry.key else ImageLocator(session, entry)


def insert_row(session: Session, locator: Locator, entry: TableEntry, values: Values) -> Image:
    """INSERT one row and read back its full image."""
    d = session.dialect
    table = d.quote(entry.name)
    if values:
        names = ", ".join(d.quote(entry.names[p]) for p in values)
        sql = f"INSERT INTO {table} ({names}) VALUES ({d.params(len(values))})"  # noqa: S608
    else:
        sql = f"INSERT INTO {table} {d.default_row}"
    if "insert" in session.returning:
        returned = session.query(
            f"{sql} RETURNING {', '.join(d.quote(n) for n in entry.names)}", list(values.values())
        )
        return tuple(returned[0])
    last_id = session.insert(sql, list(values.values()))
    return locator.read(locator.inserted(values, last_id))


def insert_rows(session: Session, locator: Locator, entry: TableEntry, rows: Sequence[Values]) -> list[Image]:
    """INSERT rows that all give the same columns; their full images, in the order given.

    With INSERT ... RETURNING this is one multi-row statement; the rows it
    returns are matched to the rows given only as a whole, which is all a
    binlog needs (rows of one statement are distinct, or interchangeable).
    """
    if len(rows) < 2 or "insert" not in session.returning or not rows[0]:
        return [insert_row(session, locator, entry, values) for values in rows]
    d = session.dialect
    names = ", ".join(d.quote(entry.names[p]) for p in rows[0])
    one = f"({d.params(len(rows[0]))})"
    columns = ", ".join(d.quote(n) for n in entry.names)
    sql = (
        f"INSERT INTO {d.quote(entry.name)} ({names}) VALUES {', '.join([one] * len(rows))} "  # noqa: S608
        f"RETURNING {columns}"
    )
    order = list(rows[0])  # every row gives these columns, maybe in another order
    returned = session.query(sql, [values[p] for values in rows for p in order])
    if len(returned) != len(rows):
        raise UpstreamError(f"table {entry.name}: {len(rows)} rows inserted, {len(returned)} returned")
    return [tuple(row) for row in returned]


def update_rows(locator: Locator, where: Values, changes: Values) -> list[tuple[Image, Image]]:
    """Change every row matching ``where``, one at a time; (before, after) per row that changed."""
    pairs: list[tuple[Image, Image]] = []
    for loc, before in locator.select(where):
        moved, after = locator.update(loc, before, changes)
        if after is None:
            after = locator.read(moved)
        if after != before:
            pairs.append((before, after))
    return pairs


def delete_rows(session: Session, locator: Locator, entry: TableEntry, where: Values) -> list[Image]:
    """Delete every row matching ``where``; their before images (in key order, unless RETURNING)."""
    if "delete" in session.returning:
        d = session.dialect
        names = entry.names
        condition = " AND ".join(d.eq(names[p]) for p in where) or "1 = 1"
        columns = ", ".join(d.quote(n) for n in names)
        sql = f"DELETE FROM {d.quote(entry.name)} WHERE {condition} RETURNING {columns}"  # noqa: S608
        return [tuple(row) for row in session.query(sql, list(where.values()))]
    befores: list[Image] = []
    for loc, before in locator.select(where):
        locator.delete(loc, before)
        befores.append(before)
    return befores
