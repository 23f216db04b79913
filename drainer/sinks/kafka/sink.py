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
  (:mod:`bridge.sink.acks`). A failed delivery makes ``flush``
  raise :class:`SinkUnavailable`, and the drainer writes every unflushed event
  again (duplicates are part of the contract); refusals that retrying cannot
  mend (a message too large, authorization) raise :class:`SinkApplyError`
  naming the table and commit_ts.
- A write that fails retriably (the queue full too long, a producer that failed
  fatally) is latched as by any :class:`~bridge.sink.batching.BatchingSink`:
  the writes until the next flush are dropped, and that flush fails.
- Watermarks are published at most every ``resolved-interval`` while writing
  and after every flush that moved the acknowledged position, only for
  positions the brokers acknowledged.

The parts: :mod:`~drainer.sinks.kafka.config` (settings),
:mod:`~drainer.sinks.kafka.topics` (names, creation, partitions),
:mod:`~drainer.sinks.kafka.encoding` (Avro, both framings),
:mod:`~drainer.sinks.kafka.rows` (a row change's key and value),
:mod:`~drainer.sinks.kafka.producer` (producing, reports; the acknowledged position is
:mod:`bridge.sink.acks`'s),
:mod:`~drainer.sinks.kafka.watermarks`, :mod:`~drainer.sinks.kafka.metrics`;
this module turns events into messages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Message
from confluent_kafka.schema_registry import SchemaRegistryClient

from bridge.avro import DDL_SCHEMA, ENVELOPE_OPS, ddl_record
from bridge.kafkaclient import redact_url
from bridge.proto import row_pb2
from bridge.schema import table_name
from bridge.sink.acks import AckTracker, Failure
from bridge.sink.batching import BatchingSink, metrics_for
from bridge.sink.contract import SinkContext
from bridge.sink.errors import SinkApplyError, SinkError, SinkUnavailable
from bridge.sink.events import DDLEvent, Event, ResolvedEvent, RowChange, TxnEvent
from drainer.sinks.kafka.config import admin_settings, load_config, producer_settings
from drainer.sinks.kafka.encoding import Encoder, SchemaPublisher, header_length
from drainer.sinks.kafka.metrics import KafkaMetrics
from drainer.sinks.kafka.producer import Headers, ProducerLink, message_size
from drainer.sinks.kafka.rows import COMMIT_TS, POS, POS_BYTES, ROW_KIND, Table, Txn, encode_row, source_of
from drainer.sinks.kafka.topics import TableTopics, TopicAdmin, TopicNames, TopicSpec
from drainer.sinks.kafka.watermarks import Watermarks

log = logging.getLogger(__name__)

Change = row_pb2.SchemaChange
# DDL whose table has a topic after it (made before the event is published).
# Kept forever: a consumer reading from the beginning replays every DDL (docs/consume.md).
DDL_TOPIC = {"retention.ms": "-1"}
_TABLE_AFTER = (Change.CREATE_TABLE, Change.RENAME_TABLE, Change.ALTER_TABLE, Change.TRUNCATE_TABLE)


class KafkaSink(BatchingSink):
    """See the module docstring. Built as ``KafkaSink(config_table, data_dir)``."""

    name = "kafka"

    def __init__(self, config_table: Mapping[str, Any], data_dir: Path) -> None:
        super().__init__(logging.getLogger("drainer.sinks.kafka.producer"))  # warnings where they were
        self.config = config = load_config(config_table)
        self.names = TopicNames(config.prefix, config.topic_template, config.topic_router)
        self.cluster_id = 0  # the cluster replicated: source.cluster_id of every message (from open)
        self._admin = TopicAdmin(admin_settings(config), min(config.delivery_timeout, 30.0))
        spec = TopicSpec(config.partitions, config.replication_factor)
        self.topics = TableTopics(self.names, self._admin, spec, config.partition_by, header_length(config))
        self._tracker = AckTracker()
        self.link = ProducerLink(config, self._tracker, self.topics, self.warn)
        self.schemas = SchemaPublisher(self.link, self._admin, self.names.schemas, config.replication_factor)
        self.encoder = Encoder(config, self.schemas.publish)
        self.watermarks = Watermarks(self.link, self.topics, config.resolved_interval)

    def producer_settings(self) -> dict[str, Any]:
        """The librdkafka settings of the producer (without callbacks)."""
        return producer_settings(self.config)

    @property
    def single_object(self) -> bool:
        return self.encoder.single_object

    @property
    def registry(self) -> SchemaRegistryClient | None:
        return self.encoder.registry

    @property
    def producer(self) -> Any:
        return self.link.producer

    @property
    def delivered(self) -> Any:
        """Acknowledged messages by kind (row, tombstone, ddl, resolved, schema)."""
        return self.link.delivered

    @property
    def on_acknowledged(self) -> Callable[[str, int, Message], None] | None:
        """Called on the sink's thread with (kind, ts, message) for every acknowledged message: kind is
        row, tombstone, ddl, resolved or schema; ts the commit_ts (resolved: the watermark; schema: 0);
        the message has its topic, partition and offset. For embedding, benchmarks and tests."""
        return self.link.on_acknowledged

    @on_acknowledged.setter
    def on_acknowledged(self, callback: Callable[[str, int, Message], None] | None) -> None:
        self.link.on_acknowledged = callback

    # -- Sink protocol ------------------------------------------------------

    def check(self) -> None:
        """The pre-flight: :meth:`TopicAdmin.check` with the DDL topic."""
        spec = TopicSpec(1, self.config.replication_factor, DDL_TOPIC)
        self._admin.check(self.names.ddl, spec, f"kafka sink {self.config.bootstrap_servers}")

    def open(self, context: SinkContext) -> None:
        """Creates the topics of the DDL stream (and schemas) and of every table in the context."""
        super().open(context)
        resume_ts = context.resume_ts
        self.cluster_id = context.cluster_id
        self.link.use_metrics(metrics_for(context.metrics_registry, KafkaMetrics))
        if not self.link.started:
            self.link.start()
        self.encoder.start()
        self._tracker.restart(resume_ts)
        self.latch.take()  # a failure of before this open is no concern of it
        self.watermarks.restart(resume_ts)
        for schema in context.tables:
            self.topics.remember(schema.db, schema.table)
        replication = self.config.replication_factor
        wanted = {self.names.ddl: TopicSpec(1, replication, DDL_TOPIC)}
        if self.single_object:
            wanted[self.names.schemas] = TopicSpec(1, replication, {"cleanup.policy": "compact"})
        for topic in self.topics.topics:
            wanted[topic] = self.topics.spec
        self._admin.ensure(wanted, "opening: ")
        registry = redact_url(self.config.schema_registry_url)
        log.info(
            "kafka sink open at commit_ts %d: %s, %d table topics, %s encoding",
            resume_ts,
            self.config.bootstrap_servers,
            len(self.topics.topics),
            "single-object" if self.single_object else f"schema registry {registry}",
        )

    def write_batch(self, events: Sequence[Event]) -> None:
        """Produce ``events``' messages; their delivery failures come in reports, which the flush reads."""
        link = self.link
        produced = link.produced
        if link.fatal is not None:
            # Nothing the old producer holds will be delivered: a new one takes over at once, and this
            # write fails (latched), so the next flush fails and the drainer writes every unflushed
            # event again, through the new producer (a write refused by a dead producer is never retried).
            error = f"kafka sink: the producer failed ({link.fatal.name()}); what it held is written again"
            link.replace()
            raise SinkUnavailable(error)
        if self.schemas.republish:
            self.schemas.publish_again()
        for event in events:
            if isinstance(event, TxnEvent):
                self._write_txn(event)
            elif isinstance(event, DDLEvent):
                self._write_ddl(event)
            elif isinstance(event, ResolvedEvent):
                self._tracker.close(self._tracker.begin(event.commit_ts))
        link.sent(link.produced - produced)
        self.watermarks.publish(force=False)
        link.metrics.queue_messages.set(len(link.producer))

    def flush_batch(self) -> int:
        """Wait for every delivery report: the acknowledged position, or the first failed delivery
        raised (a refused one rolled back here, a retriable one by :meth:`recover`)."""
        link = self.link
        producer = link.producer
        started = time.monotonic()
        deadline = started + self.config.delivery_timeout + 30.0
        while link.serve(producer.flush, 1.0) > 0:
            link.metrics.queue_messages.set(len(producer))
            if link.fatal is not None:
                break  # this producer delivers nothing more; a new one takes over below
            now = time.monotonic()
            if now > deadline:
                overdue = "delivery reports overdue past delivery-timeout"
                self._tracker.fail(Failure(self._tracker.acked, "", "", overdue, True))
                break
            self.warn(
                "flush",
                "kafka sink: flush waits for %d messages (%.0fs so far); the checkpoint stays at %d",
                len(producer),
                now - started,
                self._tracker.acked,
            )
        link.metrics.queue_messages.set(len(producer))
        failure = self._tracker.failure
        if failure is not None:
            error = self._delivery_error(failure)
            if not error.retriable:
                self._roll_back(error)
            raise error
        position = self._tracker.acked
        link.metrics.acked_ts.set(position)
        self.watermarks.publish(force=True)
        return position

    def _delivery_error(self, failure: Failure) -> SinkError:
        where = f"kafka sink: commit_ts {failure.commit_ts}: table {failure.table or '-'}"
        target = f" to {failure.where}" if failure.where else ""
        if not failure.retriable:
            return SinkApplyError(f"{where}: delivery{target} refused: {failure.error}")
        return SinkUnavailable(
            f"{where}: delivery{target} failed: {failure.error}; the checkpoint stays at commit_ts "
            f"{self._tracker.acked} and the unflushed events are written again"
        )

    def recover(self, failure: SinkError) -> SinkError:
        """After a retriable failure: every batch is forgotten (acknowledgments of them are ignored),
        schemas not yet acknowledged go out again, a producer that failed fatally is replaced."""
        self._roll_back(failure)
        return super().recover(failure)

    def _roll_back(self, failure: SinkError) -> None:
        self._tracker.reset()
        self.schemas.flush_failed()
        if self.link.fatal is not None:
            self.link.replace()
        self.link.metrics.flush_failures.labels(str(failure.retriable).lower()).inc()

    def close(self) -> None:
        if not self.link.started:
            return
        self.link.close()
        self._admin.close()
        log.info(
            "kafka sink closed; acknowledged messages: %s; writes sent without lingering: %d",
            dict(self.link.delivered),
            self.link.sent_at_once,
        )

    # -- transactions -------------------------------------------------------

    def _write_txn(self, event: TxnEvent) -> None:
        with self.link.batch_of(event.commit_ts, "transaction") as batch:
            txn = Txn.of(event)
            schema = None
            table: Table | None = None
            write = self._write_change
            changes = event.changes()
            change = next(changes, None)  # one change of look-ahead: the last one's source says so
            pos = 0
            while change is not None:
                following = next(changes, None)
                if change.table is not schema:
                    schema = change.table
                    batch.table = table_name(schema)
                    table = Table.of(schema, txn, self.topics, self.encoder, self.cluster_id)
                assert table is not None
                write(txn, table, change, pos, following is None)
                change = following
                pos += 1

    def _write_change(self, txn: Txn, table: Table, change: RowChange, pos: int, last: bool) -> None:
        event = txn.event
        schema = change.table
        avro, topic = table.avro, table.topic
        image = change.after if change.after is not None else change.before
        assert image is not None
        key, value = encode_row(self.encoder, txn, table, change, image, pos, last, self.cluster_id)
        partition = table.partition(key, event.commit_ts)
        pos_header = POS_BYTES[pos] if pos < 4096 else str(pos).encode()
        headers: Headers = [ROW_KIND, (COMMIT_TS, txn.commit_ts_header), (POS, pos_header)]
        size = (0 if key is None else len(key)) + len(value) + txn.header_bytes + len(pos_header)
        if size > self.config.max_message_bytes:
            op = ENVELOPE_OPS[change.kind]
            key_only = {
                "before": None,
                "after": None,
                "op": "r" if change.snapshot and op == "c" else op,
                "source": source_of(txn, change, pos, last, self.cluster_id),
                "ts_ms": txn.ts_ms,
            }
            value = self._oversize(topic, schema, event.commit_ts, change.kind, size, key, key_only)
            headers.append(("bridge.oversize", b"1"))
            size = message_size(key, value, headers)
        self.link.produce(topic, partition, key, value, headers, "row", size)
        if not self.config.tombstones or key is None:
            return
        if change.kind == "delete":
            self.link.produce(
                topic, partition, key, None, _tombstone_headers(event.commit_ts, pos), "tombstone"
            )
        elif change.kind == "update" and change.before is not None:
            old_record = avro.key_record(change.before)
            if old_record != avro.key_record(image):  # the key changed: the old key is gone
                old_key = self.encoder.encode(
                    f"{topic}-key", avro.key_schema or {}, old_record, event.commit_ts, schema
                )
                old_partition = self.topics.partition(
                    topic, schema.db, schema.table, old_key, event.commit_ts
                )
                headers = _tombstone_headers(event.commit_ts, pos)
                self.link.produce(topic, old_partition, old_key, None, headers, "tombstone")

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
        value = self.encoder.encode(
            f"{topic}-value", self.encoder.table_avro(schema).value_schema, key_only, commit_ts, schema
        )
        if message_size(key, value, []) + 64 > limit:
            raise SinkApplyError(f"{where}: even the key-only {kind} message is larger than {limit} bytes")
        self.warn(
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
        with self.link.batch_of(event.commit_ts, "DDL event") as batch:
            batch.table = where
            topic = ""
            if change.kind in _TABLE_AFTER:
                topic = self.topics.topic(change.db, change.table, event.commit_ts)
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
            value = self.encoder.encode(
                f"{self.names.ddl}-value", DDL_SCHEMA, record, event.commit_ts, None, where
            )
            headers: Headers = [("bridge.kind", b"ddl"), ("bridge.commit-ts", str(event.commit_ts).encode())]
            size = message_size(None, value, headers)
            if size > self.config.max_message_bytes:
                raise SinkApplyError(
                    f"kafka sink: commit_ts {event.commit_ts}: table {where}: the DDL event is {size} bytes, "
                    f"larger than sink.kafka.max-message-bytes ({self.config.max_message_bytes})"
                )
            self._admin.ensure({self.names.ddl: TopicSpec(1, self.config.replication_factor)})
            self.link.produce(self.names.ddl, 0, None, value, headers, "ddl")
        self.topics.follow(change)
        log.info("kafka sink: DDL at commit_ts %d published: %s", event.commit_ts, event.query[:200])


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _tombstone_headers(commit_ts: int, pos: int) -> Headers:
    return [
        ("bridge.kind", b"tombstone"),
        ("bridge.commit-ts", str(commit_ts).encode()),
        ("bridge.pos", str(pos).encode()),
    ]
