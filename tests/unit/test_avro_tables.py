"""bridge.avro: the type mapping, names, key/value schemas and the values() inverse."""

from __future__ import annotations

import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from bridge.avro import ENVELOPE_OPS, TableAvro, field_names, source_record, table_avro
from bridge.avro.tables import ChangeKind
from bridge.errors import ProtocolError
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from bridge.rowtemporal import MySQLDate, MySQLDateTime
from tests.support import all_types

T = row_pb2.ColumnType
SOURCE = source_record(
    cluster_id=9, db="shop", table="all_types", start_ts=10, commit_ts=20, pos=3, last=False
)


def roundtrip(schema: dict[str, Any] | None, record: object) -> dict[str, Any]:
    """``record`` written with the record schema ``schema`` and read back."""
    assert schema is not None
    parsed = parse_schema(schema)
    out = io.BytesIO()
    schemaless_writer(out, parsed, record)
    out.seek(0)
    result = schemaless_reader(out, parsed, None)
    assert out.tell() == len(out.getvalue())
    assert isinstance(result, dict)
    return result


def field_type(ta: TableAvro, name: str) -> object:
    return next(f["type"] for f in ta.row_schema["fields"] if f["name"] == name)


@pytest.mark.parametrize("row", all_types.ROWS, ids=lambda r: f"row{r[0]}")
@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
def test_every_type_round_trips_through_rowcodec_and_the_envelope(
    row: tuple[object, ...], kind: ChangeKind
) -> None:
    schema = all_types.schema("shop")
    codec = RowCodec(schema)
    values = codec.decode(codec.encode(row))  # exactly what the syncer hands a sink
    ta = table_avro(schema)
    before = None if kind == "insert" else values
    after = None if kind == "delete" else values
    record = roundtrip(ta.value_schema, ta.envelope(kind, before, after, SOURCE, 1234))
    assert isinstance(record, dict)
    assert record["op"] == ENVELOPE_OPS[kind]
    assert record["source"] == SOURCE
    assert record["ts_ms"] == 1234
    for image, sent in (("before", before), ("after", after)):
        if sent is None:
            assert record[image] is None
        else:
            got = ta.values(record[image])
            assert got == values
            # same Python types, not just equal values (Decimal vs int, date vs datetime)
            assert [type(v) for v in got] == [type(v) for v in values]


def test_the_type_mapping() -> None:
    ta = table_avro(all_types.schema("shop"))
    decimal20 = {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 0}
    assert field_type(ta, "id") == "long"
    assert field_type(ta, "i8") == ["null", "int"]
    assert field_type(ta, "u64") == ["null", decimal20]
    assert field_type(ta, "bits") == ["null", decimal20]
    assert field_type(ta, "dec") == [
        "null",
        {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 6},
    ]
    assert field_type(ta, "f") == ["null", "double"]
    assert field_type(ta, "y") == ["null", "int"]
    assert field_type(ta, "dt") == ["null", {"type": "int", "logicalType": "date"}, "string"]
    assert field_type(ta, "dtm") == [
        "null",
        {"type": "long", "logicalType": "local-timestamp-micros"},
        "string",
    ]
    assert field_type(ta, "ts") == ["null", {"type": "long", "logicalType": "timestamp-micros"}, "string"]
    assert field_type(ta, "tm") == ["null", {"type": "long", "bridge.type": "time-micros"}]
    assert field_type(ta, "js") == ["null", {"type": "string", "bridge.type": "json"}]
    for name in ("ch", "vc", "tx", "en", "st"):
        assert field_type(ta, name) == ["null", "string"]
    for name in ("bn", "vb", "bl"):
        assert field_type(ta, name) == ["null", "bytes"]
    nullable = [f for f in ta.row_schema["fields"] if f["name"] != "id"]
    assert all(f["default"] is None for f in nullable)
    assert ta.row_schema["fields"][0]["default"] == 0  # NOT NULL: MySQL's implicit default


def int_table(*columns: tuple[str, int, bool]) -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(db="d", table="t", table_id=1)
    for i, (name, kind, unsigned) in enumerate(columns, start=1):
        schema.columns.add(id=i, name=name, type=kind, unsigned=unsigned, nullable=False)
    return schema


def test_integer_widths_follow_the_unsigned_range() -> None:
    schema = int_table(
        ("a", T.TINYINT, True),
        ("b", T.SMALLINT, True),
        ("c", T.MEDIUMINT, True),
        ("d", T.INT, True),
        ("e", T.INT, False),
        ("f", T.BIGINT, False),
    )
    schema.columns.add(id=7, name="g", type=T.BIT, length=63)
    ta = table_avro(schema)
    assert [f["type"] for f in ta.row_schema["fields"]] == [
        "int",
        "int",
        "long",
        "long",
        "int",
        "long",
        "long",
    ]
    row = (255, 65535, (1 << 24) - 1, (1 << 32) - 1, -(1 << 31), -(1 << 63), (1 << 63) - 1)
    assert ta.values(roundtrip(ta.row_schema, ta.row_record(row))) == row


def test_temporal_edges() -> None:
    schema = row_pb2.TableSchema(db="d", table="t", table_id=1)
    schema.columns.add(id=1, name="dt", type=T.DATE)
    schema.columns.add(id=2, name="dtm", type=T.DATETIME, fsp=6)
    schema.columns.add(id=3, name="ts", type=T.TIMESTAMP, fsp=6, nullable=True)
    schema.columns.add(id=4, name="tm", type=T.TIME, fsp=6, nullable=True)
    ta = table_avro(schema)
    rows = [
        (
            date(1, 1, 1),
            datetime(1, 1, 1),
            datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
            timedelta(hours=838, seconds=59),
        ),
        (
            date(9999, 12, 31),
            datetime(9999, 12, 31, 23, 59, 59, 999999),
            MySQLDateTime(0, 0, 0),
            -timedelta(1),
        ),
        (
            MySQLDate(2024, 0, 15),
            MySQLDateTime(2024, 2, 0, 1, 2, 3, 450000),
            None,
            timedelta(microseconds=-1),
        ),
        (date(1969, 12, 31), datetime(1969, 12, 31, 23, 59, 59, 999999), None, None),
    ]
    for row in rows:
        assert ta.values(roundtrip(ta.row_schema, ta.row_record(row))) == row
    # the logical-type branch is what a plain consumer sees for valid values
    plain = roundtrip(ta.row_schema, ta.row_record(rows[0]))
    assert plain == {
        "dt": date(1, 1, 1),
        "dtm": datetime(1, 1, 1),
        "ts": datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
        "tm": (838 * 3600 + 59) * 1_000_000,
    }
    assert roundtrip(ta.row_schema, ta.row_record(rows[2]))["dt"] == "2024-00-15"


def test_decimal_is_exact_including_undeclared_precision() -> None:
    schema = row_pb2.TableSchema(db="d", table="t", table_id=1)
    schema.columns.add(id=1, name="p", type=T.DECIMAL, precision=65, scale=30)
    schema.columns.add(id=2, name="u", type=T.DECIMAL)
    ta = table_avro(schema)
    big = Decimal("-" + "9" * 35 + "." + "9" * 30)
    undeclared = Decimal("9" * 65 + "." + "1" * 30)
    got = ta.values(roundtrip(ta.row_schema, ta.row_record((big, undeclared))))
    assert got == (big, undeclared)
    assert str(got[0]) == str(big)


def test_names_are_sanitized_and_the_original_kept() -> None:
    schema = row_pb2.TableSchema(db="my-db", table="1st table", table_id=1)
    for i, name in enumerate(["id", "a-b", "a_b", "2x", "héllo", "ok_name", "a b"], start=1):
        schema.columns.add(id=i, name=name, type=T.INT, nullable=name != "id")
    schema.indexes.add(name="PRIMARY", primary=True, columns=["id"])
    ta = table_avro(schema, namespace="acme.cdc")
    assert field_names(schema) == ("id", "a_b_2", "a_b", "_2x", "h_llo", "ok_name", "a_b_7")
    assert ta.namespace == "acme.cdc.my_db._1st_table"
    assert ta.value_schema["name"] == "Envelope"
    assert ta.value_schema["namespace"] == "acme.cdc.my_db._1st_table"
    assert ta.value_schema["bridge.name"] == "my-db.1st table"
    assert ta.key_schema is not None and ta.key_schema["name"] == "Key"
    originals = {f["name"]: f.get("bridge.name") for f in ta.row_schema["fields"]}
    assert originals == {
        "id": None,
        "a_b_2": "a-b",
        "a_b": None,
        "_2x": "2x",
        "h_llo": "héllo",
        "ok_name": None,
        "a_b_7": "a b",
    }
    row = (1, 2, 3, 4, 5, 6, None)
    parse_schema(ta.value_schema)  # fastavro accepts every name
    assert ta.values(roundtrip(ta.row_schema, ta.row_record(row))) == row


def test_keys() -> None:
    ta = table_avro(all_types.schema("shop"))
    assert ta.key_schema == {
        "type": "record",
        "name": "Key",
        "namespace": "bridge.shop.all_types",
        "fields": [{"name": "id", "type": "long", "default": 0}],
        "bridge.name": "shop.all_types",
    }
    assert ta.key_record(all_types.ROWS[0]) == {"id": 1}

    # no primary key: the first unique index over NOT NULL columns
    schema = row_pb2.TableSchema(db="d", table="t", table_id=1)
    schema.columns.add(id=1, name="a", type=T.VARCHAR, length=10, nullable=True)
    schema.columns.add(id=2, name="b", type=T.DATE, nullable=False)
    schema.columns.add(id=3, name="c", type=T.BIGINT, unsigned=True, nullable=False)
    schema.indexes.add(name="ua", unique=True, columns=["a"])
    schema.indexes.add(name="ucb", unique=True, columns=["c", "b"])
    ta = table_avro(schema)
    assert ta.key_schema is not None
    assert [f["name"] for f in ta.key_schema["fields"]] == ["c", "b"]
    key = ta.key_record(("x", MySQLDate(0, 0, 0), (1 << 64) - 1))
    assert roundtrip(ta.key_schema, key) == {"c": Decimal((1 << 64) - 1), "b": "0000-00-00"}


def test_keyless_table_has_no_key_schema() -> None:
    schema = row_pb2.TableSchema(db="d", table="log", table_id=1)
    schema.columns.add(id=1, name="msg", type=T.TEXT, nullable=True)
    schema.indexes.add(name="m", unique=True, columns=["msg"])  # nullable: does not identify a row
    ta = table_avro(schema)
    assert ta.key_schema is None
    assert ta.key_record(("hello",)) is None
    record = roundtrip(ta.value_schema, ta.envelope("delete", ("hello",), None, SOURCE, 1))
    assert record["before"] == {"msg": "hello"}


def test_envelope_refuses_images_that_do_not_match_the_kind() -> None:
    ta = table_avro(all_types.schema("shop"))
    row = all_types.ROWS[2]
    with pytest.raises(ValueError, match="insert needs after images only"):
        ta.envelope("insert", row, row, SOURCE, 1)
    with pytest.raises(ValueError, match="update needs before and after"):
        ta.envelope("update", None, row, SOURCE, 1)
    with pytest.raises(ValueError, match="delete needs before"):
        ta.envelope("delete", None, row, SOURCE, 1)
    with pytest.raises(ValueError, match="unknown change kind 'upsert'"):
        ta.envelope("upsert", None, row, SOURCE, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="row has 1 values for 21 columns"):
        ta.row_record((1,))


def test_values_names_table_and_field_on_bad_records() -> None:
    ta = table_avro(all_types.schema("shop"))
    record = roundtrip(ta.row_schema, ta.row_record(all_types.ROWS[0]))
    assert isinstance(record, dict)
    del record["js"]
    with pytest.raises(ProtocolError, match=r"table shop\.all_types: the record has no field 'js'"):
        ta.values(record)
    record["js"] = None
    record["dt"] = "not-a-date"
    with pytest.raises(ProtocolError, match=r"table shop\.all_types: field 'dt'"):
        ta.values(record)
    with pytest.raises(ProtocolError, match=r"table shop\.all_types: expected a row record, got NoneType"):
        ta.values(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"table shop\.all_types: key: expects a datetime.date"):
        table_avro(date_keyed()).key_record(("2024-01-01",))


def date_keyed() -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(db="shop", table="all_types", table_id=1)
    schema.columns.add(id=1, name="day", type=T.DATE)
    schema.indexes.add(name="PRIMARY", primary=True, columns=["day"])
    return schema


def test_schemas_are_stable_objects_and_deterministic() -> None:
    a = table_avro(all_types.schema("shop"))
    b = table_avro(all_types.schema("shop"))
    assert a.value_schema is a.value_schema
    assert a.value_schema == b.value_schema
    assert a.key_schema == b.key_schema


def test_published_schema_files_parse_and_are_what_the_package_uses() -> None:
    import json

    from bridge.avro import DDL_SCHEMA, SOURCE_SCHEMA
    from bridge.avro.events import SCHEMA_DIR

    files = sorted(SCHEMA_DIR.glob("*.avsc"))
    assert [f.name for f in files] == ["ddl_event.avsc", "source.avsc"]
    for path in files:
        parse_schema(json.loads(path.read_text()))
    assert json.loads((SCHEMA_DIR / "source.avsc").read_text()) == SOURCE_SCHEMA
    assert json.loads((SCHEMA_DIR / "ddl_event.avsc").read_text()) == DDL_SCHEMA
    envelope = table_avro(all_types.schema("shop")).value_schema
    assert envelope["fields"][3]["type"] == SOURCE_SCHEMA
    assert envelope["fields"][3]["type"] is not SOURCE_SCHEMA  # a copy: fastavro may annotate it


def test_decimal_defaults_are_exact_beyond_the_default_context_precision() -> None:
    from bridge.avro.types import _decimal_from_avro, _json_default

    decimal = {"type": "bytes", "logicalType": "decimal", "precision": 65, "scale": 30}
    value = Decimal("-" + "9" * 35 + "." + "9" * 30)
    default = _json_default(decimal, value)
    assert default == (-(10**65) + 1).to_bytes(28, "big", signed=True).decode("latin-1")
    assert _decimal_from_avro(default, 30) == value
