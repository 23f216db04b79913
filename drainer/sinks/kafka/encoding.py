"""How the kafka sink encodes: Avro through :mod:`bridge.avro`, in one of two framings.

- **Single-object** (no ``schema-registry-url``): each message starts with
  the schema's fingerprint; :class:`SchemaPublisher` puts every schema on the
  compacted schemas topic (key: the fingerprint) the first time it is used,
  and again after a failed flush for schemas never acknowledged.
- **Registry**: the Confluent wire format, schemas registered in the Schema
  Registry (``mock://`` URLs: one in-process registry per URL).

:class:`Encoder` also keeps one :class:`~bridge.avro.TableAvro` per schema
object and turns the codec's and the registry's errors into the sink's:
what retrying cannot mend (a refused schema, an unencodable value) is
:class:`SinkApplyError`, an unreachable registry :class:`SinkUnavailable`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Protocol

from confluent_kafka import KafkaError, Message
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bridge.avro import (
    AvroEncodeError,
    RegistryCodec,
    RegistryUnavailable,
    SchemaRegistrationError,
    SingleObjectCodec,
    TableAvro,
    fingerprint_hex,
    table_avro,
)
from bridge.errors import BridgeError
from bridge.kafkaclient import schema_registry_client
from bridge.proto import row_pb2
from bridge.schema import table_name
from bridge.sink.acks import Batch
from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable
from drainer.sinks.kafka.config import KafkaSinkConfig
from drainer.sinks.kafka.producer import Headers, ProducerLink, message_size
from drainer.sinks.kafka.topics import TopicAdmin, TopicSpec

REGISTRY_HEADER = 5  # 0x00 + schema id (4 bytes)
SINGLE_OBJECT_HEADER = 10  # 0xC3 0x01 + fingerprint (8 bytes)


class Codec(Protocol):
    def encode(self, subject: str, schema: dict[str, Any], record: dict[str, Any] | None) -> bytes: ...

    def compiled_header(self, subject: str, schema: dict[str, Any]) -> bytes | None: ...


def header_length(config: KafkaSinkConfig) -> int:
    """The bytes of the framing before a message's Avro body."""
    return REGISTRY_HEADER if config.schema_registry_url else SINGLE_OBJECT_HEADER


class Encoder:
    """Avro encoding of keys, envelopes and DDL records; see the module docstring."""

    def __init__(self, config: KafkaSinkConfig, publish_schema: Callable[[int, str], None]) -> None:
        self.config = config
        self.single_object = not config.schema_registry_url
        self.registry: SchemaRegistryClient | None = None
        self._publish_schema = publish_schema
        self._codec: Codec | None = None
        self._avro: dict[int, tuple[row_pb2.TableSchema, TableAvro]] = {}

    def start(self) -> None:
        if self._codec is not None:
            return
        if self.single_object:
            self._codec = SingleObjectCodec(self._publish_schema)
            return
        self.registry = schema_registry_client(self.config.schema_registry_url, self.config.schema_registry)
        self._codec = RegistryCodec(self.registry)

    def table_avro(self, schema: row_pb2.TableSchema) -> TableAvro:
        cached = self._avro.get(id(schema))
        if cached is not None and cached[0] is schema:
            return cached[1]
        if len(self._avro) >= 4096:
            self._avro.clear()
        avro = table_avro(schema)
        self._avro[id(schema)] = (schema, avro)  # the schema object is kept, so its id is not reused
        return avro

    def encode(
        self,
        subject: str,
        schema: dict[str, Any],
        record: dict[str, Any] | None,
        commit_ts: int,
        table: row_pb2.TableSchema | None,
        where: str = "",
    ) -> bytes:
        """``record`` in ``schema`` for ``subject``; errors name the commit_ts and the table."""
        assert self._codec is not None
        try:
            return self._codec.encode(subject, schema, record)
        except SinkError:
            raise
        except Exception as exc:
            # the place is named only on failure: formatting it per message cost a share of every row
            place = f"kafka sink: commit_ts {commit_ts}: table {table_name(table) if table else where}"
            _raise_translated(exc, subject, place)
            raise

    def header(
        self, subject: str, schema: dict[str, Any], commit_ts: int, table: row_pb2.TableSchema
    ) -> bytes | None:
        """The framing of ``schema``'s bodies under ``subject`` for a caller that writes the bodies
        itself (registered/published now if not yet), or None: :meth:`encode` writes that schema.
        Errors as :meth:`encode`'s."""
        assert self._codec is not None
        try:
            return self._codec.compiled_header(subject, schema)
        except SinkError:
            raise
        except Exception as exc:
            _raise_translated(exc, subject, f"kafka sink: commit_ts {commit_ts}: table {table_name(table)}")
            raise


def _raise_translated(exc: Exception, subject: str, where: str) -> None:
    """Raise the sink's error for what encoding ``subject`` raised; return for a bug (re-raised)."""
    if isinstance(exc, SchemaRegistrationError | AvroEncodeError):
        raise SinkApplyError(f"{where}: {exc}") from exc
    if isinstance(exc, RegistryUnavailable):
        raise SinkUnavailable(f"{where}: {exc}") from exc
    if isinstance(exc, SchemaRegistryError):
        status = exc.http_status_code
        text = f"{where}: schema registry, subject {subject}: HTTP {status}: {exc.error_message}"
        if exc.http_status_code in (401, 403, 409, 422):
            raise SinkApplyError(text) from exc
        raise SinkUnavailable(text) from exc
    if isinstance(exc, BridgeError):
        return
    if isinstance(exc, OSError | ConnectionError):
        raise SinkUnavailable(f"{where}: schema registry, subject {subject}: {exc}") from exc
    if type(exc).__module__.startswith(("httpx", "httpcore")):  # the registry client's transport
        raise SinkUnavailable(f"{where}: schema registry, subject {subject}: {exc!r}") from exc


class SchemaPublisher:
    """The schemas topic of the single-object encoding (see the module docstring)."""

    def __init__(self, link: ProducerLink, admin: TopicAdmin, topic: str, replication_factor: int) -> None:
        self._link = link
        self._admin = admin
        self._topic = topic
        self._spec = TopicSpec(1, replication_factor, {"cleanup.policy": "compact"})
        self._unconfirmed: dict[int, str] = {}
        self.republish = False

    def publish(self, fingerprint: int, schema_json: str) -> None:
        """Called by the single-object codec the first time it encodes with a schema."""
        fingerprint &= 0xFFFF_FFFF_FFFF_FFFF
        self._unconfirmed[fingerprint] = schema_json
        self._send(fingerprint, schema_json)

    def flush_failed(self) -> None:
        """After a failed flush: schemas never acknowledged go out again before the next write."""
        self.republish = bool(self._unconfirmed)

    def publish_again(self) -> None:
        self.republish = False
        for fingerprint, schema_json in list(self._unconfirmed.items()):
            self._send(fingerprint, schema_json)

    def _send(self, fingerprint: int, schema_json: str) -> None:
        link, tracker = self._link, self._link.tracker
        batch = link.batch
        if batch is None:
            batch = tracker.begin(tracker.acked, "-")
        key, value = fingerprint_hex(fingerprint).encode(), schema_json.encode()
        headers: Headers = [("bridge.kind", b"schema")]
        self._admin.ensure({self._topic: self._spec})
        size = message_size(key, value, headers)
        report = functools.partial(link.later, self._on_delivery, batch, fingerprint, size)
        link.send(self._topic, 0, key, value, headers, report, batch)
        tracker.sent(batch)
        if batch is not link.batch:
            tracker.close(batch)

    def _on_delivery(
        self, batch: Batch, fingerprint: int, size: int, error: KafkaError | None, message: Message
    ) -> None:
        if error is None:
            self._unconfirmed.pop(fingerprint, None)
        self._link.on_delivery(batch, "schema", size, error, message)
