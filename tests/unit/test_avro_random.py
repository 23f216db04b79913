"""bridge.avro on seeded random tables and rows: every value the row codec accepts survives
envelope -> compiled writer -> fastavro reader -> values(), and the compiled writer's bytes are
fastavro's."""

from __future__ import annotations

import io
import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from bridge.avro import source_record, table_avro
from bridge.avro.writer import compile_writer
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from bridge.rowtemporal import ZERO_DATETIME, MySQLDate, MySQLDateTime

T = row_pb2.ColumnType
SOURCE = source_record(cluster_id=1, db="r", table="t", start_ts=1, commit_ts=2, pos=0, last=False)
INT_BITS = {T.TINYINT: 8, T.SMALLINT: 16, T.MEDIUMINT: 24, T.INT: 32, T.BIGINT: 64}
TEXT = "aé✓日\x00 ,'\"\\\n𝄞"


def random_column(rng: random.Random, column_id: int) -> row_pb2.Column:
    kind = rng.choice([k for k in T.values() if k != T.COLUMN_TYPE_UNSPECIFIED])
    column = row_pb2.Column(
        id=column_id, name=f"c{column_id}", type=T.Name(kind), nullable=rng.random() < 0.5
    )
    if kind in INT_BITS:
        column.unsigned = rng.random() < 0.5
    elif kind == T.BIT:
        column.length = rng.choice([1, 7, 8, 31, 63, 64])
    elif kind == T.DECIMAL:
        column.precision = rng.randint(1, 65)
        column.scale = rng.randint(0, min(30, column.precision))
    elif kind in (T.DATETIME, T.TIMESTAMP, T.TIME):
        column.fsp = rng.randint(0, 6)
    elif kind in (T.CHAR, T.VARCHAR, T.BINARY, T.VARBINARY):
        column.length = rng.randint(1, 40)
    elif kind in (T.ENUM, T.SET):
        column.elems.extend(["a", "b b", "ç", "d'"][: rng.randint(1, 4)])
    return column


def random_value(rng: random.Random, column: row_pb2.Column) -> object:
    kind = column.type
    if column.nullable and rng.random() < 0.2:
        return None
    if kind in INT_BITS:
        bits = INT_BITS[kind]
        if column.unsigned:
            return rng.choice([0, (1 << bits) - 1, rng.randrange(1 << bits)])
        return rng.choice(
            [-(1 << (bits - 1)), (1 << (bits - 1)) - 1, rng.randrange(-(1 << (bits - 1)), 1 << (bits - 1))]
        )
    if kind == T.BIT:
        return rng.choice([0, (1 << column.length) - 1, rng.randrange(1 << column.length)])
    if kind == T.YEAR:
        return rng.choice([0, 1901, 2155, rng.randint(1901, 2155)])
    if kind == T.DECIMAL:
        digits = "".join(rng.choice("0123456789") for _ in range(column.precision))
        whole, fraction = digits[: column.precision - column.scale], digits[column.precision - column.scale :]
        text = rng.choice(["", "-"]) + (whole or "0") + ("." + fraction if fraction else "")
        return Decimal(text)
    if kind in (T.FLOAT, T.DOUBLE):
        return rng.choice([0.0, -0.0, 1.5, rng.uniform(-1e300, 1e300), rng.random(), 5e-324])
    if kind == T.DATE:
        if rng.random() < 0.2:
            return rng.choice([MySQLDate(0, 0, 0), MySQLDate(2024, 0, 1), MySQLDate(2024, 2, 0)])
        return date.fromordinal(rng.randint(1, date(9999, 12, 31).toordinal()))
    if kind == T.DATETIME:
        micro = rng.randrange(10**6) // 10 ** (6 - column.fsp) * 10 ** (6 - column.fsp)
        if rng.random() < 0.2:
            return MySQLDateTime(0, rng.randint(0, 12), 0, rng.randint(0, 23), 0, rng.randint(0, 59), micro)
        day = date.fromordinal(rng.randint(1, date(9999, 12, 31).toordinal()))
        return datetime(
            day.year, day.month, day.day, rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), micro
        )
    if kind == T.TIMESTAMP:
        if rng.random() < 0.1:
            return ZERO_DATETIME
        unit = 10 ** (6 - column.fsp)
        low, high = 1_000_000, (2**31 - 1) * 1_000_000
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(
            microseconds=rng.randint(low, high) // unit * unit
        )
    if kind == T.TIME:
        unit = 10 ** (6 - column.fsp)
        limit = (838 * 3600 + 59 * 60 + 59) * 10**6
        return timedelta(microseconds=rng.randint(-limit, limit) // unit * unit)
    if kind in (T.CHAR, T.VARCHAR, T.TEXT):
        size = rng.randint(0, column.length or 200)
        return "".join(rng.choice(TEXT) for _ in range(size))
    if kind in (T.BINARY, T.VARBINARY, T.BLOB):
        size = column.length if kind == T.BINARY else rng.randint(0, column.length or 300)
        return rng.randbytes(size)
    if kind == T.JSON:
        return rng.choice(['{"a": [1, 2.5, null, "x"]}', "[]", "null", '"é"', "12345678901234567890"])
    if kind == T.ENUM:
        return rng.choice(list(column.elems))
    assert kind == T.SET
    return ",".join(e for e in column.elems if rng.random() < 0.5)


@pytest.mark.parametrize("seed", range(12))
def test_random_tables_round_trip_and_match_fastavro_bytes(seed: int) -> None:
    rng = random.Random(seed)
    schema = row_pb2.TableSchema(db="r", table=f"t{seed}", table_id=seed + 1)
    for column_id in range(1, rng.randint(2, 40)):
        schema.columns.add().CopyFrom(random_column(rng, column_id))
    schema.max_column_id = len(schema.columns)
    keys = [c.name for c in schema.columns if not c.nullable and c.type not in (T.FLOAT, T.DOUBLE)]
    if keys:
        schema.indexes.add(name="PRIMARY", primary=True, columns=keys[: rng.randint(1, len(keys))])
    codec = RowCodec(schema)
    ta = table_avro(schema)
    parsed = parse_schema(ta.value_schema)
    write = compile_writer(ta.value_schema)
    for _ in range(25):
        before = codec.decode(codec.encode([random_value(rng, c) for c in schema.columns]))
        after = codec.decode(codec.encode([random_value(rng, c) for c in schema.columns]))
        envelope = ta.envelope("update", before, after, SOURCE, 1)
        fast = bytearray()
        write(fast, envelope)
        reference = io.BytesIO()
        schemaless_writer(reference, parsed, envelope)
        assert bytes(fast) == reference.getvalue()
        record = schemaless_reader(io.BytesIO(bytes(fast)), parsed, None)
        assert isinstance(record, dict)
        assert ta.values(record["before"]) == before
        assert ta.values(record["after"]) == after
        if ta.key_schema is not None:
            key = bytearray()
            compile_writer(ta.key_schema)(key, ta.key_record(after))
            assert bytes(key) == _reference(ta.key_schema, ta.key_record(after))


def _reference(schema: dict[str, Any], datum: object) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), datum)
    return out.getvalue()


def _default_fits(avro_type: object, default: object) -> bool:
    """A field default is valid for its type (for a union: its first branch), as Java's Avro
    (which the Schema Registry runs) checks defaults when it parses a schema."""
    if isinstance(avro_type, list):
        avro_type = avro_type[0]
    kind = avro_type.get("type") if isinstance(avro_type, dict) else avro_type
    if kind == "null":
        return default is None
    if kind in ("int", "long"):
        limit = 1 << (31 if kind == "int" else 63)
        return type(default) is int and -limit <= default < limit
    if kind == "double":
        return type(default) in (int, float)
    if kind == "string":
        return type(default) is str
    if kind == "bytes":
        return type(default) is str and all(ord(ch) < 256 for ch in default)
    return False


@pytest.mark.parametrize("seed", range(12))
def test_every_field_default_is_valid_for_its_first_branch(seed: int) -> None:
    rng = random.Random(seed)
    schema = row_pb2.TableSchema(db="r", table="t", table_id=1)
    for column_id in range(1, 60):
        column = random_column(rng, column_id)
        if rng.random() < 0.5 and not column.nullable:
            column.default_value = {
                T.DATE: "'2020-02-29'",
                T.DATETIME: "CURRENT_TIMESTAMP",
                T.TIMESTAMP: "'1999-12-31 23:59:59'",
                T.TIME: "'-12:00:00'",
                T.DECIMAL: "1",
                T.JSON: "'{}'",
                T.BIT: "b'1'",
                T.YEAR: "2001",
            }.get(column.type, "'0'")
        schema.columns.add().CopyFrom(column)
    ta = table_avro(schema)
    for field in ta.row_schema["fields"]:
        assert "default" in field, field
        assert _default_fits(field["type"], field["default"]), field
