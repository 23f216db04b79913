"""Topic names and topic creation for the ``kafka`` sink.

Names (docs/kafka-sink.md, "Topics"):

- a table's topic: the first ``[[sink.kafka.topic-route]]`` rule that
  matches it (:mod:`drainer.sinks.kafka.topicroute`), else ``topic-template``
  (default ``"{prefix}.{db}.{table}"``), with every character Kafka does not
  allow in a topic name (anything but ``A-Z a-z 0-9 . _ -``) in the database
  and table names replaced by ``_``;
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
import zlib
from collections.abc import Callable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bridge.errors import ConfigError
from bridge.proto import row_pb2
from bridge.sink.errors import SinkApplyError, SinkCheckFailed, SinkError, SinkUnavailable
from drainer.sinks.kafka.topicroute import TopicRouter

log = logging.getLogger(__name__)
_RDKAFKA_LOG = logging.getLogger("drainer.sinks.kafka.librdkafka")  # librdkafka's own log lines

MAX_TOPIC_LENGTH = 249
# NewTopic's replication factor -1: the broker applies its default.replication.factor (CreateTopics v4+,
# Kafka 2.4), so a sink configured with nothing follows the cluster's own durability setting.
BROKER_DEFAULT_REPLICATION = -1
CHECK_TIMEOUT = 10.0  # seconds the pre-flight waits for the cluster's metadata
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
    routes: TopicRouter = field(default_factory=TopicRouter)  # [[sink.kafka.topic-route]]

    def table(self, db: str, table: str) -> str:
        name = self.routes.topic(db, table, self.prefix, sanitize) if self.routes else None
        if name is None:
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
    """How to create one topic when it is missing (``replication_factor`` -1: the broker's default)."""

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
            spec = missing[name]
            replication = (
                "the broker's default replication factor"
                if spec.replication_factor == BROKER_DEFAULT_REPLICATION
                else f"replication factor {spec.replication_factor}"
            )
            log.info("kafka sink: created topic %s (%d partitions, %s)", name, spec.partitions, replication)
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

    def check(self, ddl_topic: str, spec: TopicSpec, where: str) -> None:
        """The sink's pre-flight: the cluster's metadata (within :data:`CHECK_TIMEOUT`), then
        ``ddl_topic`` made sure of (created when missing, as ``open`` would: that proves the
        permission to create topics); :class:`SinkCheckFailed` names what failed."""
        try:
            try:
                self.client.list_topics(timeout=min(CHECK_TIMEOUT, self._timeout))
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                raise SinkUnavailable(
                    f"reading the cluster metadata: {error.name()}: {error.str()}"
                ) from None
            self.ensure({ddl_topic: spec})
        except SinkError as exc:
            raise SinkCheckFailed(f"{where}: {exc}") from exc
        finally:
            self.close()

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


class TableTopics:
    """The table topics one sink knows (watermarks go to each) and how a message picks a partition.

    Learnt from the context at ``open`` and followed through the DDL events:
    a CREATE (or ALTER, TRUNCATE, RENAME's new name) adds the table's topic, a
    DROP or RENAME's old name removes it. ``header_length``: the bytes of the
    encoding's frame before a key's Avro body (partitioning by key hashes the
    body, so both encodings place a key alike).
    """

    def __init__(
        self, names: TopicNames, admin: TopicAdmin, spec: TopicSpec, partition_by: str, header_length: int
    ) -> None:
        self.names = names
        self.admin = admin
        self.spec = spec
        self._partition_by = partition_by
        self._header_length = header_length
        self._topics: dict[tuple[str, str], str] = {}  # lower-cased (db, table) -> topic
        self._tables: dict[str, str] = {}  # topic -> "db.table" (for error messages)

    def remember(self, db: str, table: str) -> str:
        topic = self.names.table(db, table)
        self._topics[(db.lower(), table.lower())] = topic
        self._tables[topic] = f"{db}.{table}"
        return topic

    @property
    def topics(self) -> list[str]:
        return sorted(set(self._topics.values()))

    def table_of(self, topic: str) -> str:
        return self._tables.get(topic, "")

    def topic(self, db: str, table: str, commit_ts: int) -> str:
        """The table's topic, made sure of (created when missing)."""
        topic = self._topics.get((db.lower(), table.lower())) or self.remember(db, table)
        if topic not in self.admin.partitions:
            self.admin.ensure({topic: self.spec}, f"commit_ts {commit_ts}: table {db}.{table}: ")
        return topic

    def partition(self, topic: str, db: str, table: str, key: bytes | None, commit_ts: int) -> int:
        count = self.admin.partitions[topic]
        mode = self._partition_by
        if mode == "key":
            return 0 if key is None else zlib.crc32(memoryview(key)[self._header_length :]) % count
        if mode == "table":
            return zlib.crc32(f"{db}.{table}".encode()) % count
        return commit_ts % count

    def partitioner(self, topic: str, db: str, table: str) -> Callable[[bytes | None, int], int]:
        """:meth:`partition` of ``topic``'s messages as one function of (key, commit_ts), with the
        topic's partition count as of now (for the messages of one transaction)."""
        count = self.admin.partitions[topic]
        mode, skip = self._partition_by, self._header_length
        if mode == "key":
            crc32 = zlib.crc32

            def by_key(key: bytes | None, commit_ts: int) -> int:
                return 0 if key is None else crc32(key[skip:]) % count

            return by_key
        if mode == "table":
            fixed = zlib.crc32(f"{db}.{table}".encode()) % count
            return lambda key, commit_ts: fixed
        return lambda key, commit_ts: commit_ts % count

    def follow(self, change: row_pb2.SchemaChange) -> None:
        """Keep the set of table topics that get watermarks in step with the DDL."""
        Change = row_pb2.SchemaChange
        if change.kind == Change.DROP_TABLE:
            self._topics.pop((change.db.lower(), change.table.lower()), None)
        elif change.kind == Change.RENAME_TABLE:
            self._topics.pop((change.old_db.lower(), change.old_table.lower()), None)
        elif change.kind == Change.DROP_DATABASE:
            for name in [name for name in self._topics if name[0] == change.db.lower()]:
                del self._topics[name]
