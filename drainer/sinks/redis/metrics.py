"""Prometheus metrics of the ``redis`` sink (``bridge_sink_redis_*``).

Registered once per :class:`~prometheus_client.CollectorRegistry`
(:func:`bridge.sink.batching.metrics_for`; the
sink's context names it; the process-wide one by default), so a sink opened
again, or several sinks in one process, share them. Labels are small sets:
a command name, a mode, an error kind — never a key or a value. Rates
(keys/s, commands/s) are the ``rate()`` of the counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from bridge.sink.batching import SinkMetrics


class RedisMetrics(SinkMetrics):
    """The sink's metrics in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        super().__init__(registry)
        self.keys = self.counter(
            "bridge_sink_redis_keys_total",
            "Keys whose command Redis acknowledged, by mode (invalidate: deleted; upsert: written or "
            "deleted; scan: deleted by a DDL's SCAN)",
            "mode",
        )
        self.commands = self.counter(
            "bridge_sink_redis_commands_total",
            "Commands Redis acknowledged, by command (UNLINK, DEL, PUBLISH, XADD, SET, HSET, ...)",
            "command",
        )
        self.messages = self.counter(
            "bridge_sink_redis_messages_total",
            "Messages published or stream entries added, by mode (publish, stream)",
            "mode",
        )
        self.pipeline_seconds = self.histogram(
            "bridge_sink_redis_pipeline_seconds",
            "Seconds from sending a pipeline to its last reply",
            (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0),
        )
        self.pipeline_commands = self.histogram(
            "bridge_sink_redis_pipeline_commands",
            "Commands per pipeline",
            (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536),
        )
        self.errors = self.counter(
            "bridge_sink_redis_errors_total",
            "Failed pipelines and refused commands, by kind: connection, timeout, retriable (LOADING, "
            "OOM, CLUSTERDOWN...), refused (WRONGTYPE, NOPERM...), mirror (the checkpoint-key write)",
            "kind",
        )
        self.durable_ts = self.gauge(
            "bridge_sink_redis_durable_ts",
            "Highest commit_ts such that Redis acknowledged every command at or below it",
        )
