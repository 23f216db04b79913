"""spark_consumers.decode: messages encoded exactly as the Kafka sink encodes them (bridge.avro, both
framings) become change rows with JSON images keyed by MySQL column names, typed by ``types``."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from bridge.avro import RegistryCodec, SingleObjectCodec, ddl_record, source_record, table_avro
from bridge.proto import row_pb2
from spark_consumers.decode import ROW_FIELDS, ChangeDecoder, DecodeError, field_kind

T = row_pb2.ColumnType
TOPIC = "bridge.shop.orders"


def orders(extra: bool = False) -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(table_id=7, db="shop", table="orders")
    schema.columns.add(id=1, name="id", type=T.BIGINT)
    schema.columns.add(id=2, name="unit price", type=T.DECIMAL, precision=10, scale=2, nullable=True)
    schema.columns.add(id=3, name="placed", type=T.DATETIME, fsp=6, nullable=True)
    schema.columns.add(id=4, name="note", type=T.TEXT, nullable=True)
    schema.columns.add(id=5, name="blob", type=T.BLOB, nullable=True)
    if extra:
        schema.columns.add(id=6, name="added", type=T.INT, nullable=True)
    schema.max_column_id = 6 if extra else 5
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return schema


def encode(
    codec: Any, schema: row_pb2.TableSchema, kind: Any, before: Any, after: Any, pos: int = 0
) -> tuple[bytes, bytes]:
    avro = table_avro(schema)
    source = source_record(
        cluster_id=1, db="shop", table="orders", start_ts=5, commit_ts=9, pos=pos, last=True
    )
    row = after if after is not None else before
    assert avro.key_schema is not None
    key = codec.encode(f"{TOPIC}-key", avro.key_schema, avro.key_record(row))
    value = codec.encode(f"{TOPIC}-value", avro.value_schema, avro.envelope(kind, before, after, source, 0))
    return key, value


def single_object() -> tuple[SingleObjectCodec, dict[int, str]]:
    published: dict[int, str] = {}
    return SingleObjectCodec(lambda fp, text: published.__setitem__(fp, text)), published


ROW = (7, Decimal("19.90"), datetime(2024, 5, 1, 12, 0, 0, 123000), "red bike", b"\x00\xff")


def as_dict(row: tuple[Any, ...] | None) -> dict[str, Any]:
    assert row is not None
    return dict(zip(ROW_FIELDS, row, strict=True))


def test_an_insert_becomes_a_row_with_json_images_and_kinds() -> None:
    codec, published = single_object()
    key, value = encode(codec, orders(), "insert", None, ROW)
    row = as_dict(ChangeDecoder(None, published).decode(TOPIC, 2, 41, key, value, "row"))
    assert (row["topic"], row["partition"], row["offset"], row["db"], row["table"], row["op"]) == (
        TOPIC, 2, 41, "shop", "orders", "c",
    )  # fmt: skip
    assert (row["commit_ts"], row["position"], row["before"]) == (9, 0, None)
    # the MySQL names, not the sanitized Avro field names ("unit price" -> unit_price)
    assert json.loads(row["after"]) == {
        "id": 7, "unit price": "19.90", "placed": "2024-05-01T12:00:00.123000", "note": "red bike",
        "blob": "AP8=",
    }  # fmt: skip
    assert json.loads(row["key"]) == {"id": 7}
    assert json.loads(row["types"]) == {
        "id": "int", "unit price": "decimal", "placed": "datetime", "note": "string", "blob": "bytes",
    }  # fmt: skip


def test_the_registry_framing_decodes_to_the_same_row() -> None:
    registry = SchemaRegistryClient.new_client({"url": "mock://spark-decode"})
    key, value = encode(RegistryCodec(registry), orders(), "update", ROW, (*ROW[:3], "blue", None))
    row = as_dict(ChangeDecoder(registry, {}).decode(TOPIC, 0, 0, key, value, "row"))
    assert row["op"] == "u" and json.loads(row["before"])["note"] == "red bike"
    assert json.loads(row["after"])["note"] == "blue" and json.loads(row["after"])["blob"] is None


def test_schema_evolution_each_message_with_its_own_writer_schema() -> None:
    codec, published = single_object()
    decoder = ChangeDecoder(None, published)
    old = as_dict(decoder.decode(TOPIC, 0, 0, *encode(codec, orders(), "insert", None, ROW), "row"))
    new = as_dict(decoder.decode(TOPIC, 0, 1, *encode(codec, orders(True), "insert", None, (*ROW, 5)), "row"))
    assert "added" not in json.loads(old["after"]) and json.loads(new["after"])["added"] == 5
    assert json.loads(new["types"])["added"] == "int"


def test_watermarks_tombstones_and_schema_messages_give_no_row() -> None:
    codec, published = single_object()
    key, _ = encode(codec, orders(), "insert", None, ROW)
    decoder = ChangeDecoder(None, published)
    assert decoder.decode(TOPIC, 0, 0, None, None, "resolved") is None
    assert decoder.decode(TOPIC, 0, 1, key, None, "tombstone") is None


def test_a_ddl_event_becomes_a_row_named_by_its_kind_with_the_tables_columns() -> None:
    codec, published = single_object()
    change = row_pb2.SchemaChange(kind=row_pb2.SchemaChange.ALTER_TABLE, db="shop", table="orders")
    change.table_schema.CopyFrom(orders(True))
    record = ddl_record(change, cluster_id=1, start_ts=3, commit_ts=4, query="ALTER TABLE ...", topic=TOPIC)
    from bridge.avro import DDL_SCHEMA

    value = codec.encode("bridge._ddl-value", DDL_SCHEMA, record)
    row = as_dict(ChangeDecoder(None, published).decode("bridge._ddl", 0, 3, None, value, "ddl"))
    assert (row["op"], row["db"], row["table"], row["commit_ts"], row["position"]) == (
        "ALTER_TABLE", "shop", "orders", 4, -1,
    )  # fmt: skip
    assert json.loads(row["types"])["added"] == "int"


def test_an_unknown_schema_is_an_error_naming_where() -> None:
    codec, _ = single_object()
    key, value = encode(codec, orders(), "insert", None, ROW)
    with pytest.raises(DecodeError, match=r"topic bridge\.shop\.orders partition 1 offset 5"):
        ChangeDecoder(None, {}).decode(TOPIC, 1, 5, key, value, "row")


@pytest.mark.parametrize(
    ("avro_type", "kind"),
    [
        ("long", "int"),
        (["null", "double"], "double"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2}, "decimal"),
        ([{"type": "int", "logicalType": "date"}, "string"], "date"),
        (["null", {"type": "long", "logicalType": "timestamp-micros"}, "string"], "timestamp"),
        ({"type": "long", "bridge.type": "time-micros"}, "time"),
        ({"type": "string", "bridge.type": "json"}, "json"),
        ("bytes", "bytes"),
        ("string", "string"),
    ],
)
def test_field_kinds(avro_type: Any, kind: str) -> None:
    assert field_kind(avro_type) == kind


def composite(keyless: bool = False) -> row_pb2.TableSchema:
    """A table keyed by a DECIMAL and a DATETIME (key parts whose JSON form is text), or keyless."""
    schema = row_pb2.TableSchema(table_id=8, db="shop", table="orders")
    schema.columns.add(id=1, name="unit price", type=T.DECIMAL, precision=10, scale=2)
    schema.columns.add(id=2, name="placed", type=T.DATETIME, fsp=6)
    schema.columns.add(id=3, name="note", type=T.TEXT, nullable=True)
    schema.max_column_id = 3
    if not keyless:
        schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["unit price", "placed"])
    return schema


@pytest.mark.parametrize("keyless", [False, True])
def test_compact_rows_touch_the_documents_the_json_rows_do(keyless: bool) -> None:
    """The index job's compact rows: the same key parts (and their hash), op, version and, decoded
    again, the same image and kinds as the full rows give through ``latest.row_actions``."""
    from spark_consumers.decode import COMPACT_FIELDS
    from spark_consumers.latest import id_hash, row_actions

    codec, published = single_object()
    first = (Decimal("19.90"), datetime(2024, 5, 1, 12, 0, 0, 123000), "red bike")
    second = (Decimal("5.00"), datetime(2024, 5, 2), None)
    changes: list[tuple[Any, Any, Any]] = [
        ("insert", None, first),
        ("update", first, second),
        ("update", second, (*second[:2], "x")),
        ("delete", second, None),
    ]
    decoder = ChangeDecoder(None, published)
    for kind, before, after in changes:
        if keyless:  # no key schema, messages without a key
            avro = table_avro(composite(keyless))
            source = source_record(cluster_id=1, db="shop", table="orders", start_ts=5, commit_ts=9, pos=0,
                                   last=True)  # fmt: skip
            key, value = b"", codec.encode(f"{TOPIC}-value", avro.value_schema,
                                           avro.envelope(kind, before, after, source, 0))  # fmt: skip
        else:
            key, value = encode(codec, composite(keyless), kind, before, after)
        full = as_dict(decoder.decode(TOPIC, 0, 1, key, value, "row"))
        compact: list[dict[str, Any]] = [
            dict(zip(COMPACT_FIELDS, r, strict=True)) for r in decoder.compact(TOPIC, 0, 1, key, value, "row")
        ]
        version = (full["commit_ts"], full["position"])
        actions = row_actions("shop", "orders", full["op"], full["key"], full["before"], full["after"],
                              full["types"], version)  # fmt: skip
        assert [(r["op"], r["doc"]) for r in compact] == [
            (full["op"] if at == 0 else "d", a.key) for at, a in enumerate(actions)
        ], kind
        for r, act in zip(compact, actions, strict=True):
            assert (r["commit_ts"], r["position"]) == version
            assert r["doc_hash"] % (1 << 64) == id_hash(act.key)
            assert (None if r["image"] is None else json.loads(r["image"])) == act.image
            assert decoder.types_of(r["schema"]) == act.types


@pytest.mark.parametrize("registry", [False, True])
def test_placed_rows_keep_this_partitions_documents_and_send_an_old_key_to_its_own(registry: bool) -> None:
    """The direct index mode's reader owns one partition of a key-partitioned topic: a key-changing
    update's old key goes to the partition the sink gives that key (its Avro body's CRC-32), found
    by writing the old key again; a message outside its key's partition is refused, naming why."""
    import zlib

    from spark_consumers.decode import COMPACT_FIELDS

    count = 7
    if registry:
        client = SchemaRegistryClient.new_client({"url": "mock://placed"})
        codec: Any = RegistryCodec(client)
        decoder = ChangeDecoder(client, {})
        header = 5
    else:
        codec, published = single_object()
        decoder = ChangeDecoder(None, published)
        header = 10
    avro = table_avro(composite())
    assert avro.key_schema is not None
    moved = 0
    for n in range(40):  # enough key changes that some cross partitions, some do not
        before = (Decimal(f"{n}.25"), datetime(2024, 5, 1, 12, 0, n, 123000), "a")
        after = (Decimal(f"{n + 100}.50"), datetime(2024, 5, 2, 8, n, 0), "b")
        key, value = encode(codec, composite(), "update", before, after)
        old_key = codec.encode(f"{TOPIC}-key", avro.key_schema, avro.key_record(before))
        mine, theirs = zlib.crc32(key[header:]) % count, zlib.crc32(old_key[header:]) % count
        own, others = decoder.compact_placed(TOPIC, mine, 1, key, value, "row", count)
        rows = decoder.compact(TOPIC, mine, 1, key, value, "row", hashed=False)  # doc_hash 0: unused
        assert dict(zip(COMPACT_FIELDS, rows[1], strict=True))["op"] == "d"
        if theirs == mine:
            assert (own, others) == (rows, [])
        else:
            assert (own, others) == (rows[:1], [(theirs, rows[1])])
            moved += 1
        with pytest.raises(DecodeError, match="not partitioned by key"):
            decoder.compact_placed(TOPIC, (mine + 1) % count, 1, key, value, "row", count)
    assert 0 < moved < 40


def test_placed_keyless_rows_belong_to_partition_zero() -> None:
    codec, published = single_object()
    decoder = ChangeDecoder(None, published)
    avro = table_avro(composite(keyless=True))
    source = source_record(cluster_id=1, db="shop", table="orders", start_ts=5, commit_ts=9, pos=0, last=True)
    row = (Decimal("1.00"), datetime(2024, 5, 1), "x")
    value = codec.encode(f"{TOPIC}-value", avro.value_schema, avro.envelope("insert", None, row, source, 0))
    own, others = decoder.compact_placed(TOPIC, 0, 1, None, value, "row", 3)
    assert len(own) == 1 and others == []
    with pytest.raises(DecodeError, match="keyless row outside partition 0"):
        decoder.compact_placed(TOPIC, 2, 1, None, value, "row", 3)
