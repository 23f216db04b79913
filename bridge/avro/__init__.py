"""Avro for the Kafka sink and ``binlog-bridge consume``: schemas, records and the two encodings.

::

    from bridge.avro import table_avro, RegistryCodec, SingleObjectCodec, Decoder

    ta = table_avro(table_schema)                      # once per schema version
    codec = RegistryCodec(client)                      # or SingleObjectCodec(publish)
    key = codec.encode(f"{topic}-key", ta.key_schema, ta.key_record(row))
    value = codec.encode(f"{topic}-value", ta.value_schema, ta.envelope("insert", None, row, source, ts_ms))
    schema, record = Decoder(client, schemas).decode(value)
    row_again = ta.values(record["after"])

The type mapping is in :mod:`bridge.avro.types`; ``docs/avro.md`` is the
consumer's reference.
"""

from bridge.avro.codec import (
    AvroEncodeError,
    Decoder,
    RegistryCodec,
    RegistryUnavailable,
    SchemaRegistrationError,
    SingleObjectCodec,
    fingerprint_hex,
    schema_fingerprint,
)
from bridge.avro.events import DDL_SCHEMA, SOURCE_SCHEMA, ddl_record, source_record
from bridge.avro.tables import ENVELOPE_OPS, TableAvro, field_names, table_avro

__all__ = [
    "DDL_SCHEMA",
    "ENVELOPE_OPS",
    "SOURCE_SCHEMA",
    "AvroEncodeError",
    "Decoder",
    "RegistryCodec",
    "RegistryUnavailable",
    "SchemaRegistrationError",
    "SingleObjectCodec",
    "TableAvro",
    "ddl_record",
    "field_names",
    "fingerprint_hex",
    "schema_fingerprint",
    "source_record",
    "table_avro",
]
