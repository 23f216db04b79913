"""bridge.avro codecs: Confluent wire format, single-object encoding, the Decoder."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry._sync.mock_schema_registry_client import MockSchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro.schema import fingerprint, to_parsing_canonical_form
from prometheus_client import REGISTRY

from bridge.avro import (
    DDL_SCHEMA,
    SOURCE_SCHEMA,
    AvroEncodeError,
    Decoder,
    RegistryCodec,
    RegistryUnavailable,
    SchemaRegistrationError,
    SingleObjectCodec,
    ddl_record,
    fingerprint_hex,
    schema_fingerprint,
    source_record,
    table_avro,
)
from bridge.errors import ProtocolError
from bridge.proto import row_pb2
from bridge.rowtemporal import MySQLDate
from tests.support import all_types

SOURCE = source_record(
    cluster_id=9, db="shop", table="all_types", start_ts=10, commit_ts=20, pos=0, last=True
)
TOPIC = "bridge.shop.all_types"


def mock_registry() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": "mock://bridge-test"})


def rabin64(data: bytes) -> int:
    """CRC-64-AVRO written from the Avro specification's description (independent of fastavro)."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty if fp & 1 else 0)
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


class Published(dict[int, str]):
    """What SingleObjectCodec published, counting calls."""

    calls = 0

    def __call__(self, value: int, text: str) -> None:
        self.calls += 1
        assert value not in self
        self[value] = text


def test_registry_codec_writes_confluent_wire_format_and_registers_once() -> None:
    client = mock_registry()
    codec = RegistryCodec(client)
    ta = table_avro(all_types.schema("shop"))
    row = all_types.ROWS[0]
    value = codec.encode(f"{TOPIC}-value", ta.value_schema, ta.envelope("insert", None, row, SOURCE, 7))
    assert ta.key_schema is not None  # all_types has a primary key
    key = codec.encode(f"{TOPIC}-key", ta.key_schema, ta.key_record(row))
    again = codec.encode(f"{TOPIC}-value", ta.value_schema, ta.envelope("insert", None, row, SOURCE, 7))
    assert value == again
    assert value[0] == 0 and key[0] == 0
    value_id = int.from_bytes(value[1:5], "big")
    key_id = int.from_bytes(key[1:5], "big")
    assert value_id != key_id
    assert client.get_versions(f"{TOPIC}-value") == [1]
    assert client.get_versions(f"{TOPIC}-key") == [1]
    registered = client.get_schema(value_id)
    assert registered.schema_type == "AVRO" and registered.schema_str is not None
    assert json.loads(registered.schema_str) == ta.value_schema
    # the body after the header is the plain Avro binary: key {"id": 1} is the zig-zag varint 2
    assert key[5:] == b"\x02"


def test_a_standard_confluent_consumer_reads_our_messages() -> None:
    """Plain confluent_kafka AvroDeserializer, same mock registry, no code of ours on the read path."""
    client = mock_registry()
    codec = RegistryCodec(client)
    ta = table_avro(all_types.schema("shop"))
    row, zero_row, null_row = all_types.ROWS
    value = codec.encode(f"{TOPIC}-value", ta.value_schema, ta.envelope("update", zero_row, row, SOURCE, 7))
    assert ta.key_schema is not None  # all_types has a primary key
    key = codec.encode(f"{TOPIC}-key", ta.key_schema, ta.key_record(row))
    deserializer = AvroDeserializer(client)
    got_key = deserializer(key, SerializationContext(TOPIC, MessageField.KEY))
    got = deserializer(value, SerializationContext(TOPIC, MessageField.VALUE))
    assert got_key == {"id": 1}
    assert got["op"] == "u"
    assert got["source"] == SOURCE
    assert got["ts_ms"] == 7
    after = got["after"]
    assert after == {
        "id": 1,
        "i8": -128,
        "u64": Decimal(18446744073709551615),
        "dec": Decimal("-12345678901234.123456"),
        "f": 1.5,
        "d": 0.1 + 0.2,
        "bits": Decimal((1 << 63) + 1),
        "y": 2155,
        "dt": date(2024, 2, 29),
        "dtm": datetime(2024, 1, 2, 3, 4, 5, 123456),
        "ts": datetime(2030, 1, 1, 0, 0, 0, 123000, tzinfo=UTC),
        "tm": -(838 * 3600 + 59 * 60 + 58) * 1_000_000 - 990_000,
        "ch": "abc",
        "vc": "héllo ✓ 日本",
        "tx": "x" * 1000,
        "bn": b"\x00\x01\x02\x03",
        "vb": b"\xff\x00",
        "bl": bytes(range(256)),
        "js": '{"b": [1, 2.5, null], "a": "x"}',
        "en": "b",
        "st": "x,z",
    }
    assert str(after["dec"]) == "-12345678901234.123456"
    before = got["before"]
    assert (before["dt"], before["dtm"], before["u64"]) == ("0000-00-00", "0000-00-00 00:00:00", Decimal(0))
    deleted = codec.encode(
        f"{TOPIC}-value", ta.value_schema, ta.envelope("delete", null_row, None, SOURCE, 8)
    )
    got = deserializer(deleted, SerializationContext(TOPIC, MessageField.VALUE))
    assert got["op"] == "d" and got["after"] is None
    assert got["before"] == {"id": 3, **{name: None for name, *_ in all_types.COLUMNS[1:]}}


def test_single_object_encoding_header_and_fingerprint() -> None:
    published = Published()
    codec = SingleObjectCodec(published)
    ta = table_avro(all_types.schema("shop"))
    row = all_types.ROWS[1]
    value = codec.encode(f"{TOPIC}-value", ta.value_schema, ta.envelope("insert", None, row, SOURCE, 7))
    codec.encode(f"{TOPIC}-value", ta.value_schema, ta.envelope("delete", row, None, SOURCE, 8))
    assert ta.key_schema is not None  # all_types has a primary key
    key = codec.encode(f"{TOPIC}-key", ta.key_schema, ta.key_record(row))
    assert published.calls == 2  # one per distinct schema
    assert value[:2] == b"\xc3\x01"
    pcf = to_parsing_canonical_form(ta.value_schema)
    expected = rabin64(pcf.encode())
    assert value[2:10] == expected.to_bytes(8, "little")
    assert value[2:10].hex() == fingerprint(pcf, "CRC-64-AVRO") == fingerprint_hex(expected)
    assert schema_fingerprint(ta.value_schema) == expected
    assert json.loads(published[expected]) == ta.value_schema  # the full schema, not the canonical form
    assert key[2:10] == rabin64(to_parsing_canonical_form(ta.key_schema).encode()).to_bytes(8, "little")
    decoder = Decoder(None, published)
    writer, record = decoder.decode(value)
    assert writer == ta.value_schema
    assert ta.values(record["after"]) == row
    assert decoder.decode(key)[1] == {"id": 2}


def test_fingerprint_of_a_known_schema() -> None:
    # independent of our code and of fastavro: the spec's algorithm over the canonical form text
    assert schema_fingerprint('"int"') == rabin64(b'"int"')
    assert schema_fingerprint({"type": "record", "name": "R", "doc": "x", "fields": []}) == rabin64(
        b'{"name":"R","type":"record","fields":[]}'
    )


def test_decoder_reads_both_framings_with_a_schema_function() -> None:
    client = mock_registry()
    published = Published()
    registry_codec, single = RegistryCodec(client), SingleObjectCodec(published)
    ta = table_avro(all_types.schema("shop"))
    asked: list[int] = []

    def lookup(value: int) -> str | None:
        asked.append(value)
        return published.get(value)

    decoder = Decoder(client, lookup)
    for row in all_types.ROWS:
        envelope = ta.envelope("insert", None, row, SOURCE, 7)
        for codec in (registry_codec, single):
            writer, record = decoder.decode(codec.encode(f"{TOPIC}-value", ta.value_schema, envelope))
            assert writer == ta.value_schema
            assert ta.values(record["after"]) == row
    assert len(asked) == 1  # a found schema is cached


def test_ddl_events_encode_with_the_published_schema() -> None:
    schema = all_types.schema("shop")
    change = row_pb2.SchemaChange(kind=row_pb2.SchemaChange.CREATE_TABLE, db="shop", table="all_types")
    change.table_schema.CopyFrom(schema)
    commit_ts = (1_700_000_000_123 << 18) + 5
    record = ddl_record(
        change, cluster_id=9, start_ts=commit_ts - 1, commit_ts=commit_ts, query="CREATE ...", topic=TOPIC
    )
    published = Published()
    data = SingleObjectCodec(published).encode("bridge._ddl-value", DDL_SCHEMA, record)
    writer, got = Decoder(None, published).decode(data)
    assert writer["name"] == "DDLEvent"
    assert got["kind"] == "CREATE_TABLE"
    assert got["ts_ms"] == 1_700_000_000_123
    assert got["topic"] == TOPIC
    assert row_pb2.TableSchema.FromString(got["table_schema"]) == schema
    drop = row_pb2.SchemaChange(kind=row_pb2.SchemaChange.DROP_DATABASE, db="shop")
    record = ddl_record(drop, cluster_id=9, start_ts=1, commit_ts=2, query="DROP DATABASE shop", topic="")
    assert record["table_schema"] == b"" and record["table"] == "" and record["kind"] == "DROP_DATABASE"
    assert SOURCE_SCHEMA["name"] == "Source" and SOURCE_SCHEMA["namespace"] == "bridge"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "unknown Avro framing: first bytes none"),
        (b"\x01\x00\x00\x00\x01\x02", "unknown Avro framing: first bytes 0100"),
        (b"\xc3\x02" + bytes(8), "unknown Avro framing: first bytes c302"),
        (b"\x00\x00\x01", "shorter than its header"),
        (b"\xc3\x01\x00", "shorter than its header"),
        (b"\x00\x00\x00\x03\xe7\x02", "schema id 999 is unknown"),
        (b"\xc3\x01" + bytes(8) + b"\x02", "no published schema has fingerprint 0000000000000000"),
    ],
)
def test_decoder_refuses_unreadable_messages(data: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        Decoder(mock_registry(), {}).decode(data)


def test_decoder_refuses_truncated_trailing_and_mismatched_data() -> None:
    client = mock_registry()
    published = Published()
    ta = table_avro(all_types.schema("shop"))
    envelope = ta.envelope("insert", None, all_types.ROWS[0], SOURCE, 7)
    data = RegistryCodec(client).encode(f"{TOPIC}-value", ta.value_schema, envelope)
    decoder = Decoder(None, published)
    with pytest.raises(ProtocolError, match="no schema registry is configured"):
        decoder.decode(data)
    decoder = Decoder(client, published)
    with pytest.raises(ProtocolError, match=r"is not valid Avro of bridge\.shop\.all_types\.Envelope"):
        decoder.decode(data[:-10])
    with pytest.raises(ProtocolError, match="1 bytes left after"):
        decoder.decode(data + b"\x00")
    single = SingleObjectCodec(published).encode(f"{TOPIC}-key", ta.key_schema, {"id": 5})  # type: ignore[arg-type]
    value = int.from_bytes(single[2:10], "little")
    wrong = Decoder(None, {value: json.dumps(ta.value_schema)})
    with pytest.raises(
        ProtocolError, match=f"published for fingerprint {fingerprint_hex(value)} has fingerprint"
    ):
        wrong.decode(single)


def test_decoder_refuses_non_record_schemas() -> None:
    published = Published()
    data = SingleObjectCodec(published).encode("s", "long", 5)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="long is not a record schema"):
        Decoder(None, published).decode(data)


def test_encoding_a_record_that_does_not_fit_names_subject_and_schema() -> None:
    codec = SingleObjectCodec(Published())
    ta = table_avro(all_types.schema("shop"))
    with pytest.raises(
        AvroEncodeError, match=r"subject t-key: the record does not fit schema bridge\.shop\.all_types\.Key"
    ):
        codec.encode("t-key", ta.key_schema, {"id": "one"})  # type: ignore[arg-type]
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "string"}, {"name": "d", "type": "double"}],
    }
    with pytest.raises(AvroEncodeError, match="surrogates not allowed"):
        codec.encode("t-r", schema, {"a": "\ud800", "d": 1.0})
    with pytest.raises(AvroEncodeError, match="too large to convert to float"):
        codec.encode("t-r", schema, {"a": "x", "d": 10**400})
    with pytest.raises(AvroEncodeError, match="is not valid Avro"):
        codec.encode(
            "t-x", {"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}, {"a": 1}
        )


def test_publish_failure_is_retried_on_the_next_encode() -> None:
    calls: list[int] = []

    def publish(value: int, text: str) -> None:
        calls.append(value)
        if len(calls) == 1:
            raise OSError("broker down")

    codec = SingleObjectCodec(publish)
    ta = table_avro(all_types.schema("shop"))
    with pytest.raises(OSError, match="broker down"):
        codec.encode("t-key", ta.key_schema, {"id": 1})  # type: ignore[arg-type]
    codec.encode("t-key", ta.key_schema, {"id": 1})  # type: ignore[arg-type]
    assert len(calls) == 2 and calls[0] == calls[1]


def test_equal_schema_objects_are_registered_once() -> None:
    client = mock_registry()
    codec = RegistryCodec(client)
    for _ in range(3):
        ta = table_avro(all_types.schema("shop"))  # a new, equal dict each time
        codec.encode(f"{TOPIC}-key", ta.key_schema, {"id": 1})  # type: ignore[arg-type]
    assert client.get_versions(f"{TOPIC}-key") == [1]


def test_zero_date_key_survives_the_standard_path() -> None:
    schema = row_pb2.TableSchema(db="d", table="t", table_id=1)
    schema.columns.add(id=1, name="day", type=row_pb2.ColumnType.DATE)
    schema.indexes.add(name="PRIMARY", primary=True, columns=["day"])
    ta = table_avro(schema)
    client = mock_registry()
    data = RegistryCodec(client).encode("d.t-key", ta.key_schema, ta.key_record((MySQLDate(0, 0, 0),)))  # type: ignore[arg-type]
    assert AvroDeserializer(client)(data, SerializationContext("d.t", MessageField.KEY)) == {
        "day": "0000-00-00"
    }
    assert client.register_schema("other", Schema(json.dumps(ta.key_schema), "AVRO")) > 0


def test_an_unreachable_registry_is_a_retriable_error_naming_the_subject() -> None:
    # a closed local port: the connection is refused at once
    client = SchemaRegistryClient({"url": "http://127.0.0.1:1", "max.retries": 0, "timeout": 5})
    ta = table_avro(all_types.schema("shop"))
    with pytest.raises(RegistryUnavailable, match=f"subject {TOPIC}-key") as caught:
        RegistryCodec(client).encode(f"{TOPIC}-key", ta.key_schema, {"id": 1})  # type: ignore[arg-type]
    assert caught.value.retriable
    with pytest.raises(RegistryUnavailable, match="schema id 5"):
        Decoder(client, {}).decode(b"\x00\x00\x00\x00\x05\x02")


class RefusingRegistry(MockSchemaRegistryClient):
    """The in-process registry, answering a registration as a real one does for an
    incompatible schema (HTTP 409) or an outage (HTTP 503)."""

    def __init__(self, status: int) -> None:
        super().__init__({"url": "mock://refusing"})
        self.status = status

    def register_schema(self, subject_name: str, schema: Schema, normalize_schemas: bool = False) -> int:
        raise SchemaRegistryError(self.status, 409 if self.status == 409 else 50301, "refused")


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_registry_refusals_and_outages_are_told_apart() -> None:
    refused = metric("bridge_avro_registry_errors_total", kind="refused")
    unavailable = metric("bridge_avro_registry_errors_total", kind="unavailable")
    ta = table_avro(all_types.schema("shop"))
    with pytest.raises(
        SchemaRegistrationError, match=rf"refused bridge\.shop\.all_types\.Key under subject {TOPIC}-key"
    ):
        RegistryCodec(RefusingRegistry(409)).encode(f"{TOPIC}-key", ta.key_schema, {"id": 1})  # type: ignore[arg-type]
    with pytest.raises(RegistryUnavailable, match=f"under subject {TOPIC}-key"):
        RegistryCodec(RefusingRegistry(503)).encode(f"{TOPIC}-key", ta.key_schema, {"id": 1})  # type: ignore[arg-type]
    # nothing was cached: the next call asks the registry again
    codec = RegistryCodec(RefusingRegistry(503))
    for _ in range(2):
        with pytest.raises(RegistryUnavailable):
            codec.encode(f"{TOPIC}-key", ta.key_schema, {"id": 1})  # type: ignore[arg-type]
    assert metric("bridge_avro_registry_errors_total", kind="refused") == refused + 1
    assert metric("bridge_avro_registry_errors_total", kind="unavailable") == unavailable + 3


def test_schemas_and_fallbacks_are_counted() -> None:
    schemas = metric("bridge_avro_schemas_total", encoding="single-object")
    fallbacks = metric("bridge_avro_fastavro_fallbacks_total")
    codec = SingleObjectCodec(Published())
    ta = table_avro(all_types.schema("shop"))
    for row in all_types.ROWS:
        codec.encode("t-value", ta.value_schema, ta.envelope("insert", None, row, SOURCE, 1))
    assert metric("bridge_avro_fastavro_fallbacks_total") == fallbacks  # row records never fall back
    codec.encode("t-key", ta.key_schema, {"id": True})  # type: ignore[arg-type]  # a bool: fastavro's to write
    assert metric("bridge_avro_fastavro_fallbacks_total") == fallbacks + 1
    assert metric("bridge_avro_schemas_total", encoding="single-object") == schemas + 2


def test_the_documented_plain_fastavro_consumer_reads_single_object_messages() -> None:
    """docs/avro.md's recipe: a schemas map keyed by data[2:10].hex(), fastavro only."""
    import io

    from fastavro import parse_schema, schemaless_reader

    schemas_topic: dict[str, str] = {}  # key -> value, as the compacted schemas topic holds them
    codec = SingleObjectCodec(lambda fp, text: schemas_topic.__setitem__(fingerprint_hex(fp), text))
    ta = table_avro(all_types.schema("shop"))
    data = codec.encode(
        f"{TOPIC}-value", ta.value_schema, ta.envelope("insert", None, all_types.ROWS[0], SOURCE, 7)
    )

    assert data[:2] == b"\xc3\x01"
    schema = parse_schema(json.loads(schemas_topic[data[2:10].hex()]))
    record = schemaless_reader(io.BytesIO(data[10:]), schema, None)
    assert isinstance(record, dict)
    assert record["after"]["dec"] == Decimal("-12345678901234.123456")
    assert record["after"]["dtm"] == datetime(2024, 1, 2, 3, 4, 5, 123456)
