"""Prometheus metrics of the ``kafka`` sink (``bridge_sink_kafka_*``).

Registered once per :class:`~prometheus_client.CollectorRegistry`
(:func:`bridge.sink.batching.metrics_for`; the sink's context names it, the
process-wide one by default, which the drainer's ``GET /metrics`` exports beside
``bridge_drainer_*``). Label values are small sets: a topic name, a message
kind (``row``, ``tombstone``, ``ddl``, ``resolved``, ``schema``) and a
librdkafka error name — never a key, a value or a timestamp. Rates
(messages/s, bytes/s per topic) are the ``rate()`` of the counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from bridge.sink.batching import SinkMetrics

DELIVERY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)


class KafkaMetrics(SinkMetrics):
    """The sink's metrics in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.messages = self.counter(
            "bridge_sink_kafka_messages_total",
            "Messages the brokers acknowledged, by topic and kind (row, tombstone, ddl, resolved, schema)",
            "topic",
            "kind",
        )
        self.bytes = self.counter(
            "bridge_sink_kafka_bytes_total",
            "Key + value + header bytes of the messages the brokers acknowledged, by topic",
            "topic",
        )
        self.delivery_seconds = self.histogram(
            "bridge_sink_kafka_delivery_seconds",
            "Seconds from producing a message to its delivery report (acknowledged or failed)",
            DELIVERY_BUCKETS,
        )
        self.delivery_errors = self.counter(
            "bridge_sink_kafka_delivery_errors_total",
            "Messages whose delivery failed, by librdkafka error name (e.g. _MSG_TIMED_OUT)",
            "error",
        )
        self.producer_retries = self.counter(
            "bridge_sink_kafka_producer_retries_total",
            "Produce requests librdkafka retried on its own (from its statistics, all brokers)",
        )
        self.produce_requests = self.counter(
            "bridge_sink_kafka_produce_requests_total",
            "Produce requests sent to the brokers (from librdkafka's statistics, all brokers; updated "
            "every statistics.interval.ms, 5 s unless sink.kafka.producer sets it)",
        )
        self.flush_failures = self.counter(
            "bridge_sink_kafka_flush_failures_total",
            "Flushes that failed; the drainer then writes every unflushed event again",
            "retriable",
        )
        self.queue_messages = self.gauge(
            "bridge_sink_kafka_queue_messages",
            "Messages in the producer's queue: produced, not yet acknowledged or failed",
        )
        self.resolved_ts = self.gauge(
            "bridge_sink_kafka_resolved_ts",
            "The last resolved-ts watermark published to every partition of every topic the sink knows",
        )
        self.acked_ts = self.gauge(
            "bridge_sink_kafka_acked_ts",
            "Highest commit_ts such that every message at or below it was acknowledged",
        )
