"""The ``kafka`` sink: Avro change topics that standard Kafka consumers read.

Every committed row change becomes one message on its table's topic (key:
the table's primary or NOT NULL unique key as an Avro record; value: an
envelope with ``before``, ``after``, ``op``, ``source`` and ``ts_ms``), every
DDL one message on the DDL topic, and resolved-ts watermarks tell consumers
when a prefix of the stream is complete. The consumer contract — topics,
keys, partitions, headers, ordering, duplicates, both encodings, outages,
oversize messages — is docs/kafka-sink.md; the codec is :mod:`bridge.avro`.

Configuration: ``[sink.kafka]``, :class:`KafkaSinkConfig` (docs/configuration.md).

How it works:

- ``open`` creates the DDL topic (and, without a schema registry, the schemas
  topic) and a topic for every table of the drainer's schema snapshot, so
  consumers can subscribe before the first change arrives.
- ``write`` encodes and produces with an idempotent producer (``acks=all``):
  within a partition the messages keep the order they were produced in, so
  the changes of one key arrive in commit order. A full producer queue makes
  ``write`` wait (polling) instead of failing.
- ``flush`` waits for every delivery report and returns the highest commit_ts
  such that every message at or below it was acknowledged
  (:mod:`drainer.sinks.kafka_delivery`). A failed delivery makes ``flush``
  raise :class:`SinkUnavailable`, and the drainer writes every unflushed event
  again (duplicates are part of the contract); refusals that retrying cannot
  mend (a message too large, authorization) raise :class:`SinkApplyError`
  naming the table and commit_ts.
- Watermarks are published at most every ``resolved-interval`` while writing
  and after every flush that moved the acknowledged position, only for
  positions the brokers acknowledged.

Metrics: :mod:`drainer.sinks.kafka_metrics`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from bridge.avro import (
    DDL_SCHEMA,
    ENVELOPE_OPS,
    AvroEncodeError,
    RegistryCodec,
    RegistryUnavailable,
    SchemaRegistrationError,
    SingleObjectCodec,
    TableAvro,
    ddl_record,
    fingerprint_hex,
    source_record,
    table_avro,
)
from bridge.config import build
from bridge.errors import BridgeError, ConfigError
from bridge.kafkaclient import SettingValue, redact_url, redacted, schema_registry_client
from bridge.proto import row_pb2
from bridge.schema import table_name
from bridge.sink.contract import Sink, SinkContext
from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable
from bridge.sink.events import DDLEvent, Event, ResolvedEvent, RowChange, TxnEvent
from bridge.tso import physical_ms
from drainer.sinks import kafka_metrics as metrics
from drainer.sinks.kafka_delivery import Batch, DeliveryTracker, Failure
from drainer.sinks.kafka_topics import TopicAdmin, TopicNames, TopicSpec, check_template

log = logging.getLogger(__name__)
_RDKAFKA_LOG = logging.getLogger("drainer.sinks.kafka.librdkafka")  # librdkafka's own log lines

Change = row_pb2.SchemaChange
Headers = list[tuple[str, str | bytes | None]]

# The librdkafka settings the sink owns: the contract depends on them.
_OWNED = {
    "bootstrap.servers": "sink.kafka.bootstrap-servers",
    "enable.idempotence": "(always true: per-partition order and no duplicates from internal retries)",
    "acks": "(always all)",
    "request.required.acks": "(always all)",
    "linger.ms": "sink.kafka.linger",
    "queue.buffering.max.ms": "sink.kafka.linger",
    "compression.type": "sink.kafka.compression",
    "compression.codec": "sink.kafka.compression",
    "message.timeout.ms": "sink.kafka.delivery-timeout",
    "delivery.timeout.ms": "sink.kafka.delivery-timeout",
    "transactional.id": "(the sink does not use transactions)",
}
# Settings the admin client shares with the producer (connection and security).
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.", "socket.", "client.", "broker.", "reconnect.", "metadata.")
# Delivery errors that retrying cannot mend.
_REFUSED = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_MSG_SIZE,
        KafkaError.RECORD_LIST_TOO_LARGE,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.INVALID_RECORD,
        KafkaError.INVALID_REQUIRED_ACKS,
        KafkaError.INVALID_CONFIG,
        KafkaError._INVALID_ARG,
    }
)
# The topic (or a partition of it) is gone, e.g. a broker that lost it: look it up again.
_UNKNOWN_TOPIC = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)
_REGISTRY_HEADER = 5  # 0x00 + schema id (4 bytes)
_SINGLE_OBJECT_HEADER = 10  # 0xC3 0x01 + fingerprint (8 bytes)
_LOG_EVERY = 10.0  # seconds between repeated warnings of one kind


@dataclass
class KafkaSinkConfig:
    """The ``[sink.kafka]`` table."""

    bootstrap_servers: str = field(
        metadata={"help": "host:port[,host:port...] of the Kafka brokers to bootstrap from"}
    )
    prefix: str = field(default="bridge", metadata={"help": "first part of every topic name"})
    topic_template: str = field(
        default="{prefix}.{db}.{table}",
        metadata={"help": "a table's topic; placeholders {prefix}, {db}, {table} (both required)"},
    )
    partitions: int = field(default=3, metadata={"help": "partitions of a table topic the sink creates"})
    replication_factor: int = field(
        default=1, metadata={"help": "replication factor of topics the sink creates"}
    )
    partition_by: Literal["key", "table", "commit-ts"] = field(
        default="key",
        metadata={"help": "key: crc32 of the key (order per key); table: one partition per table; commit-ts"},
    )
    schema_registry_url: str = field(
        default="",
        metadata={
            "help": "Confluent Schema Registry (Confluent wire format); empty: Avro single-object "
            "encoding with the schemas topic"
        },
    )
    schema_registry: dict[str, SettingValue] = field(
        default_factory=dict,
        metadata={"help": "extra SchemaRegistryClient settings (e.g. basic.auth.user.info); never logged"},
    )
    tombstones: bool = field(
        default=False, metadata={"help": "a null-value message with the same key after each delete"}
    )
    resolved_interval: float = field(
        default=1.0, metadata={"duration": True, "help": "at most this often a resolved-ts watermark"}
    )
    max_message_bytes: int = field(
        default=1_000_000, metadata={"help": "largest message (key + value + headers) the sink produces"}
    )
    oversize: Literal["fail", "key-only"] = field(
        default="fail",
        metadata={"help": "a larger message: fail (stop, naming table and commit_ts) or key-only envelope"},
    )
    linger: float = field(default=0.005, metadata={"duration": True, "help": "librdkafka linger.ms"})
    compression: Literal["none", "lz4", "zstd", "snappy", "gzip"] = field(
        default="none", metadata={"help": "compression of produced batches"}
    )
    producer: dict[str, SettingValue] = field(
        default_factory=dict,
        metadata={
            "help": "extra librdkafka settings (security.protocol, sasl.*, ssl.*, ...); secrets never logged"
        },
    )
    delivery_timeout: float = field(
        default=120.0,
        metadata={
            "duration": True,
            "help": "how long a message may wait for its delivery; then the flush fails",
        },
    )

    def validate(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigError('sink.kafka.bootstrap-servers: name at least one broker, e.g. "127.0.0.1:9092"')
        check_template(self.topic_template, self.prefix)
        if not 1 <= self.partitions <= 100_000:
            raise ConfigError(f"sink.kafka.partitions: between 1 and 100000, got {self.partitions}")
        if not 1 <= self.replication_factor <= 32:
            raise ConfigError(
                f"sink.kafka.replication-factor: between 1 and 32, got {self.replication_factor}"
            )
        if not 1024 <= self.max_message_bytes <= 1_000_000_000:
            raise ConfigError(
                f"sink.kafka.max-message-bytes: between 1024 and 1000000000, got {self.max_message_bytes}"
            )
        if self.linger > 900:
            raise ConfigError(f"sink.kafka.linger: at most 900s, got {self.linger:g}s")
        if self.delivery_timeout < 1 or self.delivery_timeout <= self.linger:
            raise ConfigError(
                "sink.kafka.delivery-timeout: at least 1s and more than linger, "
                f"got {self.delivery_timeout:g}s"
            )
        url = self.schema_registry_url
        if url and not url.startswith(("http://", "https://", "mock://")):
            raise ConfigError(f"sink.kafka.schema-registry-url: expected http(s):// or mock://, got {url!r}")


def check_settings(value: object, key: str) -> dict[str, SettingValue]:
    """A table of client settings: string keys, scalar values; :class:`ConfigError` naming the key."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: expected a table [{key}], got {type(value).__name__}")
    settings: dict[str, SettingValue] = {}
    for name, setting in value.items():
        if not isinstance(setting, str | int | float | bool):
            raise ConfigError(f"{key}.{name}: expected a string, number or boolean")
        settings[str(name)] = setting
    return settings


class _Codec(Protocol):
    def encode(self, subject: str, schema: dict[str, Any], record: dict[str, Any] | None) -> bytes: ...


def _with_last(changes: Iterator[RowChange]) -> Iterator[tuple[RowChange, bool]]:
    """Each change with whether it is the last one (one change of look-ahead)."""
    previous = next(changes, None)
    for change in changes:
        yield previous, False  # type: ignore[misc]
        previous = change
    if previous is not None:
        yield previous, True


class KafkaSink(Sink):
    """See the module docstring. Built as ``KafkaSink(config_table, data_dir)``."""

    name = "kafka"

    def __init__(self, config_table: Mapping[str, Any], data_dir: Path) -> None:
        table = dict(config_table)
        extra_producer = check_settings(table.pop("producer", {}), "sink.kafka.producer")
        extra_registry = check_settings(table.pop("schema-registry", {}), "sink.kafka.schema-registry")
        if "bootstrap-servers" not in table:
            raise ConfigError(
                'sink.kafka.bootstrap-servers: required, e.g. bootstrap-servers = "127.0.0.1:9092"'
            )
        self.config = build(KafkaSinkConfig, table, prefix="sink.kafka.")
        self.config.producer, self.config.schema_registry = extra_producer, extra_registry
        for name in extra_producer:
            if name in _OWNED:
                raise ConfigError(f"sink.kafka.producer.{name}: set by the sink {_OWNED[name]}; remove it")
        self.names = TopicNames(self.config.prefix, self.config.topic_template)
        self.cluster_id = 0  # the cluster replicated: source.cluster_id of every message (from open)
        self.single_object = not self.config.schema_registry_url
        self._admin = TopicAdmin(self._admin_settings(), min(self.config.delivery_timeout, 30.0))
        self._producer: Producer | None = None
        self._codec: _Codec | None = None
        self._header_length = _SINGLE_OBJECT_HEADER if self.single_object else _REGISTRY_HEADER
        self._tracker = DeliveryTracker()
        self._batch: Batch | None = None
        # Lower-cased (db, table) -> topic of every table the sink knows (watermarks go there).
        self._tables: dict[tuple[str, str], str] = {}
        self._topic_tables: dict[str, str] = {}  # topic -> "db.table" (for error messages)
        self._avro: dict[int, tuple[row_pb2.TableSchema, TableAvro]] = {}
        self._unconfirmed_schemas: dict[int, str] = {}
        self._republish = False
        self._written = 0
        self._resolved_published = 0
        self._resolved_at = 0.0
        self._fatal: KafkaError | None = None
        self._warned: dict[str, float] = {}
        self._retries_seen = 0
        self._since_poll = 0
        self._pending: list[tuple[Callable[..., None], tuple[Any, ...]]] = []  # see _later
        self._counted: dict[tuple[str, str], Any] = {}
        self._bytes: dict[str, Any] = {}
        self.delivered: Counter[str] = Counter()  # acknowledged messages by kind (row, tombstone, ...)
        # Called on the sink's thread with (kind, ts, message) for every acknowledged message: kind is
        # row, tombstone, ddl, resolved or schema; ts the commit_ts (resolved: the watermark; schema: 0);
        # the message has its topic, partition and offset. For embedding, benchmarks and tests.
        self.on_acknowledged: Callable[[str, int, Message], None] | None = None
        self.registry: SchemaRegistryClient | None = None

    # -- settings -------------------------------------------------------------

    def _admin_settings(self) -> dict[str, SettingValue]:
        shared = {k: v for k, v in self.config.producer.items() if k.startswith(_SHARED_PREFIXES)}
        return {**shared, "bootstrap.servers": self.config.bootstrap_servers}

    def producer_settings(self) -> dict[str, Any]:
        """The librdkafka settings of the producer (without callbacks)."""
        config = self.config
        settings: dict[str, Any] = {
            "queue.buffering.max.kbytes": 65536,  # bounded memory; overridable
            "statistics.interval.ms": 5000,
            **config.producer,
            "bootstrap.servers": config.bootstrap_servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": config.linger * 1000,
            "compression.type": config.compression,
            "message.timeout.ms": int(config.delivery_timeout * 1000),
        }
        if "message.max.bytes" not in config.producer:
            settings["message.max.bytes"] = max(1_000_000, config.max_message_bytes + 65536)
        return settings

    def _new_producer(self) -> Producer:
        settings = self.producer_settings()
        try:
            producer = Producer(
                {
                    **settings,
                    "error_cb": functools.partial(self._later, self._on_error),
                    "stats_cb": functools.partial(self._later, self._on_stats),
                    "logger": _RDKAFKA_LOG,
                },
            )
        except KafkaException as exc:
            raise ConfigError(
                f"sink.kafka.producer: librdkafka refused the settings: {exc.args[0].str()}"
            ) from None
        log.info("kafka sink: producer settings %s", redacted(settings))
        return producer

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            raise SinkError("kafka sink: not open")
        return self._producer

    # -- Sink protocol ------------------------------------------------------

    def open(self, context: SinkContext) -> None:
        """Creates the topics of the DDL stream (and schemas) and of every table in the context."""
        super().open(context)
        resume_ts = context.resume_ts
        self.cluster_id = context.cluster_id
        if self._producer is None:
            self._producer = self._new_producer()
        if self._codec is None:
            self._codec = self._new_codec()
        self._tracker = DeliveryTracker(resume_ts)
        self._written = self._resolved_published = resume_ts
        self._resolved_at = time.monotonic()
        for schema in context.tables:
            self._remember(schema.db, schema.table, self.names.table(schema.db, schema.table))
        # Kept forever: a consumer reading from the beginning replays every DDL (docs/consume.md).
        wanted = {self.names.ddl: TopicSpec(1, self.config.replication_factor, {"retention.ms": "-1"})}
        if self.single_object:
            wanted[self.names.schemas] = TopicSpec(
                1, self.config.replication_factor, {"cleanup.policy": "compact"}
            )
        for topic in self._tables.values():
            wanted[topic] = self._table_spec()
        self._admin.ensure(wanted, "opening: ")
        registry = redact_url(self.config.schema_registry_url)
        log.info(
            "kafka sink open at commit_ts %d: %s, %d table topics, %s encoding",
            resume_ts,
            self.config.bootstrap_servers,
            len(self._tables),
            "single-object" if self.single_object else f"schema registry {registry}",
        )

    def write(self, events: Sequence[Event]) -> None:
        if self._fatal is not None:
            # Nothing the old producer holds will be delivered: the position stops where it is, so
            # the next flush fails and the drainer writes every unflushed event again, through the
            # new producer (without this, a write refused by a dead producer was retried forever).
            self._tracker.fail(
                Failure(self._tracker.acked, "", "", f"the producer failed: {self._fatal.name()}", True)
            )
            self._replace_producer()
        if self._republish:
            self._republish_schemas()
        for event in events:
            if isinstance(event, TxnEvent):
                self._write_txn(event)
            elif isinstance(event, DDLEvent):
                self._write_ddl(event)
            elif isinstance(event, ResolvedEvent):
                self._tracker.close(self._tracker.begin(event.commit_ts))
            self._written = max(self._written, event.commit_ts)
        self._serve(self.producer.poll, 0)
        self._publish_resolved(force=False)
        metrics.QUEUE_MESSAGES.set(len(self.producer))

    def flush(self) -> int:
        producer = self.producer
        started = time.monotonic()
        deadline = started + self.config.delivery_timeout + 30.0
        while self._serve(producer.flush, 1.0) > 0:
            metrics.QUEUE_MESSAGES.set(len(producer))
            if self._fatal is not None:
                break  # this producer delivers nothing more; a new one takes over below
            now = time.monotonic()
            if now > deadline:
                self._tracker.fail(
                    Failure(
                        self._tracker.acked, "", "", "delivery reports overdue past delivery-timeout", True
                    )
                )
                break
            self._warn(
                "flush",
                "kafka sink: flush waits for %d messages (%.0fs so far); the checkpoint stays at %d",
                len(producer),
                now - started,
                self._tracker.acked,
            )
        metrics.QUEUE_MESSAGES.set(len(producer))
        failure = self._tracker.failure
        if failure is not None:
            self._failed_flush(failure)
        position = self._tracker.acked
        metrics.ACKED_TS.set(position)
        self._publish_resolved(force=True)
        return position

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        left = (
            self._serve(producer.flush, min(self.config.delivery_timeout, 30.0)) if self._fatal is None else 1
        )
        if left:
            log.warning("kafka sink: closing with messages undelivered (the drainer writes them again)")
        self._discard(producer)
        self._admin.close()
        log.info("kafka sink closed; acknowledged messages: %s", dict(self.delivered))

    # -- transactions -------------------------------------------------------

    def _write_txn(self, event: TxnEvent) -> None:
        with self._batch_of(event.commit_ts, "transaction") as batch:
            ts_ms = physical_ms(event.commit_ts)
            schema = None
            for pos, (change, last) in enumerate(_with_last(event.changes())):
                if change.table is not schema:
                    schema = change.table
                    batch.table = table_name(schema)
                self._write_change(event, change, pos, last, ts_ms)

    def _write_change(self, event: TxnEvent, change: RowChange, pos: int, last: bool, ts_ms: int) -> None:
        schema = change.table
        avro = self._table_avro(schema)
        topic = self._table_topic(schema.db, schema.table, event.commit_ts)
        image = change.after if change.after is not None else change.before
        assert image is not None
        key_record = avro.key_record(image)
        key = None
        if avro.key_schema is not None:
            key = self._encode(f"{topic}-key", avro.key_schema, key_record, event.commit_ts, schema)
        source = source_record(
            cluster_id=self.cluster_id,
            db=schema.db,
            table=schema.table,
            start_ts=event.start_ts,
            commit_ts=event.commit_ts,
            pos=pos,
            last=last,
        )
        envelope = avro.envelope(change.kind, change.before, change.after, source, ts_ms)
        value = self._encode(f"{topic}-value", avro.value_schema, envelope, event.commit_ts, schema)
        partition = self._partition(topic, schema, key, event.commit_ts)
        headers: Headers = [
            ("bridge.kind", b"row"),
            ("bridge.commit-ts", str(event.commit_ts).encode()),
            ("bridge.pos", str(pos).encode()),
        ]
        size = _size(key, value, headers)
        if size > self.config.max_message_bytes:
            key_only = {
                "before": None,
                "after": None,
                "op": ENVELOPE_OPS[change.kind],
                "source": source,
                "ts_ms": ts_ms,
            }
            value = self._oversize(topic, schema, event.commit_ts, change.kind, size, key, key_only)
            headers.append(("bridge.oversize", b"1"))
            size = _size(key, value, headers)
        self._produce(topic, partition, key, value, headers, "row", size)
        if not self.config.tombstones or key is None:
            return
        if change.kind == "delete":
            self._produce(topic, partition, key, None, _tombstone_headers(event.commit_ts, pos), "tombstone")
        elif change.kind == "update" and change.before is not None:
            old_record = avro.key_record(change.before)
            if old_record != key_record:  # the key changed: the old key is gone
                old_key = self._encode(
                    f"{topic}-key", avro.key_schema or {}, old_record, event.commit_ts, schema
                )
                old_partition = self._partition(topic, schema, old_key, event.commit_ts)
                headers = _tombstone_headers(event.commit_ts, pos)
                self._produce(topic, old_partition, old_key, None, headers, "tombstone")

    def _oversize(
        self,
        topic: str,
        schema: row_pb2.TableSchema,
        commit_ts: int,
        kind: str,
        size: int,
        key: bytes | None,
        key_only: dict[str, Any],
    ) -> bytes:
        """The value that replaces an oversize message's (``key-only``), or the error (``fail``)."""
        where = f"kafka sink: commit_ts {commit_ts}: table {table_name(schema)}"
        limit = self.config.max_message_bytes
        if self.config.oversize == "fail":
            raise SinkApplyError(
                f"{where}: {_article(kind)} {kind} message of {size} bytes is larger than "
                f"sink.kafka.max-message-bytes ({limit}); raise the limit (and the topic's "
                'max.message.bytes) or set sink.kafka.oversize = "key-only"'
            )
        value = self._encode(
            f"{topic}-value", self._table_avro(schema).value_schema, key_only, commit_ts, schema
        )
        if _size(key, value, []) + 64 > limit:
            raise SinkApplyError(f"{where}: even the key-only {kind} message is larger than {limit} bytes")
        self._warn(
            f"oversize:{topic}",
            "%s: a %s message of %d bytes is larger than max-message-bytes (%d); sent key-only",
            where,
            kind,
            size,
            limit,
        )
        return value

    # -- DDL ------------------------------------------------------------------

    def _write_ddl(self, event: DDLEvent) -> None:
        change = event.change
        where = f"{change.db}.{change.table}" if change.table else change.db
        with self._batch_of(event.commit_ts, "DDL event") as batch:
            batch.table = where
            topic = ""
            if change.kind in (
                Change.CREATE_TABLE,
                Change.RENAME_TABLE,
                Change.ALTER_TABLE,
                Change.TRUNCATE_TABLE,
            ):
                topic = self._table_topic(
                    change.db, change.table, event.commit_ts
                )  # created before the event
            elif change.kind == Change.DROP_TABLE:
                topic = self.names.table(change.db, change.table)
            record = ddl_record(
                change,
                cluster_id=self.cluster_id,
                start_ts=event.start_ts,
                commit_ts=event.commit_ts,
                query=event.query,
                topic=topic,
            )
            value = self._encode(f"{self.names.ddl}-value", DDL_SCHEMA, record, event.commit_ts, None, where)
            headers: Headers = [("bridge.kind", b"ddl"), ("bridge.commit-ts", str(event.commit_ts).encode())]
            size = _size(None, value, headers)
            if size > self.config.max_message_bytes:
                raise SinkApplyError(
                    f"kafka sink: commit_ts {event.commit_ts}: table {where}: the DDL event is {size} bytes, "
                    f"larger than sink.kafka.max-message-bytes ({self.config.max_message_bytes})"
                )
            self._admin.ensure({self.names.ddl: TopicSpec(1, self.config.replication_factor)})
            self._produce(self.names.ddl, 0, None, value, headers, "ddl")
        self._follow(change)
        log.info("kafka sink: DDL at commit_ts %d published: %s", event.commit_ts, event.query[:200])

    def _follow(self, change: row_pb2.SchemaChange) -> None:
        """Keep the set of table topics that get watermarks in step with the DDL."""
        if change.kind == Change.DROP_TABLE:
            self._tables.pop((change.db.lower(), change.table.lower()), None)
        elif change.kind == Change.RENAME_TABLE:
            self._tables.pop((change.old_db.lower(), change.old_table.lower()), None)
        elif change.kind == Change.DROP_DATABASE:
            for name in [name for name in self._tables if name[0] == change.db.lower()]:
                del self._tables[name]

    # -- topics, partitions, encoding ----------------------------------------

    def _table_spec(self) -> TopicSpec:
        return TopicSpec(self.config.partitions, self.config.replication_factor)

    def _remember(self, db: str, table: str, topic: str) -> None:
        self._tables[(db.lower(), table.lower())] = topic
        self._topic_tables[topic] = f"{db}.{table}"

    def _table_topic(self, db: str, table: str, commit_ts: int) -> str:
        topic = self._tables.get((db.lower(), table.lower()))
        if topic is None:
            topic = self.names.table(db, table)
            self._remember(db, table, topic)
        if topic not in self._admin.partitions:
            self._admin.ensure({topic: self._table_spec()}, f"commit_ts {commit_ts}: table {db}.{table}: ")
        return topic

    def _partition(self, topic: str, schema: row_pb2.TableSchema, key: bytes | None, commit_ts: int) -> int:
        count = self._admin.partitions[topic]
        mode = self.config.partition_by
        if mode == "key":
            return 0 if key is None else zlib.crc32(memoryview(key)[self._header_length :]) % count
        if mode == "table":
            return zlib.crc32(f"{schema.db}.{schema.table}".encode()) % count
        return commit_ts % count

    def _table_avro(self, schema: row_pb2.TableSchema) -> TableAvro:
        cached = self._avro.get(id(schema))
        if cached is not None and cached[0] is schema:
            return cached[1]
        if len(self._avro) >= 4096:
            self._avro.clear()
        avro = table_avro(schema)
        self._avro[id(schema)] = (schema, avro)  # the schema object is kept, so its id is not reused
        return avro

    def _new_codec(self) -> _Codec:
        if self.single_object:
            return SingleObjectCodec(self._publish_schema)
        self.registry = schema_registry_client(self.config.schema_registry_url, self.config.schema_registry)
        return RegistryCodec(self.registry)

    def _encode(
        self,
        subject: str,
        schema: dict[str, Any],
        record: dict[str, Any] | None,
        commit_ts: int,
        table: row_pb2.TableSchema | None,
        where: str = "",
    ) -> bytes:
        assert self._codec is not None
        where = f"kafka sink: commit_ts {commit_ts}: table {table_name(table) if table else where}"
        try:
            return self._codec.encode(subject, schema, record)
        except SinkError:
            raise
        except (SchemaRegistrationError, AvroEncodeError) as exc:
            raise SinkApplyError(f"{where}: {exc}") from exc
        except RegistryUnavailable as exc:
            raise SinkUnavailable(f"{where}: {exc}") from exc
        except SchemaRegistryError as exc:
            status = exc.http_status_code
            text = f"{where}: schema registry, subject {subject}: HTTP {status}: {exc.error_message}"
            if exc.http_status_code in (401, 403, 409, 422):
                raise SinkApplyError(text) from exc
            raise SinkUnavailable(text) from exc
        except BridgeError:
            raise
        except (OSError, ConnectionError) as exc:
            raise SinkUnavailable(f"{where}: schema registry, subject {subject}: {exc}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith(("httpx", "httpcore")):  # the registry client's transport
                raise SinkUnavailable(f"{where}: schema registry, subject {subject}: {exc!r}") from exc
            raise

    # -- producing --------------------------------------------------------------

    @contextlib.contextmanager
    def _batch_of(self, commit_ts: int, what: str) -> Iterator[Batch]:
        """The messages produced inside form one batch of the delivery tracker (the checkpoint waits
        for all of them); an exception aborts it, naming ``what`` was being produced."""
        batch = self._batch = self._tracker.begin(commit_ts)
        try:
            yield batch
        except BaseException as exc:
            self._tracker.abort(batch, f"producing the {what} was cut short: {exc}")
            raise
        finally:
            self._batch = None
        self._tracker.close(batch)

    def _produce(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        kind: str,
        size: int = -1,
    ) -> None:
        """Produce one message of the batch at hand; ``size``: its :func:`_size`, if known."""
        batch = self._batch
        assert batch is not None
        if size < 0:
            size = _size(key, value, headers)
        report = functools.partial(self._later, self._on_delivery, batch, kind, size)
        self._send(topic, partition, key, value, headers, report, batch)
        self._tracker.sent(batch)

    def _send(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers,
        report: Any,
        batch: Batch | None,
    ) -> None:
        producer = self.producer
        waited_since = 0.0
        while True:
            try:
                producer.produce(topic, value, key, partition, on_delivery=report, headers=headers)
                break
            except BufferError:
                now = time.monotonic()
                waited_since = waited_since or now
                if now - waited_since > self.config.delivery_timeout + 30.0:
                    raise SinkUnavailable(
                        f"kafka sink: {self._where(batch, topic)}: the producer queue stayed full for "
                        f"{now - waited_since:.0f}s"
                    ) from None
                self._warn("queue", "kafka sink: producer queue full (%d messages); waiting", len(producer))
                self._serve(producer.poll, 0.05)
                if self._fatal is not None:
                    raise SinkUnavailable(
                        f"kafka sink: {self._where(batch, topic)}: the producer failed: {self._fatal.str()}"
                    ) from None
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.fatal():
                    self._fatal = error  # the drainer's next write replaces the producer
                text = (
                    f"kafka sink: {self._where(batch, topic)}: cannot produce to {topic}: "
                    f"{error.name()}: {error.str()}"
                )
                if error.code() in _REFUSED:
                    raise SinkApplyError(text) from None
                raise SinkUnavailable(text) from None
        self._since_poll += 1
        if self._since_poll >= 256:
            self._since_poll = 0
            self._serve(producer.poll, 0)

    def _where(self, batch: Batch | None, topic: str) -> str:
        if batch is None:
            return f"topic {topic}"
        return f"commit_ts {batch.commit_ts}: table {batch.table or self._topic_tables.get(topic, '-')}"

    def _on_delivery(
        self, batch: Batch, kind: str, size: int, error: KafkaError | None, message: Message
    ) -> None:
        latency = message.latency()
        if latency is not None:
            metrics.DELIVERY_SECONDS.observe(latency)
        topic = message.topic() or ""
        if error is None:
            self._count(topic, kind, size, 0 if kind == "schema" else batch.commit_ts, message)
            self._tracker.delivered(batch)
            return
        self._delivery_error(error, topic, kind)
        failure = Failure(
            batch.commit_ts,
            batch.table or self._topic_tables.get(topic, ""),
            topic,
            f"{error.name()}: {error.str()}",
            retriable=error.code() not in _REFUSED,
        )
        self._tracker.failed(batch, failure)

    def _delivery_error(self, error: KafkaError, topic: str, kind: str) -> None:
        metrics.DELIVERY_ERRORS.labels(error.name()).inc()
        if error.code() in _UNKNOWN_TOPIC:
            self._admin.forget(topic)  # made again before the next message to it
        if error.fatal():
            self._fatal = error
        self._warn(
            f"delivery:{error.name()}",
            "kafka sink: a %s message to %s failed: %s: %s",
            kind,
            topic,
            error.name(),
            error.str(),
        )

    def _count(self, topic: str, kind: str, size: int, ts: int, message: Message) -> None:
        counter = self._counted.get((topic, kind))
        if counter is None:
            counter = self._counted[(topic, kind)] = metrics.MESSAGES.labels(topic, kind)
            self._bytes[topic] = metrics.BYTES.labels(topic)
        counter.inc()
        self._bytes[topic].inc(size)
        self.delivered[kind] += 1
        if self.on_acknowledged is not None:
            self.on_acknowledged(kind, ts, message)

    def _failed_flush(self, failure: Failure) -> None:
        self._tracker.reset()
        self._republish = bool(self._unconfirmed_schemas)
        if self._fatal is not None:
            self._replace_producer()
        where = f"kafka sink: commit_ts {failure.commit_ts}: table {failure.table or '-'}"
        target = f" to {failure.topic}" if failure.topic else ""
        metrics.FLUSH_FAILURES.labels(str(failure.retriable).lower()).inc()
        if not failure.retriable:
            raise SinkApplyError(f"{where}: delivery{target} refused: {failure.error}")
        raise SinkUnavailable(
            f"{where}: delivery{target} failed: {failure.error}; the checkpoint stays at commit_ts "
            f"{self._tracker.acked} and the unflushed events are written again"
        )

    def _replace_producer(self) -> None:
        """Drop a producer that failed fatally (it delivers nothing more) and start a new one."""
        assert self._fatal is not None
        log.error("kafka sink: the producer failed fatally (%s); starting a new one", self._fatal.str())
        old, self._producer = self._producer, None
        if old is not None:
            self._discard(old)
        self._fatal = None
        self._producer = self._new_producer()

    def _later(self, handler: Callable[..., None], *args: Any) -> None:
        """Every librdkafka callback (delivery reports, errors, statistics) only lands here; the
        handlers run once poll/flush/close returned (:meth:`_run_later`). Inside librdkafka's serve
        loop a handler taking a lock (metrics, logging) was seen to leave it held for good when the
        producer failed fatally meanwhile (the drainer then hung in the next metric update)."""
        self._pending.append((handler, args))

    def _run_later(self) -> None:
        while self._pending:
            pending, self._pending = self._pending, []
            for handler, args in pending:
                handler(*args)

    def _serve(self, call: Callable[[float], int], timeout: float) -> int:
        """``producer.poll``/``flush``: a fatal producer error (raised from there) is recorded, so that
        the flush fails as retriable and a new producer is started; returns the call's result (0 then).
        The callbacks the call served run right after it."""
        try:
            return call(timeout)
        except (KafkaException, SystemError) as exc:
            # confluent-kafka may raise a fatal error while it calls one of our callbacks; Python then
            # reports the callback as having returned with an exception set (a SystemError from it)
            cause = exc if isinstance(exc, KafkaException) else exc.__cause__ or exc.__context__
            if not isinstance(cause, KafkaException):
                raise
            error: KafkaError = cause.args[0]
            self._fatal = error if error.fatal() else self._fatal
            self._tracker.fail(Failure(self._tracker.acked, "", "", f"{error.name()}: {error.str()}", True))
            self._warn("fatal", "kafka sink: the producer reported %s: %s", error.name(), error.str())
            return 0
        finally:
            self._run_later()

    def _discard(self, producer: Producer) -> None:
        """Drop a producer and whatever it still holds (its events are written again by the drainer)."""
        try:
            producer.purge()
            producer.close()
        except (KafkaException, RuntimeError, SystemError) as exc:  # SystemError: see _serve
            log.warning("kafka sink: closing the producer: %s", exc)
        finally:
            self._run_later()  # the purged messages' reports

    # -- schemas topic (single-object encoding) -------------------------------

    def _publish_schema(self, fingerprint: int, schema_json: str) -> None:
        """Called by the single-object codec the first time it encodes with a schema."""
        fingerprint &= 0xFFFF_FFFF_FFFF_FFFF
        self._unconfirmed_schemas[fingerprint] = schema_json
        self._send_schema(fingerprint, schema_json)

    def _send_schema(self, fingerprint: int, schema_json: str) -> None:
        batch = self._batch
        if batch is None:
            batch = self._tracker.begin(self._tracker.acked, "-")
        topic = self.names.schemas
        key, value = fingerprint_hex(fingerprint).encode(), schema_json.encode()
        headers: Headers = [("bridge.kind", b"schema")]
        self._admin.ensure(
            {topic: TopicSpec(1, self.config.replication_factor, {"cleanup.policy": "compact"})}
        )
        size = _size(key, value, headers)
        report = functools.partial(self._later, self._on_schema_delivery, batch, fingerprint, size)
        self._send(topic, 0, key, value, headers, report, batch)
        self._tracker.sent(batch)
        if batch is not self._batch:
            self._tracker.close(batch)

    def _on_schema_delivery(
        self, batch: Batch, fingerprint: int, size: int, error: KafkaError | None, message: Message
    ) -> None:
        if error is None:
            self._unconfirmed_schemas.pop(fingerprint, None)
        self._on_delivery(batch, "schema", size, error, message)

    def _republish_schemas(self) -> None:
        self._republish = False
        for fingerprint, schema_json in list(self._unconfirmed_schemas.items()):
            self._send_schema(fingerprint, schema_json)

    # -- watermarks ---------------------------------------------------------------

    def _publish_resolved(self, force: bool) -> None:
        """A watermark at the acknowledged position to every partition of every known topic."""
        position = self._tracker.acked
        if position <= self._resolved_published:
            return
        now = time.monotonic()
        if not force and now - self._resolved_at < self.config.resolved_interval:
            return
        topics = [self.names.ddl, *sorted(set(self._tables.values()))]
        for topic in topics:
            if topic not in self._admin.partitions:
                try:
                    self._admin.ensure({topic: self._table_spec()})
                except SinkError as exc:
                    self._warn("resolved", "kafka sink: no watermark to %s: %s", topic, exc)
                    continue
        headers: Headers = [("bridge.kind", b"resolved"), ("bridge.resolved-ts", str(position).encode())]
        size = _size(None, None, headers)
        for topic in topics:
            report = functools.partial(self._later, self._on_resolved_delivery, size, position)
            for partition in range(self._admin.partitions.get(topic, 0)):
                self._send(topic, partition, None, None, headers, report, None)
        self._resolved_published, self._resolved_at = position, now
        metrics.RESOLVED_TS.set(position)

    def _on_resolved_delivery(
        self, size: int, position: int, error: KafkaError | None, message: Message
    ) -> None:
        """A watermark's report: a lost watermark loses no data, so it is only counted and logged."""
        latency = message.latency()
        if latency is not None:
            metrics.DELIVERY_SECONDS.observe(latency)
        if error is None:
            self._count(message.topic() or "", "resolved", size, position, message)
        else:
            self._delivery_error(error, message.topic() or "", "resolved")

    # -- librdkafka callbacks ---------------------------------------------------------

    def _on_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal = error
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self._warn(
                "brokers",
                "kafka sink: no broker of %s is reachable (%s); messages wait in the producer queue for up "
                "to delivery-timeout (%gs) and the checkpoint does not move",
                self.config.bootstrap_servers,
                error.str(),
                self.config.delivery_timeout,
            )
            return
        self._warn(f"error:{error.name()}", "kafka sink: %s: %s", error.name(), error.str())

    def _on_stats(self, stats_json: str) -> None:
        try:
            stats = json.loads(stats_json)
            retries = sum(int(b.get("txretries", 0)) for b in stats.get("brokers", {}).values())
        except (ValueError, TypeError, AttributeError):
            return
        if retries > self._retries_seen:
            metrics.PRODUCER_RETRIES.inc(retries - self._retries_seen)
        self._retries_seen = retries

    def _warn(self, kind: str, message: str, *args: object) -> None:
        """Log a warning at most every few seconds per kind (outages repeat themselves)."""
        now = time.monotonic()
        if now - self._warned.get(kind, -_LOG_EVERY) >= _LOG_EVERY:
            self._warned[kind] = now
            log.warning(message, *args)


def _size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """The bytes of a message as ``max-message-bytes`` counts them: key, value, header names and values."""
    size = (0 if key is None else len(key)) + (0 if value is None else len(value))
    for name, data in headers:
        size += len(name) + (0 if data is None else len(data))
    return size


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _tombstone_headers(commit_ts: int, pos: int) -> Headers:
    return [
        ("bridge.kind", b"tombstone"),
        ("bridge.commit-ts", str(commit_ts).encode()),
        ("bridge.pos", str(pos).encode()),
    ]
