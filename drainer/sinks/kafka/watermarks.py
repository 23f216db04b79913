"""Resolved-ts watermarks: "every change at or below ts is in the topics".

A watermark (a message without key or value, headers ``bridge.kind =
resolved`` and ``bridge.resolved-ts``) goes to every partition of the DDL
topic and of every table topic the sink knows, only for a position the
brokers acknowledged: at most every ``resolved-interval`` while writing, and
after every flush that moved the position. A lost watermark loses no data:
its failure is only counted and logged (docs/kafka-sink.md, "Watermarks").
"""

from __future__ import annotations

import functools
import time

from confluent_kafka import KafkaError, Message

from bridge.sink.errors import SinkError
from drainer.sinks.kafka.producer import Headers, ProducerLink, message_size
from drainer.sinks.kafka.topics import TableTopics


class Watermarks:
    """Publishes the acknowledged position as watermarks; see the module docstring."""

    def __init__(self, link: ProducerLink, topics: TableTopics, interval: float) -> None:
        self._link = link
        self._topics = topics
        self._interval = interval
        self.published = 0
        self._at = 0.0

    def restart(self, position: int) -> None:
        """Opened at ``position``: nothing at or below it needs a watermark from this sink."""
        self.published, self._at = position, time.monotonic()

    def publish(self, force: bool) -> None:
        """A watermark at the acknowledged position (``force``: whatever the interval)."""
        position = self._link.tracker.acked
        if position <= self.published:
            return
        now = time.monotonic()
        if not force and now - self._at < self._interval:
            return
        admin = self._topics.admin
        topics = [self._topics.names.ddl, *self._topics.topics]
        for topic in topics:
            if topic not in admin.partitions:
                try:
                    admin.ensure({topic: self._topics.spec})
                except SinkError as exc:
                    self._link.warn("resolved", "kafka sink: no watermark to %s: %s", topic, exc)
                    continue
        headers: Headers = [("bridge.kind", b"resolved"), ("bridge.resolved-ts", str(position).encode())]
        size = message_size(None, None, headers)
        for topic in topics:
            report = functools.partial(self._link.later, self._on_delivery, size, position)
            for partition in range(admin.partitions.get(topic, 0)):
                self._link.send(topic, partition, None, None, headers, report, None)
        self.published, self._at = position, now
        self._link.metrics.resolved_ts.set(position)

    def _on_delivery(self, size: int, position: int, error: KafkaError | None, message: Message) -> None:
        latency = message.latency()
        if latency is not None:
            self._link.metrics.delivery_seconds.observe(latency)
        if error is None:
            self._link.count(message.topic() or "", "resolved", size, position, message)
        else:
            self._link.delivery_error(error, message.topic() or "", "resolved")
