"""The upstream type mappings without a database: SQLite declared types and their stored forms,
MySQL information_schema rows, ENUM/SET members and MariaDB's JSON checks."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from bridge.producer import mysql_types, sqlite_types
from bridge.producer.errors import UnsupportedSchema
from bridge.proto import row_pb2
from bridge.rowcodec import MySQLDate, MySQLDateTime, RowCodec
from bridge.rowvalues import RowValueError

T = row_pb2.ColumnType


@pytest.mark.parametrize(
    ("declared", "fields"),
    [
        ("INTEGER", {"type": T.BIGINT}),
        ("int unsigned", {"type": T.INT, "unsigned": True}),
        ("BOOLEAN", {"type": T.TINYINT}),
        ("DOUBLE PRECISION", {"type": T.DOUBLE}),
        ("FLOAT", {"type": T.FLOAT}),
        ("DECIMAL(12, 2)", {"type": T.DECIMAL, "precision": 12, "scale": 2}),
        ("NUMERIC(9)", {"type": T.DECIMAL, "precision": 9, "scale": 0}),
        ("BIT(5)", {"type": T.BIT, "length": 5}),
        ("DATETIME(6)", {"type": T.DATETIME, "fsp": 6}),
        ("timestamp", {"type": T.TIMESTAMP, "fsp": 0}),
        ("TIME(2)", {"type": T.TIME, "fsp": 2}),
        ("VARCHAR(64)", {"type": T.VARCHAR, "length": 64}),
        ("NVARCHAR(3)", {"type": T.VARCHAR, "length": 3}),
        ("CLOB", {"type": T.TEXT}),
        ("BINARY(16)", {"type": T.BINARY, "length": 16}),
        ("LONGBLOB", {"type": T.BLOB}),
        ("JSON", {"type": T.JSON}),
    ],
)
def test_sqlite_declared_types(declared: str, fields: dict[str, Any]) -> None:
    column = sqlite_types.column_from_declared("c", declared, "main.t")
    assert {name: getattr(column, name) for name in fields} == fields
    assert column.sql_type == declared.strip()


@pytest.mark.parametrize(
    ("declared", "fragment"),
    [
        ("", "does not map"),
        ("GEOMETRY", "does not map"),
        ("ENUM('a','b')", "does not map"),
        ("DECIMAL(20,2)", "1 <= p <= 15"),
        ("DECIMAL", "1 <= p <= 15"),
        ("TEXT UNSIGNED", "integer types only"),
    ],
)
def test_sqlite_refused_types_name_the_column(declared: str, fragment: str) -> None:
    with pytest.raises(UnsupportedSchema, match=fragment) as caught:
        sqlite_types.column_from_declared("price", declared, "main.t")
    assert "'price'" in str(caught.value)


def sqlite_column(declared: str) -> row_pb2.Column:
    column = sqlite_types.column_from_declared("c", declared, "main.t")
    column.id, column.nullable = 1, True
    return column


@pytest.mark.parametrize(
    ("declared", "given", "stored", "decoded"),
    [
        ("DECIMAL(10,2)", Decimal("-1.5"), "-1.5", Decimal("-1.50")),
        ("DATE", date(2024, 2, 29), "2024-02-29", date(2024, 2, 29)),
        ("DATE", MySQLDate(0, 0, 0), "0000-00-00", MySQLDate(0, 0, 0)),
        ("DATETIME(3)", datetime(2024, 1, 2, 3, 4, 5, 120000), "2024-01-02 03:04:05.12", None),
        ("DATETIME", MySQLDateTime(2024, 0, 0), "2024-00-00 00:00:00", None),
        (
            "TIMESTAMP(6)",
            datetime(2024, 1, 2, 8, 0, 0, 1, tzinfo=timezone(timedelta(hours=8))),
            "2024-01-02 00:00:00.000001",
            datetime(2024, 1, 2, 0, 0, 0, 1, tzinfo=UTC),
        ),
        ("TIME(1)", -timedelta(hours=100, seconds=1, microseconds=500000), "-100:00:01.5", None),
        ("JSON", {"b": 1, "a": [True]}, '{"a":[true],"b":1}', '{"a":[true],"b":1}'),
        ("VARBINARY(4)", bytearray(b"ab"), b"ab", b"ab"),
    ],
)
def test_sqlite_stored_forms_round_trip(declared: str, given: Any, stored: Any, decoded: Any) -> None:
    column = sqlite_column(declared)
    adapter = sqlite_types.adapter_for(column)
    assert adapter.to_db(given) == stored
    back = adapter.from_db(stored)
    codec = RowCodec(row_pb2.TableSchema(table="t", columns=[column]))
    assert codec.decode(codec.encode([back])) == (given if decoded is None else decoded,)


def test_sqlite_numeric_affinity_values_come_back_as_their_type() -> None:
    # NUMERIC affinity stores "1.50" as REAL 1.5 and the JSON text "12" as INTEGER 12.
    assert sqlite_types.adapter_for(sqlite_column("DECIMAL(6,2)")).from_db(1.5) == Decimal("1.5")
    assert sqlite_types.adapter_for(sqlite_column("DECIMAL(15,4)")).from_db(12345678901.1234) == Decimal(
        "12345678901.1234"
    )
    assert sqlite_types.adapter_for(sqlite_column("JSON")).from_db(12) == "12"
    assert sqlite_types.adapter_for(sqlite_column("DOUBLE")).from_db(3) == 3.0
    with pytest.raises(RowValueError, match="naive"):
        sqlite_types.adapter_for(sqlite_column("DATETIME")).to_db(datetime(2024, 1, 1, tzinfo=UTC))


def info_row(name: str, data_type: str, column_type: str, **kw: Any) -> tuple[Any, ...]:
    """A row as mysql_types.COLUMNS_SQL returns it."""
    return (
        name,
        data_type,
        column_type,
        kw.get("default"),
        kw.get("nullable", "YES"),
        kw.get("max_len"),
        kw.get("precision"),
        kw.get("scale"),
        kw.get("fsp"),
        kw.get("charset"),
        kw.get("collation"),
        kw.get("extra", ""),
    )


def test_mysql_columns_from_information_schema() -> None:
    def column(
        row: tuple[Any, ...], mariadb: bool = True, json: frozenset[str] = frozenset()
    ) -> row_pb2.Column:
        return mysql_types.column_from_info(row, "d.t", set(json), mariadb)

    c = column(info_row("id", "bigint", "bigint(20) unsigned", nullable="NO", extra="auto_increment"))
    assert (c.type, c.unsigned, c.nullable, c.auto_increment, c.HasField("default_value")) == (
        T.BIGINT,
        True,
        False,
        True,
        False,
    )
    c = column(info_row("p", "decimal", "decimal(10,3)", precision=10, scale=3, default="1.500"))
    assert (c.precision, c.scale, c.default_value) == (10, 3, "1.500")
    c = column(info_row("e", "enum", "enum('a','it''s','b\\\\c')", default="'a'"))
    assert list(c.elems) == ["a", "it's", "b\\c"]
    assert column(info_row("j", "longtext", "longtext"), json=frozenset({"j"})).type == T.JSON
    assert column(info_row("j", "longtext", "longtext")).type == T.TEXT
    assert column(info_row("b", "bit", "bit(5)", precision=5)).length == 5
    assert column(info_row("v", "varchar", "varchar(9)", max_len=9)).length == 9
    assert column(info_row("t", "datetime", "datetime(3)", fsp=3)).fsp == 3
    with pytest.raises(UnsupportedSchema, match="'g'"):
        column(info_row("g", "geometry", "geometry"))


def test_mysql_defaults_become_sql_text() -> None:
    def default(row: tuple[Any, ...]) -> str | None:
        c = mysql_types.column_from_info(row, "d.t", set(), mariadb=False)
        return c.default_value if c.HasField("default_value") else None

    assert default(info_row("s", "varchar", "varchar(5)", max_len=5, default="it's")) == "'it''s'"
    assert default(info_row("n", "int", "int", default="7")) == "7"
    assert default(
        info_row("t", "timestamp", "timestamp", default="CURRENT_TIMESTAMP", extra="DEFAULT_GENERATED")
    ) == ("CURRENT_TIMESTAMP")
    assert default(info_row("x", "int", "int")) is None


def test_mariadb_json_checks_and_indexes() -> None:
    clauses = ["json_valid(`doc`)", "`a` > 0", "json_valid(`we``ird`) and json_valid(`x`)"]
    assert mysql_types.json_columns(clauses) == {"doc", "we`ird", "x"}
    indexes = mysql_types.indexes_from_info(
        [("PRIMARY", 0, "a"), ("PRIMARY", 0, "b"), ("by_c", 1, "c"), ("uq", 0, "d")]
    )
    assert [(i.name, i.primary, i.unique, list(i.columns)) for i in indexes] == [
        ("PRIMARY", True, True, ["a", "b"]),
        ("by_c", False, False, ["c"]),
        ("uq", False, True, ["d"]),
    ]


def test_mysql_adapters() -> None:
    def adapter(column_type: row_pb2.ColumnType, **kw: Any) -> Any:
        return mysql_types.adapter_for(row_pb2.Column(name="c", type=column_type, **kw))

    aware = datetime(2024, 1, 1, 9, tzinfo=timezone(timedelta(hours=9)))
    assert adapter(T.TIMESTAMP).to_db(aware) == datetime(2024, 1, 1, 0)
    assert adapter(T.DATE).from_db("0000-00-00") == MySQLDate(0, 0, 0)
    assert adapter(T.DATETIME).from_db("2024-00-01 10:00:00.5") == MySQLDateTime(2024, 0, 1, 10, 0, 0, 500000)
    assert adapter(T.SET, elems=["x", "y", "z"]).to_db({"z", "x"}) == "x,z"
    assert adapter(T.JSON).to_db({"b": None, "a": 1}) == '{"a":1,"b":null}'
    assert adapter(T.BINARY, length=4).to_db(b"ab") == b"ab\x00\x00"
