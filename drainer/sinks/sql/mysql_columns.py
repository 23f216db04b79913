"""MySQL column definitions from ``bridge.row`` columns: types, DEFAULT clauses, quoting.

:mod:`drainer.sinks.sql.mysql_ddl` builds statements from these. A column's
``sql_type`` is MySQL text for MySQL upstreams (tables that carry a charset)
and is used when it is a plain type of the column's type family; otherwise the
type is derived from the structured fields (:func:`derived_type`). A DEFAULT
is written as a literal, ``CURRENT_TIMESTAMP(n)``, or — when the binlog marks
it as an expression — ``DEFAULT (expr)`` (:func:`default_clause`).
"""

from __future__ import annotations

import logging
import re

from bridge.mysql import quote_identifier
from bridge.proto import row_pb2

log = logging.getLogger(__name__)

T = row_pb2.ColumnType

_INTS = {
    T.TINYINT: "TINYINT",
    T.SMALLINT: "SMALLINT",
    T.MEDIUMINT: "MEDIUMINT",
    T.INT: "INT",
    T.BIGINT: "BIGINT",
}
_FAMILY: dict[int, frozenset[str]] = {
    T.TINYINT: frozenset(("tinyint", "bool", "boolean")),
    T.SMALLINT: frozenset(("smallint",)),
    T.MEDIUMINT: frozenset(("mediumint",)),
    T.INT: frozenset(("int", "integer")),
    T.BIGINT: frozenset(("bigint",)),
    T.DECIMAL: frozenset(("decimal", "numeric", "dec", "fixed")),
    T.FLOAT: frozenset(("float",)),
    T.DOUBLE: frozenset(("double", "real", "double precision")),
    T.BIT: frozenset(("bit",)),
    T.YEAR: frozenset(("year",)),
    T.DATE: frozenset(("date",)),
    T.TIME: frozenset(("time",)),
    T.DATETIME: frozenset(("datetime",)),
    T.TIMESTAMP: frozenset(("timestamp",)),
    T.CHAR: frozenset(("char",)),
    T.VARCHAR: frozenset(("varchar",)),
    T.TEXT: frozenset(("tinytext", "text", "mediumtext", "longtext")),
    T.BINARY: frozenset(("binary",)),
    T.VARBINARY: frozenset(("varbinary",)),
    T.BLOB: frozenset(("tinyblob", "blob", "mediumblob", "longblob")),
}
_PLAIN_TYPE = re.compile(
    r"^\s*([a-z]+(?: precision)?)\s*(\(\s*\d+\s*(?:,\s*\d+\s*)?\))?"
    r"((?:\s+(?:unsigned|signed|zerofill))*)\s*$",
    re.IGNORECASE,
)
_UNBOUNDED = frozenset((T.TEXT, T.BLOB, T.JSON))
STRING_TYPES = frozenset((T.CHAR, T.VARCHAR, T.TEXT, T.ENUM, T.SET))
SAFE_NAME = re.compile(r"^[A-Za-z0-9_]+$")
NOW_CALL = re.compile(r"^(current_timestamp|now|localtimestamp|localtime)\s*(\(\s*\d*\s*\))?$", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_STRING_LITERAL = re.compile(r"^'(?:[^'\\]|''|\\.)*'$", re.DOTALL)
_BIT_HEX = re.compile(r"^(?:b'[01]*'|x'[0-9a-f]*'|0x[0-9a-f]+)$", re.IGNORECASE)
INDEX_PREFIX = 255


def quote(name: str) -> str:
    """A backtick-quoted identifier (for statements run without parameters: ``%`` stays single)."""
    return quote_identifier(name)


def table_ref(db: str, table: str) -> str:
    return f"{quote(db)}.{quote(table)}" if db else quote(table)


def string_literal(text: str) -> str:
    """A SQL string literal (quotes doubled, backslashes escaped: safe under any sql_mode)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


def from_mysql(schema: row_pb2.TableSchema) -> bool:
    """Whether ``schema`` came from a MySQL upstream (they carry a charset; SQLite ones do not)."""
    return bool(schema.charset or schema.collation)


def indexed_columns(schema: row_pb2.TableSchema) -> set[str]:
    return {name.lower() for index in schema.indexes for name in index.columns}


def column_type(column: row_pb2.Column, mysql_origin: bool, indexed: bool = False) -> str:
    """The MySQL type of ``column`` (see the module docstring)."""
    kind = column.type
    if mysql_origin and column.sql_type and kind in _FAMILY:
        match = _PLAIN_TYPE.match(column.sql_type)
        if match and match.group(1).lower() in _FAMILY[kind]:
            return " ".join(column.sql_type.split())
    return derived_type(column, indexed and not mysql_origin)


def derived_type(column: row_pb2.Column, indexed: bool = False) -> str:
    """The MySQL type from the structured fields alone."""
    kind = column.type
    unsigned = " UNSIGNED" if column.unsigned else ""
    if kind in _INTS:
        return _INTS[kind] + unsigned
    if kind == T.DECIMAL:
        precision = column.precision or 65
        scale = column.scale if column.precision else 30
        return f"DECIMAL({precision},{scale}){unsigned}"
    if kind == T.FLOAT:
        return "FLOAT" + unsigned
    if kind == T.DOUBLE:
        return "DOUBLE" + unsigned
    if kind == T.BIT:
        return f"BIT({column.length or 64})"
    if kind == T.YEAR:
        return "YEAR"
    if kind == T.DATE:
        return "DATE"
    if kind in (T.TIME, T.DATETIME, T.TIMESTAMP):
        name = {T.TIME: "TIME", T.DATETIME: "DATETIME", T.TIMESTAMP: "TIMESTAMP"}[kind]
        return f"{name}({column.fsp})" if column.fsp else name
    if kind == T.CHAR:
        if 0 < column.length <= 255:
            return f"CHAR({column.length})"
        return f"VARCHAR({column.length})" if column.length else "CHAR(1)"
    if kind == T.VARCHAR:
        if column.length:
            return f"VARCHAR({column.length})"
        return "VARCHAR(768)" if indexed else "LONGTEXT"
    if kind == T.TEXT:
        return "VARCHAR(768)" if indexed else "LONGTEXT"
    if kind == T.BINARY:
        return (
            f"BINARY({column.length})" if 0 < column.length <= 255 else f"VARBINARY({column.length or 255})"
        )
    if kind == T.VARBINARY:
        if column.length:
            return f"VARBINARY({column.length})"
        return "VARBINARY(3072)" if indexed else "LONGBLOB"
    if kind == T.BLOB:
        return "VARBINARY(3072)" if indexed else "LONGBLOB"
    if kind == T.JSON:
        return "JSON"
    if kind in (T.ENUM, T.SET):
        members = ",".join(string_literal(e) for e in column.elems)
        return f"{'ENUM' if kind == T.ENUM else 'SET'}({members})"
    raise ValueError(f"column {column.name!r}: type {T.Name(kind)} has no MySQL form")


def expression(text: str) -> str:
    """``text`` in one pair of parentheses (as DEFAULT (...) and AS (...) take it)."""
    text = text.strip()
    if text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        return text
    return f"({text})"


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def default_clause(column: row_pb2.Column, expressions: bool = True) -> str:
    """`` DEFAULT ...``: a literal as written, CURRENT_TIMESTAMP, an expression the binlog marks as
    one in parentheses; ``""`` for none (or an unmarked default that is none of these).

    ``expressions = False`` (TiDB, which takes few expression defaults) leaves expressions and
    TEXT/BLOB/JSON defaults out, as for binlogs older than issue 19."""
    if not column.HasField("default_value") or column.generated:
        return ""
    text = column.default_value.strip()
    is_now = bool(NOW_CALL.match(text)) and column.type in (T.TIMESTAMP, T.DATETIME)
    if column.default_is_expression and not is_now:
        if expressions:
            return f" DEFAULT {expression(text)}"
        log.warning("column %s: DEFAULT %s is an expression; created without it", column.name, text[:80])
        return ""
    if column.type in _UNBOUNDED and text.upper() != "NULL":
        if expressions and _STRING_LITERAL.match(text):
            return f" DEFAULT ({text})"  # TEXT/BLOB/JSON take defaults as expressions only
        return ""
    if text.upper() == "NULL":
        return " DEFAULT NULL" if column.nullable else ""
    if NOW_CALL.match(text):
        if column.type in (T.TIMESTAMP, T.DATETIME):
            return f" DEFAULT CURRENT_TIMESTAMP{f'({column.fsp})' if column.fsp else ''}"
        return ""
    if _NUMBER.match(text) or _BIT_HEX.match(text):
        return f" DEFAULT {text}"
    if _STRING_LITERAL.match(text):
        return f" DEFAULT {text}"
    log.warning("column %s: DEFAULT %s is not a plain literal; created without it", column.name, text[:80])
    return ""
