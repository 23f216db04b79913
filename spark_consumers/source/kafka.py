"""The Kafka side of the data source: topics, end offsets, schemas, reading one offset range.

Nothing here joins a consumer group or commits offsets: the Spark checkpoint
is the only progress. End offsets come from fetch responses, never from
``ListOffsets``: the Tansu broker of the test environment answers
``ListOffsets(LATEST)`` (``get_watermark_offsets(cached=False)``) wrongly,
while the high watermark a fetch response carries is right on Tansu and on
Apache Kafka alike. :class:`EndProbe` seeks each partition to where it last
found the end and lets one fetch come back (a message, or end-of-partition);
librdkafka keeps that response's high watermark.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as Partition

from bridge.errors import UserError
from spark_consumers.decode import DDL_SUFFIX, HEADER_COMMIT_TS, HEADER_KIND, HEADER_RESOLVED, SCHEMAS_SUFFIX

log = logging.getLogger(__name__)

METADATA_TIMEOUT = 10.0
PROBE_TIMEOUT = 30.0
_U64 = (1 << 64) - 1

Offsets = dict[str, dict[str, int]]  # topic -> partition (as a string: JSON keys) -> offset


class BrokerError(UserError):
    """The brokers do not answer, or a partition cannot be read."""


def consumer_config(bootstrap: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A consumer that assigns partitions itself; its group id is never joined nor committed to."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"spark-consumers-{os.getpid()}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "socket.connection.setup.timeout.ms": 10_000,
        # a reader moves from range to range; an in-flight long-poll fetch of the previous range
        # (librdkafka's default waits 500 ms at a partition's end) would delay every next one
        "fetch.wait.max.ms": 20,
        # librdkafka's own ERR lines (one per refused connect, to stderr) would bury the error our
        # code raises naming the cause; kafka.log_level = 7 brings them back
        "log_level": 2,
    }
    config.update(extra or {})
    return config


def select_topics(names: Sequence[str], patterns: Sequence[str], with_ddl: bool) -> list[str]:
    """The change topics among ``names`` that match a glob of ``patterns`` (``bridge.shop.*``);
    with ``with_ddl`` also the ``<prefix>._ddl`` topic of every prefix selected. Schemas and DDL
    topics are never row topics, even when a glob matches them."""
    chosen = set()
    for name in names:
        if name.endswith((SCHEMAS_SUFFIX, DDL_SUFFIX)):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            chosen.add(name)
    if with_ddl:
        present = set(names)
        for name in list(chosen):
            ddl = name.split(".", 1)[0] + DDL_SUFFIX
            if ddl in present:
                chosen.add(ddl)
    return sorted(chosen)


def list_partitions(consumer: Consumer, patterns: Sequence[str], with_ddl: bool) -> dict[str, list[int]]:
    """topic -> partition numbers of every selected topic the broker has now."""
    try:
        metadata = consumer.list_topics(timeout=METADATA_TIMEOUT)
    except KafkaException as exc:
        raise BrokerError(f"kafka: cannot list topics: {exc}") from None
    topics = {n: t for n, t in metadata.topics.items() if t.error is None and t.partitions}
    return {name: sorted(topics[name].partitions) for name in select_topics(list(topics), patterns, with_ddl)}


class EndProbe:
    """Finds the end offset (the next offset to be written) of partitions; see the module docstring."""

    def __init__(self, bootstrap: str, settings: Mapping[str, Any] | None = None) -> None:
        extra = {"fetch.wait.max.ms": 50, "max.partition.fetch.bytes": 1024, **(settings or {})}
        self.consumer = Consumer(consumer_config(bootstrap, extra))
        self._known: dict[tuple[str, int], int] = {}

    def ends(self, partitions: Mapping[str, Sequence[int]]) -> Offsets:
        wanted = [(t, p) for t, ps in partitions.items() for p in ps]
        if not wanted:
            return {}
        self.consumer.assign([Partition(t, p, self._known.get((t, p), OFFSET_BEGINNING)) for t, p in wanted])
        answered: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + PROBE_TIMEOUT
        while len(answered) < len(wanted):
            if time.monotonic() > deadline:
                missing = sorted(set(wanted) - set(answered))[:5]
                raise BrokerError(f"kafka: no fetch answer for {missing} after {PROBE_TIMEOUT:g}s")
            for message in self.consumer.consume(1000, 0.05):
                self._note(message, answered)
        for where, end in answered.items():
            self._known[where] = max(end, self._known.get(where, 0))
        out: Offsets = {}
        for topic, partition in wanted:
            out.setdefault(topic, {})[str(partition)] = self._known[(topic, partition)]
        return out

    def _note(self, message: Message, answered: dict[tuple[str, int], int]) -> None:
        where = (message.topic() or "", message.partition() or 0)
        error = message.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            if error.fatal():
                raise BrokerError(f"kafka: {error}")
            log.debug("end probe: %s", error)
            return
        if where in answered:
            return
        if error is not None:  # end of partition: its offset is the end
            answered[where] = message.offset() or 0
            return
        _, high = self.consumer.get_watermark_offsets(Partition(*where), cached=True)
        answered[where] = max(high, (message.offset() or 0) + 1)

    def close(self) -> None:
        self.consumer.close()


class SchemaTopic:
    """Single-object writer schemas, read on demand from ``<prefix>._schemas`` (key: the header's
    8 fingerprint bytes as 16 hex digits; value: the schema JSON)."""

    def __init__(self, bootstrap: str, topic: str, wait: float, settings: Mapping[str, Any] | None) -> None:
        self.topic = topic
        self.wait = wait
        self.schemas: dict[int, str] = {}
        self._bootstrap = bootstrap
        self._settings = settings
        self._consumer: Consumer | None = None

    def lookup(self, fingerprint: int) -> str | None:
        fingerprint &= _U64
        if fingerprint in self.schemas:
            return self.schemas[fingerprint]
        if self._consumer is None:
            self._consumer = Consumer(consumer_config(self._bootstrap, self._settings))
            self._consumer.assign([Partition(self.topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + self.wait
        while fingerprint not in self.schemas and time.monotonic() < deadline:
            for message in self._consumer.consume(500, 0.05):
                key, value = message.key(), message.value()
                if message.error() is None and key and value:
                    self.schemas[int.from_bytes(bytes.fromhex(key.decode("ascii")), "little")] = value.decode(
                        "utf-8"
                    )
        return self.schemas.get(fingerprint)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def header_kind(message: Message) -> str:
    for header in message.headers() or ():
        name, value = header[0], header[1]
        if name == HEADER_KIND and value is not None:
            return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
    return "row"


def header_int(message: Message, name: str) -> int | None:
    """A header holding a decimal integer (``bridge.commit-ts``, ``bridge.resolved-ts``), or None."""
    for header in message.headers() or ():
        if header[0] == name and header[1] is not None:
            value = header[1]
            try:
                return int(value.decode("ascii") if isinstance(value, bytes) else value)
            except ValueError:
                return None
    return None


def ddl_cut(consumer: Consumer, topic: str, partition: int, start: int, end: int) -> tuple[int, bool]:
    """Where a batch may end in ``[start, end)`` of a DDL topic's partition (:func:`cut_at`, on the
    messages read there)."""
    marks: list[tuple[int, str, int]] = []
    for chunk in read_range(consumer, topic, partition, start, end):
        for message in chunk:
            kind = header_kind(message)
            if kind == "resolved":
                marks.append((message.offset() or 0, kind, header_int(message, HEADER_RESOLVED) or -1))
            elif message.value() is not None and kind not in ("tombstone", "schema"):
                # a DDL event without its commit_ts header (not the sink's) waits for nothing
                marks.append((message.offset() or 0, "ddl", header_int(message, HEADER_COMMIT_TS) or 0))
    return cut_at(marks, end)


def cut_at(marks: Sequence[tuple[int, str, int]], end: int) -> tuple[int, bool]:
    """``marks``: (offset, ``"ddl"`` or ``"resolved"``, its commit_ts or resolved-ts) of a DDL topic's
    range ending at ``end``. Returns where a batch may end: before the first DDL event whose
    commit_ts no watermark of the range reached (``end`` when there is none), and whether a DDL event
    lies before that place. The sink publishes a watermark only once the brokers acknowledged every
    change at or below it, in every topic: a DDL at or below a watermark read here has no older change
    still on its way to a table topic."""
    resolved = max([ts for _, kind, ts in marks if kind == "resolved"], default=-1)
    events = [(offset, ts) for offset, kind, ts in marks if kind == "ddl"]
    for offset, commit_ts in events:
        if commit_ts > resolved:
            return offset, offset > events[0][0]
    return end, bool(events)


def read_range(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, batch: int = 2000
) -> Iterator[list[Message]]:
    """The messages of ``[start, end)`` of one partition, in lists of up to ``batch``; stops at
    ``end`` or at the partition's end, whichever is first (compaction leaves gaps)."""
    if end <= start:
        return
    consumer.assign([Partition(topic, partition, start)])
    idle_since = time.monotonic()
    while True:
        messages = consumer.consume(batch, 0.05)
        if messages:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > PROBE_TIMEOUT:
            raise BrokerError(f"kafka: {topic}[{partition}] gave nothing for {PROBE_TIMEOUT:g}s before {end}")
        chunk: list[Message] = []
        done = False
        for message in messages:
            error = message.error()
            offset = message.offset() or 0
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    done = done or offset >= end
                    continue
                raise BrokerError(f"kafka: reading {topic}[{partition}] at {offset}: {error}")
            if offset >= end:
                done = True
                break
            chunk.append(message)
            done = offset >= end - 1
        if chunk:
            yield chunk
        if done:
            return
