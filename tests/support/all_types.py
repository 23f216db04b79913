"""One table with a column of every row-encoding type, as a TableSchema, as MariaDB DDL, and rows.

Used where a value must survive the whole way: encoded into a binlog,
applied by a sink, read back and compared by ``binlog-bridge diff`` with the
same rows inserted into MariaDB.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from bridge.proto import row_pb2
from bridge.rowtemporal import MySQLDate, MySQLDateTime

T = row_pb2.ColumnType

# name, type, extra Column fields, MySQL type
COLUMNS: list[tuple[str, int, dict[str, object], str]] = [
    ("id", T.BIGINT, {}, "BIGINT NOT NULL"),
    ("i8", T.TINYINT, {}, "TINYINT"),
    ("u64", T.BIGINT, {"unsigned": True}, "BIGINT UNSIGNED"),
    ("dec", T.DECIMAL, {"precision": 20, "scale": 6}, "DECIMAL(20,6)"),
    ("f", T.FLOAT, {}, "FLOAT"),
    ("d", T.DOUBLE, {}, "DOUBLE"),
    ("bits", T.BIT, {"length": 64}, "BIT(64)"),
    ("y", T.YEAR, {}, "YEAR"),
    ("dt", T.DATE, {}, "DATE"),
    ("dtm", T.DATETIME, {"fsp": 6}, "DATETIME(6)"),
    ("ts", T.TIMESTAMP, {"fsp": 3}, "TIMESTAMP(3) NULL"),
    ("tm", T.TIME, {"fsp": 2}, "TIME(2)"),
    ("ch", T.CHAR, {"length": 5}, "CHAR(5)"),
    ("vc", T.VARCHAR, {"length": 50}, "VARCHAR(50)"),
    ("tx", T.TEXT, {}, "TEXT"),
    ("bn", T.BINARY, {"length": 4}, "BINARY(4)"),
    ("vb", T.VARBINARY, {"length": 10}, "VARBINARY(10)"),
    ("bl", T.BLOB, {}, "BLOB"),
    ("js", T.JSON, {}, "JSON"),
    ("en", T.ENUM, {"elems": ["a", "b"]}, "ENUM('a','b')"),
    ("st", T.SET, {"elems": ["x", "y", "z"]}, "SET('x','y','z')"),
]

ROWS: list[tuple[object, ...]] = [
    (
        1, -128, (1 << 64) - 1, Decimal("-12345678901234.123456"), 1.5, 0.1 + 0.2, (1 << 63) + 1, 2155,
        date(2024, 2, 29), datetime(2024, 1, 2, 3, 4, 5, 123456),
        datetime(2030, 1, 1, 0, 0, 0, 123000, tzinfo=UTC),
        -timedelta(hours=838, minutes=59, seconds=58, microseconds=990000), "abc", "héllo ✓ 日本", "x" * 1000,
        b"\x00\x01\x02\x03", b"\xff\x00", bytes(range(256)), '{"b": [1, 2.5, null], "a": "x"}', "b", "x,z",
    ),
    (
        2, 0, 0, Decimal("0.000000"), 0.0, 1e300, 0, 1901, MySQLDate(0, 0, 0), MySQLDateTime(0, 0, 0),
        datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), timedelta(0), "", "", "", b"abcd", b"", b"", "[]", "a", "",
    ),
    (3,) + (None,) * (len(COLUMNS) - 1),
]  # fmt: skip


def schema(db: str, table: str = "all_types", table_id: int = 7) -> row_pb2.TableSchema:
    result = row_pb2.TableSchema(db=db, table=table, table_id=table_id, max_column_id=len(COLUMNS))
    for i, (name, kind, extra, _) in enumerate(COLUMNS, start=1):
        result.columns.add(id=i, name=name, type=kind, nullable=name != "id", **extra)
    result.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return result


def mysql_ddl(db: str, table: str = "all_types") -> str:
    columns = ", ".join(f"`{name}` {sql}" for name, _, _, sql in COLUMNS)
    return f"CREATE TABLE `{db}`.`{table}` ({columns}, PRIMARY KEY (id))"


def mysql_value(value: object) -> object:
    """A row value as pymysql should send it (zero dates as text, TIMESTAMP as naive UTC)."""
    if isinstance(value, MySQLDate | MySQLDateTime):
        return str(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    return value
