"""Topic names and topic creation for the ``kafka`` sink.

Names (docs/kafka-sink.md, "Topics"):

- a table's topic: ``topic-template`` (default ``"{prefix}.{db}.{table}"``)
  with every character Kafka does not allow in a topic name (anything but
  ``A-Z a-z 0-9 . _ -``) in the database and table names replaced by ``_``;
- the DDL topic ``"{prefix}._ddl"`` (1 partition, ``retention.ms=-1``: a consumer starting
  from the beginning needs every DDL event, docs/consume.md);
- the schemas topic ``"{prefix}._schemas"`` (1 partition, ``cleanup.policy=compact``),
  used by the single-object encoding only.

:class:`TopicAdmin` creates missing topics with the AdminClient and caches
the partition count of every topic it made sure of, so a topic is looked up
once per process. A topic that exists already keeps its own partition count
(the sink partitions by it). A broker that does not answer is
:class:`SinkUnavailable` (retried by the drainer); a refusal (authorization,
invalid settings) is :class:`SinkApplyError`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bridge.errors import ConfigError
from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable

log = logging.getLogger(__name__)
_RDKAFKA_LOG = logging.getLogger("drainer.sinks.kafka.librdkafka")  # librdkafka's own log lines

MAX_TOPIC_LENGTH = 249
_INVALID_CHARS = re.compile(r"[^A-Za-z0-9._-]")
_VALID_TOPIC = re.compile(r"^[A-Za-z0-9._-]+$")
_PLACEHOLDERS = ("prefix", "db", "table")

# Errors of topic creation that retrying cannot mend.
_REFUSALS = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.INVALID_REPLICATION_FACTOR,
        KafkaError.INVALID_PARTITIONS,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError.INVALID_CONFIG,
        KafkaError.POLICY_VIOLATION,
        KafkaError.INVALID_REPLICA_ASSIGNMENT,
        KafkaError.INVALID_REQUEST,
        KafkaError.UNSUPPORTED_VERSION,
    }
)


def sanitize(part: str) -> str:
    """``part`` with every character not allowed in a Kafka topic name replaced by ``_``."""
    return _INVALID_CHARS.sub("_", part) or "_"


def check_template(template: str, prefix: str) -> None:
    """:class:`ConfigError` naming the key unless ``template`` yields valid, distinct topic names."""
    key = "sink.kafka.topic-template"
    if not prefix or not _VALID_TOPIC.match(prefix):
        raise ConfigError(f"sink.kafka.prefix: use only A-Z a-z 0-9 . _ - (and at least one), got {prefix!r}")
    for placeholder in ("db", "table"):
        if "{" + placeholder + "}" not in template:
            raise ConfigError(
                f"{key}: must contain {{{placeholder}}} (one topic per table), got {template!r}"
            )
    try:
        sample = template.format(prefix=prefix, db="d", table="t")
    except (KeyError, IndexError, ValueError) as exc:
        raise ConfigError(
            f"{key}: only the placeholders {{prefix}}, {{db}}, {{table}} are known; {template!r}: {exc!r}"
        ) from None
    if not _VALID_TOPIC.match(sample):
        raise ConfigError(
            f"{key}: the text around the placeholders must be A-Z a-z 0-9 . _ -, got {template!r}"
        )
    reserved = {f"{prefix}._ddl", f"{prefix}._schemas"}
    if template.format(prefix=prefix, db="_ddl", table="_ddl") in reserved:
        raise ConfigError(f"{key}: {template!r} could name the DDL or schemas topic")


@dataclass(frozen=True)
class TopicNames:
    """How the sink names its topics; see the module docstring."""

    prefix: str
    template: str

    def table(self, db: str, table: str) -> str:
        name = self.template.format(prefix=self.prefix, db=sanitize(db), table=sanitize(table))
        if name in (self.ddl, self.schemas):  # e.g. "{db}.{table}" and a table bridge._ddl
            raise SinkApplyError(
                f"kafka sink: table {db}.{table}: its topic would be {name}, the sink's own "
                "DDL or schemas topic; change sink.kafka.topic-template or sink.kafka.prefix, or "
                "filter the table out"
            )
        if len(name) > MAX_TOPIC_LENGTH:
            raise SinkApplyError(
                f"kafka sink: table {db}.{table}: its topic name is longer than {MAX_TOPIC_LENGTH} "
                f"characters ({name[:60]}...); shorten sink.kafka.topic-template or sink.kafka.prefix"
            )
        return name

    @property
    def ddl(self) -> str:
        return f"{self.prefix}._ddl"

    @property
    def schemas(self) -> str:
        return f"{self.prefix}._schemas"


@dataclass(frozen=True)
class TopicSpec:
    """How to create one topic when it is missing."""

    partitions: int
    replication_factor: int
    config: Mapping[str, str] = field(default_factory=dict)


class TopicAdmin:
    """Creates missing topics and remembers the partition count of each topic it made sure of."""

    def __init__(self, client_config: Mapping[str, Any], timeout: float) -> None:
        self._client_config: dict[str, Any] = dict(client_config)
        self._timeout = timeout
        self._client: AdminClient | None = None
        self.partitions: dict[str, int] = {}

    @property
    def client(self) -> AdminClient:
        if self._client is None:
            try:
                settings: dict[str, Any] = {**self._client_config, "logger": _RDKAFKA_LOG}
                self._client = AdminClient(settings)
            except KafkaException as exc:
                raise ConfigError(
                    f"sink.kafka.producer: the admin client refused its settings: {exc}"
                ) from None
        return self._client

    def ensure(self, topics: Mapping[str, TopicSpec], where: str = "") -> None:
        """Make sure every topic of ``topics`` exists (creating missing ones); ``where`` names the cause."""
        missing = {name: spec for name, spec in topics.items() if name not in self.partitions}
        if not missing:
            return
        requests = [
            NewTopic(name, spec.partitions, spec.replication_factor, config=dict(spec.config))
            for name, spec in missing.items()
        ]
        try:
            futures = self.client.create_topics(
                requests, operation_timeout=self._timeout, request_timeout=self._timeout
            )
        except KafkaException as exc:
            raise self._error(exc.args[0], ", ".join(missing), where) from None
        existing: list[str] = []
        for name, future in futures.items():
            try:
                future.result(timeout=self._timeout + 5)
            except FutureTimeout:
                raise SinkUnavailable(
                    f"kafka sink: {where}creating topic {name}: no answer within {self._timeout:g}s"
                ) from None
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    existing.append(name)
                    continue
                raise self._error(error, name, where) from None
            self.partitions[name] = missing[name].partitions
            log.info("kafka sink: created topic %s (%d partitions)", name, missing[name].partitions)
        if existing:
            self._describe(existing, where)

    def _describe(self, names: list[str], where: str) -> None:
        """Partition counts of topics that exist (listing only existing topics: some brokers
        create a topic that a metadata request names)."""
        for name in names:
            try:
                metadata = self.client.list_topics(topic=name, timeout=self._timeout)
            except KafkaException as exc:
                raise self._error(exc.args[0], name, where) from None
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None or not topic.partitions:
                problem = topic.error if topic is not None else "not in the metadata"
                raise SinkUnavailable(
                    f"kafka sink: {where}topic {name}: cannot read its partitions: {problem}"
                )
            self.partitions[name] = len(topic.partitions)
            log.info("kafka sink: topic %s exists (%d partitions)", name, len(topic.partitions))

    def close(self) -> None:
        """Drop the admin client (it stops reconnecting once released)."""
        self._client = None

    def forget(self, name: str) -> None:
        """Look ``name`` up again next time (it was deleted, or the broker lost it)."""
        self.partitions.pop(name, None)

    @staticmethod
    def _error(error: KafkaError, topic: str, where: str) -> SinkError:
        text = f"kafka sink: {where}creating topic {topic}: {error.name()}: {error.str()}"
        if error.code() in _REFUSALS:
            return SinkApplyError(text)
        return SinkUnavailable(text)
