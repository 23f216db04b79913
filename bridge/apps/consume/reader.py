"""The Kafka side of ``binlog-bridge consume``: which topics, which partitions, decoded messages.

:class:`ChangeReader` owns one ``confluent_kafka.Consumer`` that never joins
a consumer group: it ``assign``s every partition of the topics it reads
(from the beginning, or the end), so several consumers never share the work.
Without ``group`` no offsets are committed. With ``group`` (``consume
--group NAME``) each partition starts at the offset the group committed for
it (where none is committed: from the beginning, or the end, as without a
group), and :meth:`ChangeReader.commit` commits the offsets the caller says
it has handled, so a consumer restarted with the same group resumes there.

Topics are the ``--topic`` names, or, with a prefix, every table topic
``{prefix}.*`` and the DDL topic ``{prefix}._ddl`` plus any topic a DDL
event names (a custom ``topic-template``). Metadata is listed again every
``refresh_interval`` seconds and whenever a DDL event names a topic not
assigned yet; new partitions are assigned from their beginning. No broker
answering the first listing is an error; later, an outage is logged and
waited out (librdkafka reconnects by itself).

Both encodings are decoded by :class:`bridge.avro.Decoder`: the Confluent
wire format with a schema registry (``--schema-registry-url``), and Avro
single-object encoding, whose writer schemas the reader takes from the
compacted ``{prefix}._schemas`` topic (key: the single-object header's 8
fingerprint bytes as 16 hex digits, value: the schema JSON), read by a second consumer on demand: a
fingerprint not seen yet makes it read that topic until the schema appears
or ``schema_wait`` seconds pass (then the message fails with an error
naming topic, partition and offset).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaPartition

from bridge.apps.consume.items import (
    KIND_DDL,
    KIND_RESOLVED,
    KIND_TOMBSTONE,
    DDLItem,
    EndItem,
    Item,
    ResolvedItem,
    RowItem,
    TombstoneItem,
    Where,
)
from bridge.errors import BridgeError, ProtocolError, Unreachable, UserError

log = logging.getLogger(__name__)

DDL_SUFFIX = "._ddl"
SCHEMAS_SUFFIX = "._schemas"
HEADER_KIND = "bridge.kind"
HEADER_RESOLVED = "bridge.resolved-ts"
METADATA_TIMEOUT = 10.0
_U64 = (1 << 64) - 1


class ConsumeError(BridgeError):
    """A message cannot be read or decoded; names topic, partition and offset."""


class BrokerUnreachable(Unreachable):
    """No broker of ``--bootstrap-servers`` answered."""


def librdkafka_logger() -> logging.Logger:
    """Where librdkafka's own log lines go: shown only at --log-level debug (connection failures
    repeat every few ms; the error callback reports them once, as a warning)."""
    logger = logging.getLogger("bridge.apps.consume.librdkafka")
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logger.setLevel(logging.CRITICAL)
    return logger


def consumer_config(
    bootstrap: str, extra: dict[str, Any] | None = None, group: str | None = None
) -> dict[str, Any]:
    """A consumer that assigns partitions itself; the group id is never joined, and committed to
    only when ``group`` names it (otherwise a throwaway id)."""
    config: dict[str, Any] = {
        "logger": librdkafka_logger(),
        "bootstrap.servers": bootstrap,
        "group.id": group or f"binlog-bridge-consume-{os.getpid()}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,  # end-of-partition events retire dropped tables' topics
        "socket.connection.setup.timeout.ms": 10_000,
        "socket.keepalive.enable": True,
    }
    config.update(extra or {})
    return config


def _headers(message: Message) -> dict[str, str]:
    out: dict[str, str] = {}
    for header in message.headers() or ():
        name, value = str(header[0]), header[1]
        if value is not None:
            out[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return out


def new_consumer(config: dict[str, Any]) -> Consumer:
    """A ``Consumer``; settings librdkafka refuses (a misspelt or misvalued ``--consumer-config``
    entry) become a :class:`UserError` with librdkafka's reason."""
    try:
        return Consumer(config)
    except (KafkaException, ValueError, TypeError) as exc:
        reason = exc.args[0].str() if exc.args and isinstance(exc.args[0], KafkaError) else str(exc)
        raise UserError(f"kafka consumer settings (--consumer-config): {reason}") from None


class SchemaTopic:
    """The writer schemas of single-object encoding, read from the compacted schemas topic."""

    def __init__(
        self, bootstrap: str, topic: str, wait: float, settings: dict[str, Any] | None = None
    ) -> None:
        self.topic = topic
        self.wait = wait
        self.schemas: dict[int, str] = {}
        self._consumer: Consumer | None = None
        self._bootstrap = bootstrap
        self._settings = settings or {}

    def _start(self) -> Consumer:
        if self._consumer is None:
            self._consumer = new_consumer(consumer_config(self._bootstrap, self._settings))
            self._consumer.assign([KafkaPartition(self.topic, 0, OFFSET_BEGINNING)])
        return self._consumer

    def lookup(self, fingerprint: int) -> str | None:
        """The schema JSON of ``fingerprint`` (signed or unsigned 64-bit), reading the topic if needed."""
        fingerprint &= _U64
        found = self.schemas.get(fingerprint)
        if found is not None:
            return found
        consumer = self._start()
        deadline = time.monotonic() + self.wait
        while fingerprint not in self.schemas and time.monotonic() < deadline:
            for message in consumer.consume(500, 0.2):
                if message.error() is not None:
                    log.debug("schemas topic %s: %s", self.topic, message.error())
                    continue
                self._store(message)
        return self.schemas.get(fingerprint)

    def _store(self, message: Message) -> None:
        key, value = message.key(), message.value()
        if key is None or value is None:
            return
        try:
            raw = bytes.fromhex(key.decode("ascii"))  # the header's 8 little-endian bytes, as hex
            if len(raw) != 8:
                raise ValueError(len(raw))
            fingerprint = int.from_bytes(raw, "little")
        except (UnicodeDecodeError, ValueError):
            log.warning(
                "schemas topic %s offset %d: key is not a hex fingerprint", self.topic, message.offset()
            )
            return
        self.schemas[fingerprint] = bytes(value).decode("utf-8")

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class ChangeReader:
    """See the module docstring. ``on_assign(topic, partitions)`` hears of every new assignment."""

    def __init__(
        self,
        bootstrap: str,
        *,
        topics: Sequence[str] = (),
        prefix: str | None = None,
        registry_url: str | None = None,
        from_beginning: bool = True,
        decode_keys: bool = True,
        schema_wait: float = 10.0,
        refresh_interval: float = 5.0,
        on_assign: Callable[[str, list[int]], None] | None = None,
        consumer_settings: dict[str, Any] | None = None,
        registry_settings: dict[str, Any] | None = None,
        group: str | None = None,
    ) -> None:
        if not topics and not prefix:
            raise UserError("give --topic (one or more) or --prefix")
        self.bootstrap = bootstrap
        self.topics = list(topics)
        self.prefix = prefix
        self.ddl_topic = f"{prefix}{DDL_SUFFIX}" if prefix else ""
        schemas_prefix = prefix or self.topics[0].split(".", 1)[0]
        self.schemas_topic = f"{schemas_prefix}{SCHEMAS_SUFFIX}"
        self.from_beginning = from_beginning
        self.group = group
        self.committed: dict[tuple[str, int], int] = {}  # what this run committed for the group
        self.decode_keys = decode_keys
        self.refresh_interval = refresh_interval
        self.on_assign = on_assign
        self.assigned: dict[str, list[int]] = {}
        self.next_offset: dict[tuple[str, int], int] = {}  # the offset after the last message read
        self.wanted_extra: set[str] = set()  # topics named by DDL events
        self.messages_read = 0
        self.bytes_read = 0
        self.broker_errors = 0
        self._last_refresh = 0.0
        self._listed = False  # a metadata listing succeeded once
        self._schema_topic: SchemaTopic | None = None
        self._settings = dict(consumer_settings or {})
        self._errors: list[KafkaError] = []  # reported by librdkafka, not logged yet
        self._decoder = self._build_decoder(registry_url, schema_wait, registry_settings or {})
        self._consumer = new_consumer(
            consumer_config(bootstrap, {"error_cb": self._on_error, **self._settings}, group)
        )

    # ------------------------------------------------------------ set-up

    def _build_decoder(
        self, registry_url: str | None, schema_wait: float, registry_settings: dict[str, Any]
    ) -> Any:
        from bridge.avro import Decoder

        if registry_url:
            # the shared client factory: a mock:// URL names one registry shared in this process
            from bridge.kafkaclient import redact_url, schema_registry_client

            try:
                registry = schema_registry_client(registry_url, registry_settings)
            except (ValueError, TypeError) as exc:
                raise UserError(
                    f"--schema-registry-url {redact_url(registry_url)} (and --schema-registry-config): {exc}"
                ) from None
            return Decoder(registry, {})
        self._schema_topic = SchemaTopic(self.bootstrap, self.schemas_topic, schema_wait, self._settings)
        return Decoder(None, self._schema_topic.lookup)

    def _on_error(self, error: KafkaError) -> None:
        # Runs inside librdkafka's callback: only note it (no logging, no locks; confluent-kafka may
        # raise a fatal error while a callback runs, as the kafka sink found); reported after the call.
        self._errors.append(error)

    def _report_errors(self) -> None:
        """Log the errors librdkafka reported during the last consumer call."""
        errors, self._errors = self._errors, []
        for error in errors:
            self.broker_errors += 1
            if error.code() == KafkaError._ALL_BROKERS_DOWN:
                log.warning("consume: no broker of %s answers; retrying", self.bootstrap)
            else:
                log.debug("consume: kafka: %s", error)

    def close(self) -> None:
        self._consumer.close()
        if self._schema_topic is not None:
            self._schema_topic.close()

    # ------------------------------------------------------------ topics

    def want(self, topic: str) -> None:
        """Read ``topic`` too (a DDL event named it); assigned at the next refresh."""
        if topic and topic not in self.assigned and not self.topics:
            self.wanted_extra.add(topic)

    def selected(self, name: str) -> bool:
        """With ``--topic``: those topics only (the prefix then only names the schemas topic)."""
        if self.topics:
            return name in self.topics
        if name in self.wanted_extra:
            return True
        if not self.prefix:
            return False
        if name == self.ddl_topic:
            return True
        return name.startswith(self.prefix + ".") and not name.startswith(self.prefix + "._")

    def refresh(self, force: bool = False) -> list[str]:
        """List the broker's topics; assign the partitions of new selected topics. The new topics."""
        now = time.monotonic()
        if not force and now - self._last_refresh < self.refresh_interval:
            return []
        self._last_refresh = now
        try:
            metadata = self._consumer.list_topics(timeout=METADATA_TIMEOUT)
        except KafkaException as exc:
            self._report_errors()
            error = exc.args[0] if exc.args else exc
            text = error.str() if isinstance(error, KafkaError) else str(error)
            if not self._listed:  # at start: the brokers are wrong or down, say so and stop
                raise BrokerUnreachable(
                    f"--bootstrap-servers {self.bootstrap}: cannot list topics: {text}"
                ) from None
            log.warning("consume: cannot list topics (%s); reading on, trying again later", text)
            return []
        self._report_errors()
        first_listing, self._listed = not self._listed, True
        new: list[str] = []
        partitions: list[KafkaPartition] = []
        # without from_beginning only the topics there at start begin at their end: a topic that
        # appears later (a new table) holds nothing but new messages
        offset = OFFSET_BEGINNING if self.from_beginning or not first_listing else OFFSET_END
        for name, topic in sorted(metadata.topics.items()):
            if name in self.assigned or not self.selected(name) or topic.error is not None:
                continue
            numbers = sorted(topic.partitions)
            if not numbers:
                continue
            self.assigned[name] = numbers
            self.wanted_extra.discard(name)
            partitions += [KafkaPartition(name, n, offset) for n in numbers]
            new.append(name)
        if partitions:
            if self.group:
                partitions = self._group_offsets(partitions)
            self._consumer.incremental_assign(partitions)
            for name in new:
                log.info("consume: reading topic %s (%d partitions)", name, len(self.assigned[name]))
                if self.on_assign is not None:
                    self.on_assign(name, self.assigned[name])
        return new

    def _group_offsets(self, partitions: list[KafkaPartition]) -> list[KafkaPartition]:
        """``partitions`` starting where the group committed (the given offset where it did not)."""
        try:
            committed = self._consumer.committed(
                [KafkaPartition(p.topic, p.partition) for p in partitions], timeout=METADATA_TIMEOUT
            )
        except KafkaException as exc:
            raise ConsumeError(f"--group {self.group}: cannot read the committed offsets: {exc}") from None
        found = {(c.topic, c.partition): c.offset for c in committed if c.error is None and c.offset >= 0}
        for p in partitions:
            offset = found.get((p.topic, p.partition))
            if offset is not None:
                p.offset = offset
                log.info(
                    "consume: group %s resumes %s[%d] at offset %d", self.group, p.topic, p.partition, offset
                )
        return partitions

    def commit(self, handled: dict[tuple[str, int], int]) -> None:
        """Commit, for the group, the offset after the last message handled of each partition
        (``handled``: (topic, partition) -> that offset + 1); a no-op without a group."""
        if not self.group:
            return
        fresh = {tp: offset for tp, offset in handled.items() if self.committed.get(tp) != offset}
        if not fresh:
            return
        offsets = [KafkaPartition(topic, partition, offset) for (topic, partition), offset in fresh.items()]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            self._report_errors()
            raise ConsumeError(f"--group {self.group}: committing offsets failed: {exc}") from None
        self.committed.update(fresh)

    def rewind(self, topic: str, partitions: list[int]) -> bool:
        """Fetch ``topic``'s partitions anew from where this reader stands (what was prefetched is
        dropped), so the next end-of-partition event comes from a fetch made after this call.
        False when the consumer cannot seek yet (partition not fetched yet): try again later."""
        for partition in partitions:
            offset = self.next_offset.get((topic, partition), OFFSET_BEGINNING)
            try:
                self._consumer.seek(KafkaPartition(topic, partition, offset))
            except KafkaException as exc:
                log.debug("consume: cannot seek %s[%d] yet: %s", topic, partition, exc)
                return False
        return True

    def missing_topics(self) -> list[str]:
        """Topics asked for by name that the broker does not have (yet)."""
        return sorted(t for t in (*self.topics, *self.wanted_extra) if t not in self.assigned)

    # ------------------------------------------------------------ messages

    def poll(self, timeout: float, limit: int = 1000) -> list[Item]:
        """Up to ``limit`` decoded messages, waiting at most ``timeout`` seconds for the first."""
        items: list[Item] = []
        messages = self._consumer.consume(limit, timeout)
        self._report_errors()
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    items.append(
                        EndItem(Where(message.topic() or "", message.partition() or 0, message.offset() or 0))
                    )
                    continue
                if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                if error.fatal():
                    raise ConsumeError(f"kafka consumer: fatal error: {error}")
                log.warning("consume: kafka: %s", error)
                continue
            self.messages_read += 1
            self.next_offset[(message.topic() or "", message.partition() or 0)] = (message.offset() or 0) + 1
            value = message.value()
            self.bytes_read += len(value or b"") + len(message.key() or b"")
            items.append(self.decode(message))
        return items

    def decode(self, message: Message) -> Item:
        topic, partition, offset = message.topic() or "", message.partition() or 0, message.offset() or 0
        where = Where(topic, partition, offset)
        headers = _headers(message)
        kind = headers.get(HEADER_KIND, "")
        value = message.value()
        try:
            if kind == KIND_RESOLVED:
                return ResolvedItem(where, int(headers[HEADER_RESOLVED]))
            if value is None or kind == KIND_TOMBSTONE:
                return TombstoneItem(where, self._key(message))
            _, record = self._decoder.decode(value)
            if kind == KIND_DDL or topic == self.ddl_topic:
                return DDLItem(where, dict(record))
            return RowItem(
                where,
                self._key(message),
                str(record["op"]),
                record.get("before"),
                record.get("after"),
                dict(record["source"]),
                int(record.get("ts_ms") or 0),
            )
        except ProtocolError as exc:
            raise ConsumeError(f"topic {topic} partition {partition} offset {offset}: {exc}") from exc
        except (KeyError, ValueError, TypeError) as exc:
            raise ConsumeError(
                f"topic {topic} partition {partition} offset {offset}: not a bridge message ({exc!r})"
            ) from exc

    def _key(self, message: Message) -> dict[str, Any] | None:
        key = message.key()
        if not key or not self.decode_keys:
            return None
        _, record = self._decoder.decode(key)
        return dict(record) if isinstance(record, dict) else {"key": record}
