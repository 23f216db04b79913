"""The ``[sink.kafka]`` table (:class:`KafkaSinkConfig`, every key in docs/configuration.md) and
the librdkafka settings the sink derives from it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from bridge.config import build
from bridge.errors import ConfigError
from bridge.kafkaclient import SettingValue, check_security
from drainer.sinks.kafka.topicroute import TopicRouteConfig, TopicRouter
from drainer.sinks.kafka.topics import BROKER_DEFAULT_REPLICATION, check_template

# The librdkafka settings the sink owns: the contract depends on them.
_OWNED = {
    "bootstrap.servers": "sink.kafka.bootstrap-servers",
    "enable.idempotence": "sink.kafka.idempotence",
    "max.in.flight.requests.per.connection": "(5 with idempotence, else 1: per-partition order)",
    "max.in.flight": "(5 with idempotence, else 1: per-partition order)",
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
        default=BROKER_DEFAULT_REPLICATION,
        metadata={
            "help": "replication factor of topics the sink creates; -1: the broker's "
            "default.replication.factor"
        },
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
    linger: float = field(
        default=0.05,
        metadata={
            "duration": True,
            "help": "while the drainer is busy, how long a produce request waits to fill (librdkafka "
            "linger.ms); at low load (under 128 messages per linger) each write is sent at once, and "
            "every flush sends what waits",
        },
    )
    compression: Literal["none", "lz4", "zstd", "snappy", "gzip"] = field(
        default="none", metadata={"help": "compression of produced batches"}
    )
    producer: dict[str, SettingValue] = field(
        default_factory=dict,
        metadata={
            "help": "extra librdkafka settings (security.protocol, sasl.*, ssl.*, ...); secrets never logged"
        },
    )
    topic_route: list[TopicRouteConfig] = field(default_factory=list)  # [[sink.kafka.topic-route]]
    topic_router: TopicRouter = field(default_factory=TopicRouter, init=False, compare=False, repr=False)
    delivery_timeout: float = field(
        default=120.0,
        metadata={
            "duration": True,
            "help": "how long a message may wait for its delivery; then the flush fails",
        },
    )
    idempotence: bool = field(
        default=True,
        metadata={
            "help": "idempotent producer: order kept and no duplicates from librdkafka's retries; false: "
            "one request in flight per broker, order kept, a retry may duplicate a message (consume drops "
            "it); false for a broker that can lose an idempotent batch in a crash (docs/kafka-sink.md)"
        },
    )

    def validate(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigError('sink.kafka.bootstrap-servers: name at least one broker, e.g. "127.0.0.1:9092"')
        check_template(self.topic_template, self.prefix)
        if not 1 <= self.partitions <= 100_000:
            raise ConfigError(f"sink.kafka.partitions: between 1 and 100000, got {self.partitions}")
        if self.replication_factor != BROKER_DEFAULT_REPLICATION and not 1 <= self.replication_factor <= 32:
            raise ConfigError(
                "sink.kafka.replication-factor: -1 (the broker's default) or between 1 and 32, "
                f"got {self.replication_factor}"
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


def load_config(config_table: Mapping[str, Any]) -> KafkaSinkConfig:
    """The ``[sink.kafka]`` table checked key by key (:class:`ConfigError` naming the key)."""
    table = dict(config_table)
    extra_producer = check_settings(table.pop("producer", {}), "sink.kafka.producer")
    extra_registry = check_settings(table.pop("schema-registry", {}), "sink.kafka.schema-registry")
    if "bootstrap-servers" not in table:
        raise ConfigError('sink.kafka.bootstrap-servers: required, e.g. bootstrap-servers = "127.0.0.1:9092"')
    routes = table.pop("topic-route", None)
    config = build(KafkaSinkConfig, table, prefix="sink.kafka.")
    config.producer, config.schema_registry = extra_producer, extra_registry
    config.topic_route, config.topic_router = TopicRouter.parse(routes, config.prefix)
    for name in extra_producer:
        if name in _OWNED:
            raise ConfigError(f"sink.kafka.producer.{name}: set by the sink {_OWNED[name]}; remove it")
    check_security(extra_producer, "sink.kafka.producer")
    return config


def producer_settings(config: KafkaSinkConfig) -> dict[str, Any]:
    """The librdkafka settings of the sink's producer (without callbacks)."""
    settings: dict[str, Any] = {
        "queue.buffering.max.kbytes": 65536,  # bounded memory; overridable
        "statistics.interval.ms": 5000,
        "socket.keepalive.enable": True,  # a half-open connection ends; socket.timeout.ms bounds requests
        **config.producer,
        "bootstrap.servers": config.bootstrap_servers,
        "enable.idempotence": config.idempotence,
        "max.in.flight.requests.per.connection": 5 if config.idempotence else 1,
        "acks": "all",
        "linger.ms": config.linger * 1000,
        "compression.type": config.compression,
        "message.timeout.ms": int(config.delivery_timeout * 1000),
    }
    if "message.max.bytes" not in config.producer:
        settings["message.max.bytes"] = max(1_000_000, config.max_message_bytes + 65536)
    return settings


def admin_settings(config: KafkaSinkConfig) -> dict[str, SettingValue]:
    """The admin client's settings: the producer's connection and security ones."""
    shared = {k: v for k, v in config.producer.items() if k.startswith(_SHARED_PREFIXES)}
    return {**shared, "bootstrap.servers": config.bootstrap_servers}
