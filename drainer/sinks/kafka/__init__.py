"""The ``kafka`` sink: Avro change topics for Kafka consumers (docs/kafka-sink.md)."""

from drainer.sinks.kafka.sink import KafkaSink

__all__ = ["KafkaSink"]
