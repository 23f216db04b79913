"""bridge.avro.rowwriter: keys and envelopes written from the tuples are the bytes of the dict
route (records -> compiled writer, itself checked against fastavro), on seeded random tables of
every column type; what it does not take raises Fallback."""

from __future__ import annotations

import io
import random
from decimal import Decimal
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer

from bridge.avro import source_record, table_avro
from bridge.avro.rowwriter import FALLBACK_ERRORS, Fallback, RowWriter
from bridge.avro.tables import ChangeKind
from bridge.avro.writer import compile_writer
from bridge.proto import row_pb2
from bridge.rowcodec import RowCodec
from tests.unit.test_avro_random import random_column, random_value

T = row_pb2.ColumnType
HEADER = b"\xc3\x01abcdefgh"


def _fastavro(schema: dict[str, Any], datum: object) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), datum)
    return out.getvalue()


def _random_table(seed: int) -> row_pb2.TableSchema:
    rng = random.Random(seed)
    schema = row_pb2.TableSchema(db=f"d{seed}", table=f"t{seed}é", table_id=seed + 1)
    for column_id in range(1, rng.randint(2, 40)):
        schema.columns.add().CopyFrom(random_column(rng, column_id))
    schema.max_column_id = len(schema.columns)
    keys = [c.name for c in schema.columns if not c.nullable and c.type not in (T.FLOAT, T.DOUBLE)]
    if keys and seed % 5:
        schema.indexes.add(name="PRIMARY", primary=True, columns=keys[: rng.randint(1, len(keys))])
    return schema


@pytest.mark.parametrize("seed", range(16))
def test_keys_and_envelopes_are_the_bytes_of_the_records(seed: int) -> None:
    rng = random.Random(seed)
    schema = _random_table(seed)
    codec = RowCodec(schema)
    ta = table_avro(schema)
    writer = ta.row_writer()
    assert writer is not None
    value_write = compile_writer(ta.value_schema)
    start_ts, commit_ts = rng.randrange(1 << 62), rng.randrange(1 << 62, 1 << 63)
    ts_ms, cluster_id = rng.randrange(1 << 45), rng.choice([0, 1, 7, (1 << 63) - 1])
    prefix = writer.source(cluster_id, schema.db, schema.table, start_ts, commit_ts)
    for pos in [0, 1, 63, 64, 8191, 8192, rng.randrange(1 << 31)]:

        def row() -> tuple[object, ...]:
            return codec.decode(codec.encode([random_value(rng, c) for c in schema.columns]))

        changes: tuple[tuple[ChangeKind, tuple[object, ...] | None, tuple[object, ...] | None], ...]
        changes = (
            ("insert", None, row()),
            ("update", row(), row()),
            ("delete", row(), None),
        )
        for kind, before, after in changes:
            for snapshot, last in ((False, False), (False, True), (kind == "insert", pos % 2 == 0)):
                source = source_record(
                    cluster_id=cluster_id,
                    db=schema.db,
                    table=schema.table,
                    start_ts=start_ts,
                    commit_ts=commit_ts,
                    pos=pos,
                    last=last,
                )
                envelope = ta.envelope(kind, before, after, source, ts_ms, snapshot=snapshot)
                expected = bytearray(HEADER)
                value_write(expected, envelope)
                got = writer.envelope(
                    HEADER, kind, snapshot, before, after, prefix, pos, writer.tail(last, ts_ms)
                )
                assert got == bytes(expected)
            image = after if after is not None else before
            assert image is not None
            if ta.key_schema is None:
                with pytest.raises(Fallback):
                    writer.key(HEADER, image)
            else:
                key = writer.key(HEADER, image)
                assert key == HEADER + _fastavro(ta.key_schema, ta.key_record(image))


def _orders() -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(table_id=1, db="d", table="t")
    schema.columns.add(id=1, name="id", type=T.BIGINT)
    schema.columns.add(id=2, name="price", type=T.DECIMAL, precision=6, scale=2, nullable=True)
    schema.max_column_id = 2
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return schema


@pytest.mark.parametrize(
    ("kind", "before", "after", "pos"),
    [
        ("insert", (1, None), (1, None), 0),  # an insert with a before image
        ("delete", None, None, 0),  # a delete without one
        ("upsert", None, (1, None), 0),  # no such kind
        ("insert", None, (1, None, 3), 0),  # a row of another width
        ("insert", None, (1.5, None), 0),  # a float for a BIGINT
        ("insert", None, (1, Decimal("1.005")), 0),  # a finer scale than the column's
        ("insert", None, (1, None), -1),  # pos outside Avro's int
        ("insert", None, (1, None), 1 << 31),
    ],
)
def test_what_the_records_route_must_write_or_refuse_falls_back(
    kind: str, before: tuple[object, ...] | None, after: tuple[object, ...] | None, pos: int
) -> None:
    writer = table_avro(_orders()).row_writer()
    assert writer is not None
    prefix = writer.source(1, "d", "t", 1, 2)
    with pytest.raises(FALLBACK_ERRORS):
        writer.envelope(HEADER, kind, False, before, after, prefix, pos, writer.tail(True, 1))


def test_numbers_outside_avro_long_fall_back() -> None:
    with pytest.raises(Fallback):
        RowWriter.source(1 << 63, "d", "t", 1, 2)
    with pytest.raises(Fallback):
        RowWriter.source(1, "d", "t", 3, 1 << 64)
    with pytest.raises(Fallback):
        RowWriter.tail(False, 1 << 63)
    writer = table_avro(_orders()).row_writer()
    assert writer is not None
    with pytest.raises(Fallback):
        writer.key(HEADER, (1 << 63, None))


def test_a_keyless_table_has_a_writer_without_keys() -> None:
    schema = _orders()
    del schema.indexes[:]
    ta = table_avro(schema)
    writer = ta.row_writer()
    assert writer is not None and ta.key_schema is None
    assert ta.row_writer() is writer  # built once
    with pytest.raises(Fallback):
        writer.key(HEADER, (1, None))
