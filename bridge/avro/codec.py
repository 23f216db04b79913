"""Encoding Avro records into Kafka message bytes, and decoding them back.

Two framings, both standard:

- **Confluent wire format** (:class:`RegistryCodec`): ``0x00``, the schema
  id as 4 bytes big-endian, then the Avro binary body. The schema is
  registered in a Confluent Schema Registry under the given subject
  (``<topic>-key`` / ``<topic>-value``), so any Confluent deserializer reads it.
- **Avro single-object encoding** (:class:`SingleObjectCodec`): ``0xC3 0x01``,
  the CRC-64-AVRO fingerprint of the schema's Parsing Canonical Form as 8
  bytes little-endian, then the Avro binary body. The full schema is handed
  to ``publish`` once (the Kafka sink writes it to the compacted schemas
  topic keyed by :func:`fingerprint_hex`).

Both codecs parse a schema once and cache its header per schema object
(and per schema text, so an equal schema built again is not registered
twice). A message is written by the schema's compiled writer
(:mod:`bridge.avro.writer`, byte-identical to fastavro for the datums it
takes) and by fastavro ``schemaless_writer`` for anything else.
"""

from __future__ import annotations

import io
import json
import logging
import struct
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form

from bridge.avro import metrics
from bridge.avro.writer import Fallback, Unsupported, Write, compile_writer
from bridge.errors import BridgeError, ProtocolError, Unreachable

log = logging.getLogger(__name__)

try:  # the HTTP client the registry client uses (httpx2, else httpx): its transport errors
    from confluent_kafka.schema_registry.common._httpx_compat import httpx as _httpx

    _UNREACHABLE: tuple[type[BaseException], ...] = (OSError, _httpx.HTTPError)
except ImportError:  # pragma: no cover - a confluent-kafka without the compat module
    _UNREACHABLE = (OSError,)

REGISTRY_MAGIC = b"\x00"
SINGLE_OBJECT_MAGIC = b"\xc3\x01"
_CACHE_LIMIT = 4096  # schema objects remembered by identity; beyond it the cache restarts


class AvroEncodeError(BridgeError, ValueError):
    """A record does not fit its schema. The message names the subject and the schema."""


class SchemaRegistrationError(BridgeError):
    """The schema registry refused a schema (e.g. incompatible with the subject's versions)."""


class RegistryUnavailable(Unreachable):
    """The schema registry could not be reached or failed; retrying may help."""

    retriable = True


def fingerprint_hex(value: int) -> str:
    """The schemas-topic key of a fingerprint: its 8 header bytes (little-endian) as 16 lowercase hex chars.

    This is the text ``fastavro.schema.fingerprint(pcf, "CRC-64-AVRO")``
    returns, and ``data[2:10].hex()`` of a single-object message.
    """
    return value.to_bytes(8, "little").hex()


def schema_fingerprint(schema: dict[str, Any] | str) -> int:
    """The CRC-64-AVRO fingerprint of a schema's Parsing Canonical Form, as an unsigned int
    (its little-endian bytes are the single-object header's)."""
    text = fingerprint(
        to_parsing_canonical_form(json.loads(schema) if isinstance(schema, str) else schema), "CRC-64-AVRO"
    )
    return int.from_bytes(bytes.fromhex(text), "little")


def _schema_name(schema: object) -> str:
    if isinstance(schema, Mapping):
        name = schema.get("name")
        namespace = schema.get("namespace")
        if isinstance(name, str):
            return f"{namespace}.{name}" if namespace and "." not in name else name
        return str(schema.get("type"))
    return str(schema)


class _Compiled:
    """One schema ready to write: the message header, fastavro's parsed schema and the
    compiled writer (``None`` when the schema needs fastavro's)."""

    __slots__ = ("header", "parsed", "schema", "write")

    def __init__(self, schema: object, parsed: Any, header: bytes, write: Write | None) -> None:
        self.schema = schema  # keeps the object alive, so its id() is not reused while cached
        self.parsed = parsed
        self.header = header
        self.write = write


# what fastavro raises for a datum that does not fit its schema
_WRITE_ERRORS = (KeyError, TypeError, ValueError, OverflowError, IndexError, AttributeError, struct.error)
# what a compiled writer may raise for a datum it does not take: fastavro then writes it
_FALLBACK_ERRORS = (Fallback, *_WRITE_ERRORS)


class _Encoder(ABC):
    """Shared caching and writing of the two codecs."""

    def __init__(self) -> None:
        self._by_id: dict[tuple[str, int], _Compiled] = {}
        self._by_text: dict[tuple[str, str], _Compiled] = {}
        self._lock = threading.RLock()  # publish/register run under it and may encode again

    def encode(self, subject: str, schema: dict[str, Any], record: dict[str, Any] | None) -> bytes:
        """Frame and write ``record`` with ``schema``; the schema is registered/published once."""
        compiled = self._by_id.get((subject, id(schema)))
        if compiled is None or compiled.schema is not schema:
            compiled = self._compile(subject, schema)
        if compiled.write is not None:
            fast = bytearray(compiled.header)
            try:
                compiled.write(fast, record)
                return bytes(fast)
            except _FALLBACK_ERRORS:
                metrics.FASTAVRO_FALLBACKS.inc()  # a datum outside the compiled writer's rules
        out = io.BytesIO()
        out.write(compiled.header)
        try:
            schemaless_writer(out, compiled.parsed, record)
        except _WRITE_ERRORS as exc:
            raise AvroEncodeError(
                f"subject {subject}: the record does not fit schema {_schema_name(schema)}: {exc}"
            ) from None
        return out.getvalue()

    def compiled_header(self, subject: str, schema: dict[str, Any]) -> bytes | None:
        """The framing :meth:`encode` puts before a body of ``schema`` under ``subject`` (the schema
        is registered/published as by the first :meth:`encode`), or None when fastavro writes that
        schema: a caller writing bodies itself (:class:`~bridge.avro.rowwriter.RowWriter`) then
        leaves the schema to :meth:`encode`."""
        compiled = self._by_id.get((subject, id(schema)))
        if compiled is None or compiled.schema is not schema:
            compiled = self._compile(subject, schema)
        return compiled.header if compiled.write is not None else None

    def _compile(self, subject: str, schema: dict[str, Any]) -> _Compiled:
        text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        with self._lock:
            known = self._by_text.get((subject, text))
            if known is None:
                try:
                    parsed = parse_schema(copy_schema(schema))
                except Exception as exc:  # fastavro raises several types for a bad schema
                    raise AvroEncodeError(
                        f"subject {subject}: schema {_schema_name(schema)} is not valid Avro: {exc}"
                    ) from exc
                try:
                    write: Write | None = compile_writer(schema)
                except Unsupported as exc:
                    log.info("schema %s is written by fastavro only: %s", _schema_name(schema), exc)
                    write = None
                header = self._header(subject, schema, parsed)
                known = _Compiled(schema, parsed, header, write)
                self._by_text[(subject, text)] = known
            compiled = _Compiled(schema, known.parsed, known.header, known.write)
            if len(self._by_id) >= _CACHE_LIMIT:
                self._by_id.clear()
            self._by_id[(subject, id(schema))] = compiled
            return compiled

    @abstractmethod
    def _header(self, subject: str, schema: dict[str, Any], parsed: Any) -> bytes:
        """The framing before the Avro body (registers or publishes the schema once)."""


def copy_schema(schema: Any) -> Any:
    """A deep copy of a JSON-able schema (fastavro's parse_schema annotates the dicts it gets)."""
    return json.loads(json.dumps(schema))


class RegistryCodec(_Encoder):
    """Confluent wire format: ``0x00 | schema id (4 bytes BE) | Avro binary``.

    ``client`` is a ``confluent_kafka.schema_registry.SchemaRegistryClient``
    (``SchemaRegistryClient.new_client({"url": "mock://x"})`` gives an
    in-process one for tests). Each (subject, schema) pair is registered
    once; registry errors raise :class:`SchemaRegistrationError` (refused, e.g.
    incompatible) or :class:`RegistryUnavailable` (retriable).
    """

    def __init__(self, client: SchemaRegistryClient) -> None:
        super().__init__()
        self.client = client

    def _header(self, subject: str, schema: dict[str, Any], parsed: Any) -> bytes:
        text = json.dumps(schema, separators=(",", ":"))
        try:
            schema_id = self.client.register_schema(subject, Schema(text, "AVRO"))
        except SchemaRegistryError as exc:
            status = exc.http_status_code
            if status is not None and (status == -1 or status >= 500):
                metrics.REGISTRY_ERRORS.labels("unavailable").inc()
                raise RegistryUnavailable(
                    f"schema registry: registering {_schema_name(schema)} under subject {subject} "
                    f"failed: {exc}"
                ) from exc
            metrics.REGISTRY_ERRORS.labels("refused").inc()
            raise SchemaRegistrationError(
                f"schema registry refused {_schema_name(schema)} under subject {subject}: {exc}"
            ) from exc
        except _UNREACHABLE as exc:
            metrics.REGISTRY_ERRORS.labels("unavailable").inc()
            raise RegistryUnavailable(
                f"schema registry unreachable while registering subject {subject}: {exc}"
            ) from exc
        metrics.SCHEMAS.labels("registry").inc()
        log.info("registered schema %s under subject %s: id %d", _schema_name(schema), subject, schema_id)
        return REGISTRY_MAGIC + schema_id.to_bytes(4, "big")


class SingleObjectCodec(_Encoder):
    """Avro single-object encoding: ``0xC3 0x01 | CRC-64-AVRO fingerprint (8 bytes LE) | Avro binary``.

    ``publish(fingerprint, schema_json)`` is called once per distinct
    fingerprint, before the first message written with that schema is
    returned; an exception from it propagates and the schema is tried again
    on the next call.
    """

    def __init__(self, publish: Callable[[int, str], None]) -> None:
        super().__init__()
        self._publish = publish
        self._published: set[int] = set()

    def _header(self, subject: str, schema: dict[str, Any], parsed: Any) -> bytes:
        text = fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO")
        raw = bytes.fromhex(text)
        value = int.from_bytes(raw, "little")
        if value not in self._published:
            self._publish(value, json.dumps(schema, separators=(",", ":")))
            self._published.add(value)
            metrics.SCHEMAS.labels("single-object").inc()
            log.info("published schema %s with fingerprint %s", _schema_name(schema), text)
        return SINGLE_OBJECT_MAGIC + raw


SchemaSource = Mapping[int, str] | Callable[[int], str | None]


class Decoder:
    """Decodes messages of either framing into (writer schema, record).

    ``registry`` resolves Confluent schema ids (``None``: such messages raise
    :class:`~bridge.errors.ProtocolError`); ``schemas`` maps a single-object
    fingerprint (the int of :func:`schema_fingerprint`) to the full schema
    JSON, as a mapping or a function (looked up again on every miss, so
    schemas may arrive later). A looked-up schema whose fingerprint differs
    is refused. Records come with logical types applied (Decimal, date,
    datetime).
    """

    def __init__(self, registry: SchemaRegistryClient | None, schemas: SchemaSource) -> None:
        self.registry = registry
        self._schemas = schemas
        self._by_id: dict[int, tuple[dict[str, Any], Any]] = {}
        self._by_fingerprint: dict[int, tuple[dict[str, Any], Any]] = {}

    def writer_schema(self, data: bytes) -> dict[str, Any]:
        """The writer schema a message's framing header names: only the header is read (``data[:5]``
        or ``data[:10]`` is enough); ProtocolError as :meth:`decode`."""
        return self._entry(data)[0][0]

    def decode(self, data: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
        """Decode one message value or key; raises ProtocolError for anything unreadable."""
        (schema, parsed), offset, where = self._entry(data)
        body = io.BytesIO(data)
        body.seek(offset)
        try:
            record = schemaless_reader(body, parsed, None)
        except (
            EOFError,
            ValueError,
            TypeError,
            IndexError,
            KeyError,
            UnicodeDecodeError,
            OverflowError,
        ) as exc:
            raise ProtocolError(
                f"message with {where} is not valid Avro of {_schema_name(schema)}: {exc}"
            ) from None
        if body.tell() != len(data):
            raise ProtocolError(
                f"message with {where}: {len(data) - body.tell()} bytes left after the "
                f"{_schema_name(schema)} record"
            )
        if not isinstance(record, dict):
            raise ProtocolError(f"message with {where}: {_schema_name(schema)} is not a record schema")
        return schema, record

    def _entry(self, data: bytes) -> tuple[tuple[dict[str, Any], Any], int, str]:
        """The (schema, parsed schema) a message's header names, where its body starts, and how to
        name the schema in an error."""
        if data[:1] == REGISTRY_MAGIC:
            if len(data) < 5:
                raise ProtocolError(
                    f"Confluent-framed message of {len(data)} bytes is shorter than its header"
                )
            schema_id = int.from_bytes(data[1:5], "big")
            entry = self._by_id.get(schema_id)
            if entry is None:
                entry = self._registry_schema(schema_id)
            offset, where = 5, f"schema id {schema_id}"
        elif data[:2] == SINGLE_OBJECT_MAGIC:
            if len(data) < 10:
                raise ProtocolError(f"single-object message of {len(data)} bytes is shorter than its header")
            value = int.from_bytes(data[2:10], "little")
            entry = self._by_fingerprint.get(value)
            if entry is None:
                entry = self._published_schema(value)
            offset, where = 10, f"fingerprint {fingerprint_hex(value)}"
        else:
            raise ProtocolError(
                f"unknown Avro framing: first bytes {data[:2].hex() or 'none'} are neither 00 (Confluent "
                "wire format) nor c301 (single-object encoding)"
            )
        return entry, offset, where

    def _registry_schema(self, schema_id: int) -> tuple[dict[str, Any], Any]:
        if self.registry is None:
            raise ProtocolError(
                f"message in Confluent wire format (schema id {schema_id}) but no schema registry "
                "is configured"
            )
        try:
            found = self.registry.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise ProtocolError(f"schema id {schema_id} is unknown to the schema registry") from None
            metrics.REGISTRY_ERRORS.labels("unavailable").inc()
            raise RegistryUnavailable(
                f"schema registry: fetching schema id {schema_id} failed: {exc}"
            ) from exc
        except _UNREACHABLE as exc:
            metrics.REGISTRY_ERRORS.labels("unavailable").inc()
            raise RegistryUnavailable(
                f"schema registry unreachable fetching schema id {schema_id}: {exc}"
            ) from exc
        if found.schema_type not in (None, "AVRO"):
            raise ProtocolError(f"schema id {schema_id} is a {found.schema_type} schema, not Avro")
        entry = self._compile(found.schema_str, f"schema id {schema_id}")
        self._by_id[schema_id] = entry
        return entry

    def _published_schema(self, value: int) -> tuple[dict[str, Any], Any]:
        source = self._schemas
        text = source.get(value) if isinstance(source, Mapping) else source(value)
        if text is None:
            raise ProtocolError(f"no published schema has fingerprint {fingerprint_hex(value)}")
        entry = self._compile(text, f"fingerprint {fingerprint_hex(value)}")
        actual = int.from_bytes(
            bytes.fromhex(fingerprint(to_parsing_canonical_form(entry[0]), "CRC-64-AVRO")), "little"
        )
        if actual != value:
            raise ProtocolError(
                f"the schema published for fingerprint {fingerprint_hex(value)} has fingerprint "
                f"{fingerprint_hex(actual)}"
            )
        self._by_fingerprint[value] = entry
        return entry

    @staticmethod
    def _compile(text: str | None, where: str) -> tuple[dict[str, Any], Any]:
        try:
            schema = json.loads(text or "")
            parsed = parse_schema(copy_schema(schema))
        except Exception as exc:  # json or fastavro: the schema text is unusable
            raise ProtocolError(f"the schema of {where} is not valid Avro JSON: {exc}") from exc
        return schema, parsed
