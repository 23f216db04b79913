"""MySQL/MariaDB column types -> ``bridge.row`` columns, and pymysql values <-> row codec values.

Tables are described from ``information_schema`` (COLUMNS, STATISTICS,
TABLES, and on MariaDB CHECK_CONSTRAINTS: MariaDB's JSON is LONGTEXT with a
``json_valid(col)`` check).

=================================  ===============  =======================================
information_schema ``DATA_TYPE``   ColumnType       pymysql value -> row codec value
=================================  ===============  =======================================
tinyint smallint mediumint         TINYINT ...      int (``unsigned`` from COLUMN_TYPE)
int bigint                         INT, BIGINT      int
decimal numeric                    DECIMAL(p,s)     Decimal
float / double real                FLOAT / DOUBLE   float
bit                                BIT(n)           int (sessions convert BIT to int)
year                               YEAR             int
date                               DATE             date; '0000-00-00' -> MySQLDate
datetime                           DATETIME(fsp)    datetime; zero dates -> MySQLDateTime
timestamp                          TIMESTAMP(fsp)   datetime, UTC (sessions run time_zone '+00:00')
time                               TIME(fsp)        timedelta
char varchar                       CHAR, VARCHAR    str (length in characters)
tinytext text mediumtext longtext  TEXT             str
binary varbinary                   BINARY, VARBIN.  bytes
tinyblob blob mediumblob longblob  BLOB             bytes
json (MySQL), longtext+json_valid  JSON             str (JSON text)
enum set                           ENUM, SET        str (SET: members joined by ',')
=================================  ===============  =======================================

Anything else (spatial types, ``vector``, ...) raises :class:`UnsupportedSchema`
naming the column.

Besides the type, a column carries what computes its values: a generated
column's kind and ``GENERATION_EXPRESSION`` (``EXTRA`` says ``VIRTUAL`` or
``STORED GENERATED``), its DEFAULT with whether it is an expression
(``(`a` + 1000)``, ``current_timestamp(6)``: anything but a constant literal),
``ON UPDATE`` (from ``EXTRA``) and its comment; an index carries its prefix
lengths (``STATISTICS.SUB_PART``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from bridge.producer.errors import UnsupportedSchema
from bridge.producer.upstream import IDENTITY, ColumnAdapter, identity
from bridge.proto import row_pb2
from bridge.rowtemporal import MySQLDate, MySQLDateTime

T = row_pb2.ColumnType

COLUMNS_SQL = (
    "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COLUMN_DEFAULT, IS_NULLABLE, CHARACTER_MAXIMUM_LENGTH, "
    "NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, CHARACTER_SET_NAME, COLLATION_NAME, EXTRA, "
    "GENERATION_EXPRESSION, COLUMN_COMMENT "
    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION"
)
INDEXES_SQL = (
    "SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME, SUB_PART FROM information_schema.STATISTICS "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY INDEX_NAME <> 'PRIMARY', INDEX_NAME, SEQ_IN_INDEX"
)
TABLE_SQL = (
    "SELECT t.TABLE_NAME, t.TABLE_COLLATION, c.CHARACTER_SET_NAME, t.TABLE_COMMENT, t.CREATE_OPTIONS "
    "FROM information_schema.TABLES t "
    "LEFT JOIN information_schema.COLLATIONS c ON c.COLLATION_NAME = t.TABLE_COLLATION "
    "WHERE t.TABLE_SCHEMA = %s AND t.TABLE_NAME = %s"
)
MARIADB_JSON_SQL = (
    "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
    "WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s"
)

_SIMPLE = {
    "tinyint": T.TINYINT,
    "smallint": T.SMALLINT,
    "mediumint": T.MEDIUMINT,
    "int": T.INT,
    "integer": T.INT,
    "bigint": T.BIGINT,
    "decimal": T.DECIMAL,
    "numeric": T.DECIMAL,
    "float": T.FLOAT,
    "double": T.DOUBLE,
    "real": T.DOUBLE,
    "bit": T.BIT,
    "year": T.YEAR,
    "date": T.DATE,
    "time": T.TIME,
    "datetime": T.DATETIME,
    "timestamp": T.TIMESTAMP,
    "char": T.CHAR,
    "varchar": T.VARCHAR,
    "tinytext": T.TEXT,
    "text": T.TEXT,
    "mediumtext": T.TEXT,
    "longtext": T.TEXT,
    "binary": T.BINARY,
    "varbinary": T.VARBINARY,
    "tinyblob": T.BLOB,
    "blob": T.BLOB,
    "mediumblob": T.BLOB,
    "longblob": T.BLOB,
    "json": T.JSON,
    "enum": T.ENUM,
    "set": T.SET,
}
_JSON_CHECK = re.compile(r"json_valid\(`((?:[^`]|``)+)`\)", re.IGNORECASE)
_MEMBER = re.compile(r"'((?:[^'\\]|''|\\.)*)'")
_GENERATED = re.compile(r"\b(virtual|stored|persistent)\s+generated\b", re.IGNORECASE)
_ON_UPDATE = re.compile(r"\bon update (\S+)", re.IGNORECASE)
_PARTITION = re.compile(r"\bPARTITION BY\b.*", re.IGNORECASE | re.DOTALL)
_LITERAL = re.compile(
    r"^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|'(?:[^'\\]|''|\\.)*'|b'[01]*'|x'[0-9a-f]*'|0x[0-9a-f]+)$",
    re.IGNORECASE | re.DOTALL,
)


def parse_members(column_type: str) -> list[str]:
    """ENUM/SET members from COLUMN_TYPE, e.g. ``enum('a','it''s')`` -> ['a', "it's"]."""
    inner = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return [re.sub(r"''|\\(.)", lambda m: m.group(1) or "'", m.group(1)) for m in _MEMBER.finditer(inner)]


def json_columns(check_clauses: Sequence[str]) -> set[str]:
    """Columns a MariaDB ``json_valid(`col`)`` check marks as JSON."""
    found: set[str] = set()
    for clause in check_clauses:
        found.update(m.group(1).replace("``", "`") for m in _JSON_CHECK.finditer(clause))
    return found


class ColumnInfo(NamedTuple):
    """One row of COLUMNS_SQL."""

    name: str
    data_type: str
    column_type: str
    default: Any
    nullable: str
    max_len: Any
    precision: Any
    scale: Any
    fsp: Any
    charset: Any
    collation: Any
    extra: str
    generation: Any = None
    comment: Any = ""


def column_from_info(row: Sequence[Any], table: str, json_names: set[str], mariadb: bool) -> row_pb2.Column:
    """One ``Column`` from a COLUMNS_SQL row (ids left 0)."""
    info = ColumnInfo(*row)
    kind = _SIMPLE.get(str(info.data_type).lower())
    if kind is None:
        raise UnsupportedSchema(
            f"table {table}: column {info.name!r} has type {info.column_type!r}, which is not carried"
        )
    if kind == T.TEXT and info.name in json_names:
        kind = T.JSON
    column = row_pb2.Column(
        name=info.name,
        type=kind,
        unsigned="unsigned" in str(info.column_type).lower(),
        nullable=info.nullable == "YES",
        sql_type=str(info.column_type),
        charset=info.charset or "",
        collation=info.collation or "",
        auto_increment="auto_increment" in str(info.extra).lower(),
    )
    _set_sizes(column, info)
    _set_definition(column, info, mariadb)
    return column


def _set_definition(column: row_pb2.Column, info: ColumnInfo, mariadb: bool) -> None:
    """What computes the column's values: default (literal or expression), generation, ON UPDATE,
    and its comment."""
    extra = str(info.extra or "")
    generated = _GENERATED.search(extra)
    if generated and info.generation:
        column.generated = row_pb2.VIRTUAL if generated.group(1).lower() == "virtual" else row_pb2.STORED
        column.generation_expression = str(info.generation)
    elif (sql_default := _default_text(info.default, column, extra, mariadb)) is not None:
        column.default_value = sql_default
        column.default_is_expression = is_expression(sql_default)
    if on_update := _ON_UPDATE.search(extra):
        column.on_update = on_update.group(1)
    if info.comment:
        column.comment = str(info.comment)


def is_expression(default: str) -> bool:
    """Whether a DEFAULT's SQL text is an expression rather than a constant literal."""
    text = default.strip()
    return not (text.upper() == "NULL" or _LITERAL.match(text))


def _set_sizes(column: row_pb2.Column, info: ColumnInfo) -> None:
    """Length, precision/scale, fsp or members: what the type's values are checked against."""
    kind = column.type
    if kind in (T.CHAR, T.VARCHAR, T.BINARY, T.VARBINARY):
        column.length = int(info.max_len)
    elif kind == T.BIT:
        column.length = int(info.precision)
    elif kind == T.DECIMAL:
        column.precision, column.scale = int(info.precision), int(info.scale)
    elif kind in (T.TIME, T.DATETIME, T.TIMESTAMP):
        column.fsp = int(info.fsp or 0)
    elif kind in (T.ENUM, T.SET):
        column.elems.extend(parse_members(str(info.column_type)))


def _default_text(default: Any, column: row_pb2.Column, extra: str, mariadb: bool) -> str | None:
    """DEFAULT as SQL text. MariaDB reports it so already; MySQL reports the bare value."""
    if mariadb or default is None:
        return None if default is None else str(default)
    if "default_generated" in extra.lower():
        return str(default)
    if column.type in (T.TINYINT, T.SMALLINT, T.MEDIUMINT, T.INT, T.BIGINT, T.DECIMAL, T.FLOAT, T.DOUBLE):
        return str(default)
    return "'" + str(default).replace("\\", "\\\\").replace("'", "''") + "'"


def partition_clause(create_table: str) -> str:
    """The ``PARTITION BY ...`` clause of a SHOW CREATE TABLE text ("" when it has none)."""
    found = _PARTITION.search(create_table)
    if found is None:
        return ""
    clause = found.group(0).strip()
    if clause.endswith("*/"):  # MySQL wraps it in /*!50100 ... */
        clause = clause[:-2].rstrip()
    return re.sub(r"\s*\n\s*", " ", clause)


def indexes_from_info(rows: Sequence[Sequence[Any]]) -> list[row_pb2.Index]:
    """Indexes from INDEXES_SQL rows (already grouped and ordered)."""
    indexes: dict[str, row_pb2.Index] = {}
    for name, non_unique, column, *sub_part in rows:
        index = indexes.get(name)
        if index is None:
            index = indexes[name] = row_pb2.Index(
                name=name, primary=name == "PRIMARY", unique=not int(non_unique)
            )
        index.columns.append(column)
        index.prefix_lengths.append(int(sub_part[0] or 0) if sub_part else 0)
    for index in indexes.values():
        if not any(index.prefix_lengths):
            del index.prefix_lengths[:]  # whole columns: as older binlogs carry them
    return list(indexes.values())


def _date_from_db(value: Any) -> Any:
    if isinstance(value, str):  # pymysql leaves dates Python cannot hold as text
        y, m, d = (int(part) for part in value.split("-"))
        return MySQLDate(y, m, d)
    return value


def _datetime_from_db(value: Any) -> Any:
    if isinstance(value, str):
        day, _, clock = value.partition(" ")
        y, mo, d = (int(part) for part in day.split("-"))
        hms, _, fraction = (clock or "00:00:00").partition(".")
        h, mi, s = (int(part) for part in hms.split(":"))
        return MySQLDateTime(y, mo, d, h, mi, s, int((fraction + "000000")[:6]))
    return value


def _temporal_to_db(value: Any) -> Any:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, MySQLDate | MySQLDateTime):
        return str(value)
    return value


def _json_to_db(value: Any) -> Any:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _set_adapter(column: row_pb2.Column) -> ColumnAdapter:
    order = {member: i for i, member in enumerate(column.elems)}

    def to_db(value: Any) -> Any:
        if isinstance(value, set | frozenset | list | tuple):
            return ",".join(sorted(value, key=lambda m: order.get(m, len(order))))
        return value

    def from_db(value: Any) -> Any:
        return to_db(value) if isinstance(value, set | frozenset) else value

    return ColumnAdapter(to_db, from_db)


def _binary_adapter(length: int) -> ColumnAdapter:
    def to_db(value: Any) -> Any:
        # BINARY(n) stores values right-padded with zero bytes: pad here, so that the value
        # written also finds the stored row again (rows of a table without key are found by value).
        if isinstance(value, bytes | bytearray | memoryview) and len(value) < length:
            return bytes(value).ljust(length, b"\x00")
        return value

    return ColumnAdapter(to_db, identity)


def adapter_for(column: row_pb2.Column) -> ColumnAdapter:
    kind = column.type
    if kind == T.BINARY and column.length:
        return _binary_adapter(column.length)
    if kind == T.DATE:
        return ColumnAdapter(_temporal_to_db, _date_from_db)
    if kind in (T.DATETIME, T.TIMESTAMP):
        return ColumnAdapter(_temporal_to_db, _datetime_from_db)
    if kind == T.JSON:
        return ColumnAdapter(_json_to_db, identity)
    if kind == T.SET:
        return _set_adapter(column)
    return IDENTITY
