"""bridge.avro.writer: the compiled writer writes exactly fastavro's bytes, and leaves to fastavro
(through the codecs) every datum outside its rules."""

from __future__ import annotations

import io
import math
import random
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader, schemaless_writer

from bridge.avro import DDL_SCHEMA, SingleObjectCodec, ddl_record, source_record, table_avro
from bridge.avro.writer import Fallback, Unsupported, compile_writer
from bridge.proto import row_pb2
from tests.support import all_types

SOURCE = source_record(
    cluster_id=9, db="shop", table="all_types", start_ts=10, commit_ts=20, pos=0, last=True
)


def reference(schema: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), datum)
    return out.getvalue()


def compiled(schema: Any, datum: Any) -> bytes:
    out = bytearray()
    compile_writer(schema)(out, datum)
    return bytes(out)


def same(schema: Any, datum: Any) -> None:
    assert compiled(schema, datum) == reference(schema, datum)


@pytest.mark.parametrize("kind", ["insert", "update", "delete"])
def test_table_envelopes_and_keys_are_byte_identical(kind: str) -> None:
    ta = table_avro(all_types.schema("shop"))
    for row in all_types.ROWS:
        before = None if kind == "insert" else row
        after = None if kind == "delete" else row
        same(ta.value_schema, ta.envelope(kind, before, after, SOURCE, 1_700_000_000_000))  # type: ignore[arg-type]
        same(ta.key_schema, ta.key_record(row))


def test_ddl_records_are_byte_identical() -> None:
    change = row_pb2.SchemaChange(kind=row_pb2.SchemaChange.CREATE_TABLE, db="shop", table="all_types")
    change.table_schema.CopyFrom(all_types.schema("shop"))
    same(
        DDL_SCHEMA,
        ddl_record(change, cluster_id=1, start_ts=5, commit_ts=6, query="CREATE TABLE ...", topic="t"),
    )


INTS = [0, 1, -1, 63, 64, -64, -65, 127, 128, 8191, 8192, -(1 << 31), (1 << 31) - 1]
LONGS = [*INTS, 1 << 31, -(1 << 31) - 1, -(1 << 63), (1 << 63) - 1, 1 << 56]


@pytest.mark.parametrize(
    ("schema", "values"),
    [
        ("int", INTS),
        ("long", LONGS),
        ({"type": "long", "logicalType": "timestamp-micros"}, LONGS),
        ("double", [0.0, -0.0, 1.5, 1e300, -2.5e-308, math.inf, -math.inf, 3, -(1 << 60)]),
        ("float", [0.0, 1.5, -2.25, 7]),
        ("boolean", [True, False]),
        ("string", ["", "a", "héllo ✓ 日本", "x" * 300, "\x00"]),
        ("bytes", [b"", b"\x00", bytes(range(256)), b"x" * 200]),
        ("null", [None]),
        ({"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}, ["A", "C"]),
        ({"type": "fixed", "name": "F", "size": 3}, [b"abc", b"\x00\x00\x00"]),
        ({"type": "array", "items": "long"}, [[], [1, -2, 300], (5,)]),
        ({"type": "map", "values": "string"}, [{}, {"a": "x", "b": ""}]),
        (["null", "long", "string"], [None, 5, -(1 << 40), "five"]),
        (["long", "double"], [5, 5.5]),
        (["double", "long"], [5, 5.5]),
        (["string", "null"], [None, "x"]),
        (
            ["null", {"type": "int", "logicalType": "date"}, "string"],
            [None, 19000, ("string", "0000-00-00")],
        ),
        (["null", {"type": "enum", "name": "E", "symbols": ["A"]}, "string"], [None, "A", "B"]),
    ],
)
def test_primitives_and_unions_are_byte_identical(schema: Any, values: list[Any]) -> None:
    for value in values:
        same(schema, value)


@pytest.mark.parametrize(
    "value",
    [
        Decimal("0"),
        Decimal("-0.00"),
        Decimal("0.00"),
        Decimal("1.5"),
        Decimal("-1.50"),
        Decimal("127"),
        Decimal("128"),
        Decimal("-128"),
        Decimal("-129"),
        Decimal("1E+3"),
        Decimal("-" + "9" * 63 + ".99"),
        Decimal("9" * 63 + ".99"),
    ],
)
def test_decimals_are_byte_identical(value: Decimal) -> None:
    schema = {"type": "bytes", "logicalType": "decimal", "precision": 65, "scale": 2}
    same(schema, value)
    same(["null", schema], value)
    got = schemaless_reader(io.BytesIO(compiled(schema, value)), parse_schema(schema), None)
    assert got == value


def test_named_references_nesting_and_recursion() -> None:
    node = {
        "type": "record",
        "name": "Node",
        "namespace": "x.y",
        "fields": [
            {"name": "value", "type": "long"},
            {"name": "next", "type": ["null", "Node"], "default": None},
            {"name": "tag", "type": {"type": "enum", "name": "Tag", "symbols": ["A", "B"]}},
            {"name": "again", "type": ["null", "x.y.Tag"]},
        ],
    }
    datum = {
        "value": 1,
        "tag": "A",
        "again": None,
        "next": {"value": 2, "tag": "B", "again": "A", "next": None},
    }
    same(node, datum)
    wrapper = {
        "type": "record",
        "name": "W",
        "fields": [
            {"name": "a", "type": node},
            {"name": "b", "type": "x.y.Node"},
            {"name": "c", "type": "x.y.Tag"},
        ],
    }
    same(wrapper, {"a": datum, "b": datum, "c": "B"})


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ("int", 1 << 31),
        ("long", 1 << 63),
        ("int", True),
        ("long", 1.0),
        ("double", "1"),
        ("string", b"x"),
        ("bytes", "x"),
        ("bytes", bytearray(b"x")),
        ({"type": "int", "logicalType": "date"}, date(2024, 1, 1)),
        ({"type": "long", "logicalType": "timestamp-micros"}, datetime(2024, 1, 1, tzinfo=UTC)),
        ({"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 1}, Decimal("1.25")),
        ({"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 1}, Decimal("1234")),
        ({"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 1}, Decimal("NaN")),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, "B"),
        ({"type": "fixed", "name": "F", "size": 2}, b"abc"),
        ({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int", "default": 3}]}, {}),
        (["null", "long"], "x"),
        (["null", "long"], ("double", 1.0)),
        (["null", "long", "string"], 1.5),
        # fastavro would parse the text as an ISO date and pick the date branch
        (["null", {"type": "int", "logicalType": "date"}, "string"], "2024-01-02"),
        (
            [
                "null",
                {"type": "int", "logicalType": "date"},
                "string",
                {"type": "enum", "name": "E", "symbols": ["A"]},
            ],
            "x",
        ),
    ],
)
def test_datums_outside_the_rules_fall_back(schema: Any, value: Any) -> None:
    with pytest.raises((Fallback, KeyError, OverflowError)):
        compiled(schema, value)


def test_the_codec_writes_fallback_datums_with_fastavro() -> None:
    """What fastavro takes and the compiled writer does not (defaults, datetimes, bytearray)
    is still encoded, exactly as fastavro encodes it."""
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
            {"name": "raw", "type": "bytes"},
            {"name": "n", "type": "int", "default": 7},
        ],
    }
    datum = {"ts": datetime(2024, 1, 1, tzinfo=UTC), "day": date(2024, 1, 2), "raw": bytearray(b"ab")}
    data = SingleObjectCodec(lambda value, text: None).encode("s", schema, datum)
    assert data[10:] == reference(schema, datum)


def test_schemas_beyond_the_compiled_writer_are_refused_at_compile_time() -> None:
    two_records = [
        {"type": "record", "name": "A", "fields": [{"name": "a", "type": "int"}]},
        {"type": "record", "name": "B", "fields": [{"name": "b", "type": "int"}]},
    ]
    with pytest.raises(Unsupported, match="several records"):
        compile_writer(two_records)
    with pytest.raises(Unsupported, match="unknown named type"):
        compile_writer({"type": "record", "name": "R", "fields": [{"name": "a", "type": "Missing"}]})
    data = SingleObjectCodec(lambda value, text: None).encode("s", two_records, {"b": 1})  # type: ignore[arg-type]
    assert data[10:] == reference(two_records, {"b": 1})


PRIMITIVE_FIELDS = ["int", "long", "float", "double", "boolean", "string", "bytes"]


def test_inlined_record_fields_are_byte_identical() -> None:
    schema = {
        "type": "record",
        "name": "Wide",
        "fields": [
            *({"name": f"p_{kind}", "type": kind} for kind in PRIMITIVE_FIELDS),
            *({"name": f"n_{kind}", "type": ["null", kind]} for kind in PRIMITIVE_FIELDS),
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "nothing", "type": "null"},
        ],
    }
    samples: dict[str, list[Any]] = {
        "int": [0, 63, 64, -1, -(1 << 31), (1 << 31) - 1],
        "long": [0, 63, 64, -65, -(1 << 63), (1 << 63) - 1],
        "float": [0.0, -2.5, 3],
        "double": [1e-300, -0.0, 7],
        "boolean": [True, False],
        "string": ["", "é" * 40, "x" * 64, "y" * 10_000],
        "bytes": [b"", b"\x00" * 63, b"\xff" * 64],
    }
    for i in range(6):
        datum: dict[str, Any] = {"ts": -(i << 40), "nothing": None}
        for kind in PRIMITIVE_FIELDS:
            values = samples[kind]
            datum[f"p_{kind}"] = values[i % len(values)]
            datum[f"n_{kind}"] = None if i % 2 else values[(i + 1) % len(values)]
        same(schema, datum)
    datum["n_long"] = ("long", 5)  # union tuple notation on an inlined nullable field
    same(schema, datum)
    for field, bad in (
        ("p_int", True),
        ("n_long", 2.0),
        ("p_string", None),
        ("n_bytes", "x"),
        ("nothing", 0),
    ):
        with pytest.raises(Fallback):
            compiled(schema, {**datum, field: bad})
    del datum["p_int"]
    with pytest.raises(KeyError):
        compiled(schema, datum)


@pytest.mark.parametrize(("precision", "scale"), [(12, 2), (20, 0), (65, 30), (5, 5), (1, 0), (40, 10)])
def test_random_decimals_are_fastavros_bytes_or_fall_back_where_fastavro_refuses(
    precision: int, scale: int
) -> None:
    """The writer reads a Decimal's digits and exponent from its text where it has no exponent
    part, and from as_tuple() otherwise: both must be fastavro's (or refuse what it refuses)."""
    rng = random.Random(precision * 100 + scale)
    texts = ["-0.00", "0E-5", "0E+2", "-0", "1E-7", "0.0000001", "NaN", "-Infinity", "sNaN", "1.005"]
    for _ in range(400):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, precision + 2)))
        sign = rng.choice(["", "-"])
        texts.append(f"{sign}{digits}E{rng.randint(-scale - 2, 3)}")
        texts.append(str(Decimal(sign + digits).scaleb(-rng.randint(0, scale + 1))))
    schema = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    write = compile_writer(["null", schema])
    for text in texts:
        value = Decimal(text)
        try:
            expected: bytes | None = reference(["null", schema], value)
        except (ValueError, TypeError, ArithmeticError):
            expected = None
        out = bytearray()
        if expected is None:
            with pytest.raises(Fallback):
                write(out, value)
        else:
            write(out, value)
            assert bytes(out) == expected, text
