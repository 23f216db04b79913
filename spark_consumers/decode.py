"""Kafka messages of the bridge's topics -> change rows, one schema for every table.

A change row is the tuple :data:`ROW_FIELDS` (the data source's schema, in
that order). ``key``, ``before`` and ``after`` are JSON texts keyed by the
MySQL column names (the ``bridge.name`` of a sanitized Avro field); ``types``
maps each column of the writer schema to its **kind** (:func:`field_kind`),
so a consumer can type the JSON values again without the Avro schema.

JSON value forms: integers and doubles as JSON numbers, DECIMAL (and BIGINT
UNSIGNED) as a string of its exact digits, DATE as ``YYYY-MM-DD``, DATETIME
as ``YYYY-MM-DDTHH:MM:SS[.ffffff]`` (wall clock, no zone), TIMESTAMP as the
same with ``+00:00``, TIME as integer microseconds, binary values as base64,
JSON columns as the document's text. A zero date keeps the text MySQL shows.

Row messages become rows with ``op`` ``c``/``u``/``d``/``r``; DDL events on
the ``<prefix>._ddl`` topic become rows whose ``op`` is the DDL kind
(``DROP_TABLE``, ``ALTER_TABLE``, ...), ``position`` -1, for a rename
``before`` = ``{"old_db": ..., "old_table": ...}`` and, when the DDL leaves a
table behind, ``types`` of that table's columns. Tombstones and
resolved-ts watermarks carry no change and give no row.
"""

from __future__ import annotations

import base64
import io
import zlib
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import orjson
from fastavro import parse_schema, schemaless_writer

from bridge.avro import Decoder
from bridge.errors import ProtocolError
from spark_consumers.latest import id_hash, image_digest, key_text

# the data source's columns, in order (spark_consumers.source.SCHEMA spells their types)
ROW_FIELDS = (
    "topic",
    "partition",
    "offset",
    "db",
    "table",
    "op",
    "key",
    "before",
    "after",
    "types",
    "commit_ts",
    "position",
)
Row = tuple[str, int, int, str, str, str, str | None, str | None, str | None, str, int, int]

# the index job's compact rows (the data source's ``rows=latest``): one per document a change touches,
# its key part and that part's hash (for the shard) worked out once, the image it puts as JSON (no
# ``before``, no ``key``), and instead of the column kinds the framing header naming the writer schema
COMPACT_FIELDS = (
    "topic",
    "partition",
    "offset",
    "db",
    "table",
    "op",
    "doc",
    "doc_hash",
    "commit_ts",
    "position",
    "image",
    "schema",
    "before",
    "types",
)
Compact = tuple[
    str, int, int, str, str, str, str | None, int, int, int, str | None, bytes | None, str | None, str | None
]

DDL_SUFFIX = "._ddl"
SCHEMAS_SUFFIX = "._schemas"
HEADER_KIND = "bridge.kind"
HEADER_RESOLVED = "bridge.resolved-ts"  # a watermark's resolved-ts
HEADER_COMMIT_TS = "bridge.commit-ts"  # a row's or DDL event's commit_ts
ROW_OPS = frozenset({"c", "u", "d", "r"})
DDL_POSITION = -1  # a DDL event sorts before the row changes of its commit_ts


class DecodeError(ProtocolError):
    """A message of a change topic cannot be decoded; names topic, partition and offset."""


def json_default(value: object) -> object:
    """The JSON form of the values fastavro returns that orjson has none of: DECIMAL as its exact
    digits, binary as base64. (Dates and datetimes orjson writes itself, as ``isoformat`` does.)"""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(f"no JSON form for {type(value).__name__}")


def to_json(value: object) -> str:
    """Compact JSON text, UTF-8 (orjson: ~1 us for a row image, 8x the standard library's encoder).
    Dates and datetimes in ISO form (fastavro's aware datetimes are UTC: ``+00:00``)."""
    return orjson.dumps(value, default=json_default).decode("utf-8")


def field_kind(avro_type: Any) -> str:
    """The kind of one Avro field type of a bridge row record: int, double, bool, decimal, date,
    datetime, timestamp, time, string, json or bytes (``docs/avro.md``'s type mapping)."""
    branches = avro_type if isinstance(avro_type, list) else [avro_type]
    first = next((b for b in branches if b != "null"), "null")
    if isinstance(first, dict):
        bridge_type = first.get("bridge.type")
        if bridge_type == "time-micros":
            return "time"
        if bridge_type == "json":
            return "json"
        logical = first.get("logicalType")
        named = {
            "decimal": "decimal",
            "date": "date",
            "local-timestamp-micros": "datetime",
            "timestamp-micros": "timestamp",
        }
        if logical in named:
            return named[logical]
        first = first.get("type", "string")
    simple = {"int": "int", "long": "int", "float": "double", "double": "double", "boolean": "bool"}
    return simple.get(str(first), "bytes" if first in ("bytes", "fixed") else "string")


class RecordShape:
    """What a row (or key) record schema needs for the JSON image: column names and kinds."""

    def __init__(self, record_schema: Mapping[str, Any]) -> None:
        fields = record_schema.get("fields", [])
        self.names = {f["name"]: str(f.get("bridge.name", f["name"])) for f in fields}
        self.renamed = any(field != column for field, column in self.names.items())
        self.kinds = {self.names[f["name"]]: field_kind(f["type"]) for f in fields}
        self.types_json = to_json(self.kinds)

    def columns(self, record: Mapping[str, Any]) -> Mapping[str, Any]:
        """The record keyed by MySQL column names (fastavro's own dict when no name differs)."""
        if not self.renamed:
            return record
        return {self.names.get(field, field): value for field, value in record.items()}


def _value_record(envelope: Mapping[str, Any]) -> Mapping[str, Any]:
    for field in envelope.get("fields", []):
        if field["name"] in ("before", "after"):  # the first defines the record, the other names it
            for branch in field["type"]:
                if isinstance(branch, dict):
                    return branch
    raise ProtocolError(f"{envelope.get('name')} is not a bridge Envelope (no row record)")


def registry_client(url: str, settings: Mapping[str, Any] | None = None) -> Any:
    """A Schema Registry client for ``url`` (``mock://``: an in-process registry; one per process)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    conf = {**(settings or {}), "url": url}
    if url.startswith("mock://"):
        return SchemaRegistryClient.new_client(conf)
    return SchemaRegistryClient(conf)


class ChangeDecoder:
    """Decodes messages into :data:`Row` tuples with one :class:`bridge.avro.Decoder`.

    ``schemas`` resolves single-object fingerprints (a mapping or a lookup
    function, as :class:`~bridge.avro.Decoder` takes); ``registry`` resolves
    Confluent schema ids. Shapes are cached per writer schema.
    """

    def __init__(self, registry: Any, schemas: Mapping[int, str] | Callable[[int], str | None]) -> None:
        self._decoder = Decoder(registry, schemas)
        self._shapes: dict[int, tuple[Mapping[str, Any], RecordShape]] = {}
        self._key_columns: dict[bytes, list[str]] = {}  # key framing header -> key columns
        self._types: dict[bytes, str] = {}  # value framing header -> column kinds JSON
        self._key_writers: dict[bytes, Any] = {}  # key framing header -> parsed key schema

    def _shape(self, schema: Mapping[str, Any], envelope: bool) -> RecordShape:
        cached = self._shapes.get(id(schema))
        if cached is None or cached[0] is not schema:
            shape = RecordShape(_value_record(schema) if envelope else schema)
            cached = self._shapes[id(schema)] = (schema, shape)
        return cached[1]

    def decode(
        self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None, kind: str
    ) -> Row | None:
        """One message -> a row, or None for a message that carries no change."""
        if value is None or kind in ("tombstone", "resolved", "schema"):
            return None
        try:
            schema, record = self._decoder.decode(value)
            if kind == "ddl" or topic.endswith(DDL_SUFFIX):
                return _ddl_row(topic, partition, offset, record)
            return self._row(topic, partition, offset, key, schema, record)
        except ProtocolError as exc:
            raise DecodeError(f"topic {topic} partition {partition} offset {offset}: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise DecodeError(
                f"topic {topic} partition {partition} offset {offset}: not a bridge message ({exc!r})"
            ) from exc

    def _row(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        schema: Mapping[str, Any],
        record: Mapping[str, Any],
    ) -> Row:
        shape = self._shape(schema, envelope=True)
        source = record["source"]
        before = None if record["before"] is None else shape.columns(record["before"])
        after = None if record["after"] is None else shape.columns(record["after"])
        return (
            topic,
            partition,
            offset,
            str(source["db"]),
            str(source["table"]),
            str(record["op"]),
            self._key_json(key, after if after is not None else before),
            None if before is None else to_json(before),
            None if after is None else to_json(after),
            shape.types_json,
            int(source["commit_ts"]),
            int(source["pos"]),
        )

    def _key_json(self, key: bytes | None, image: Mapping[str, Any] | None) -> str | None:
        """The key record as JSON; its values are taken from the row image when there is one (the
        key's columns are the image's), so the key is Avro-decoded once per key schema only."""
        if not key:
            return None
        header = key[:10] if key[:1] == b"\xc3" else key[:5]
        columns = self._key_columns.get(header)
        if columns is None or image is None:
            schema, record = self._decoder.decode(key)
            shape = self._shape(schema, envelope=False)
            columns = self._key_columns[header] = list(shape.kinds)
            if image is None:  # a key-only (oversize) change
                return to_json(shape.columns(record))
        return to_json({c: image.get(c) for c in columns})

    def compact(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        kind: str,
        hashed: bool = True,
    ) -> list[Compact]:
        """One message -> its :data:`Compact` rows: one per document it touches (an update that
        changes the key also deletes the old key's document: a second row, op ``d``), none for a
        message that carries no change, one for a DDL event. A row holds the image it puts as JSON
        text (``after`` only) and the framing header of its writer schema (:meth:`types_of`);
        ``hashed=False``: ``doc_hash`` 0 (the direct index mode places documents by partition)."""
        if value is None or kind in ("tombstone", "resolved", "schema"):
            return []
        try:
            schema, record = self._decoder.decode(value)
            if kind == "ddl" or topic.endswith(DDL_SUFFIX):
                ddl = _ddl_row(topic, partition, offset, record)
                return [(*ddl[:6], None, 0, ddl[10], DDL_POSITION, None, None, ddl[7], ddl[9])]
            shape = self._shape(schema, envelope=True)
            source, op = record["source"], str(record["op"])
            before = None if record["before"] is None else shape.columns(record["before"])
            after = None if record["after"] is None else shape.columns(record["after"])
            parts = self._document_keys(op, key, before, after)
        except ProtocolError as exc:
            raise DecodeError(f"topic {topic} partition {partition} offset {offset}: {exc}") from exc
        except (KeyError, TypeError, ValueError) as exc:
            raise DecodeError(
                f"topic {topic} partition {partition} offset {offset}: not a bridge message ({exc!r})"
            ) from exc
        db, table, ts, pos = (
            str(source["db"]),
            str(source["table"]),
            int(source["commit_ts"]),
            int(source["pos"]),
        )
        header = value[:5] if value[:1] == b"\x00" else value[:10]
        image = None if op == "d" or after is None else to_json(after)
        return [
            (topic, partition, offset, db, table, "d" if at else op, part,
             _signed(id_hash(part)) if hashed else 0, ts, pos, None if at else image, header, None, None)
            for at, part in enumerate(parts)
        ]  # fmt: skip

    def compact_placed(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        kind: str,
        count: int,
    ) -> tuple[list[Compact], list[tuple[int, Compact]]]:
        """:meth:`compact` for a reader that owns partition ``partition`` of a table topic of
        ``count`` partitions partitioned by key (the Kafka sink's ``partition-by = "key"``: CRC-32 of
        the key's Avro body, keyless rows in partition 0): the rows of the documents that live in
        this partition, and the others with their partition (the old key of an update that
        changed the key: the sink wrote the change to the new key's partition). A message in a
        partition its key does not hash to raises :class:`DecodeError`: the topic is not
        partitioned by key, and documents would not stay in one partition. ``doc_hash`` is 0."""
        rows = self.compact(topic, partition, offset, key, value, kind, hashed=False)
        if not rows or rows[0][6] is None:
            return rows, []
        if not key:
            if partition != 0:
                raise DecodeError(
                    f"topic {topic} partition {partition} offset {offset}: a keyless row outside "
                    "partition 0: the topic is not partitioned by key (sink.kafka.partition-by)"
                )
            return rows, []
        if zlib.crc32(memoryview(key)[_header_length(key) :]) % count != partition:
            raise DecodeError(
                f"topic {topic} partition {partition} offset {offset}: the key does not hash to this "
                f"partition of {count}: the topic is not partitioned by key (sink.kafka.partition-by)"
            )
        if len(rows) == 2:
            old = self._old_key_partition(key, value or b"", count)
            if old != partition:
                return rows[:1], [(old, rows[1])]
        return rows, []

    def _old_key_partition(self, key: bytes, value: bytes, count: int) -> int:
        """The partition the sink gives the ``before`` image's key: the key record written again
        with the key's schema (Avro's encoding of a value is unique) and hashed as the sink does."""
        header = key[: _header_length(key)]
        parsed: Any = self._key_writers.get(header)
        if parsed is None:
            parsed = self._key_writers[header] = parse_schema(self._decoder.writer_schema(key))
        _, record = self._decoder.decode(value)
        before: Any = record["before"]
        out = io.BytesIO()
        schemaless_writer(out, parsed, {f["name"]: before[f["name"]] for f in parsed["fields"]})
        return zlib.crc32(out.getvalue()) % count

    def _document_keys(
        self, op: str, key: bytes | None, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
    ) -> list[str]:
        """:func:`spark_consumers.latest.document_keys` on the decoded record, without JSON texts:
        the same key parts (values in their JSON form, so a key part is the same either way)."""
        columns = self._key_column_names(key) if key else None
        if op == "d":
            if key and columns is not None:
                if before is None:
                    return [key_text(_json_values(self._key_values(key)))]
                return [key_text(_json_values([before.get(c) for c in columns]))]
            return [image_digest(_json_form(before))] if before is not None else []
        if after is None:  # a key-only (oversize) change: the row changed, how is unknown
            return []
        if columns is None:
            new = image_digest(_json_form(after))
        else:
            new = key_text(_json_values([after.get(c) for c in columns]))
        if op == "u" and before is not None:
            if columns is None:
                old = image_digest(_json_form(before))
            else:
                old = key_text(_json_values([before.get(c) for c in columns]))
            if old != new:
                return [new, old]
        return [new]

    def _key_column_names(self, key: bytes) -> list[str]:
        header = key[:10] if key[:1] == b"\xc3" else key[:5]
        columns = self._key_columns.get(header)
        if columns is None:
            schema, _ = self._decoder.decode(key)
            columns = self._key_columns[header] = list(self._shape(schema, envelope=False).kinds)
        return columns

    def _key_values(self, key: bytes) -> list[Any]:
        schema, record = self._decoder.decode(key)
        return list(self._shape(schema, envelope=False).columns(record).values())

    def types_of(self, header: bytes) -> str:
        """The column kinds JSON of the writer schema a compact row's ``schema`` header names."""
        found = self._types.get(header)
        if found is None:
            found = self._types[header] = self._shape(self._decoder.writer_schema(header), True).types_json
        return found


_PLAIN = (int, str, float, bool, type(None))


def _json_values(values: list[Any]) -> list[Any]:
    """Key values in the form the JSON texts give them (a DECIMAL as its digits, a date as text)."""
    if all(type(v) in _PLAIN for v in values):
        return values
    out: list[Any] = orjson.loads(to_json(values))
    return out


def _json_form(image: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = orjson.loads(to_json(image))
    return out


def _header_length(key: bytes) -> int:
    """The framing header's length of a key: 10 (single-object encoding) or 5 (Confluent)."""
    return 10 if key[:1] == b"\xc3" else 5


def _signed(value: int) -> int:
    """An unsigned 64-bit hash as the signed long Spark holds (the same bits)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _ddl_row(topic: str, partition: int, offset: int, record: Mapping[str, Any]) -> Row:
    raw = record.get("table_schema") or b""
    return (
        topic,
        partition,
        offset,
        str(record["db"]),
        str(record.get("table") or ""),
        str(record["kind"]),
        None,
        to_json({"old_db": record.get("old_db"), "old_table": record.get("old_table")})
        if record["kind"] == "RENAME_TABLE"
        else None,
        None,
        _ddl_types(raw) if raw else "{}",
        int(record["commit_ts"]),
        DDL_POSITION,
    )


def _ddl_types(table_schema: bytes) -> str:
    """The column kinds of the table a DDL leaves behind (its serialized ``TableSchema``)."""
    from bridge.avro import table_avro
    from bridge.proto import row_pb2

    avro = table_avro(row_pb2.TableSchema.FromString(table_schema))
    return RecordShape(_value_record(avro.value_schema)).types_json
