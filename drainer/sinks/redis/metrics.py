"""Prometheus metrics of the ``redis`` sink (``bridge_sink_redis_*``).

Registered once per :class:`~prometheus_client.CollectorRegistry`
(:func:`bridge.sink.batching.metrics_for`; the
sink's context names it; the process-wide one by default), so a sink opened
again, or several sinks in one process, share them. Labels are small sets:
a command name, a mode, an error kind — never a key or a value. Rates
(keys/s, commands/s) are the ``rate()`` of the counters.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class RedisMetrics:
    """The sink's metrics in one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.keys = Counter(
            "bridge_sink_redis_keys_total",
            "Keys whose command Redis acknowledged, by mode (invalidate: deleted; upsert: written or "
            "deleted; scan: deleted by a DDL's SCAN)",
            ["mode"],
            registry=registry,
        )
        self.commands = Counter(
            "bridge_sink_redis_commands_total",
            "Commands Redis acknowledged, by command (UNLINK, DEL, PUBLISH, XADD, SET, HSET, ...)",
            ["command"],
            registry=registry,
        )
        self.messages = Counter(
            "bridge_sink_redis_messages_total",
            "Messages published or stream entries added, by mode (publish, stream)",
            ["mode"],
            registry=registry,
        )
        self.pipeline_seconds = Histogram(
            "bridge_sink_redis_pipeline_seconds",
            "Seconds from sending a pipeline to its last reply",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0),
            registry=registry,
        )
        self.pipeline_commands = Histogram(
            "bridge_sink_redis_pipeline_commands",
            "Commands per pipeline",
            buckets=(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536),
            registry=registry,
        )
        self.errors = Counter(
            "bridge_sink_redis_errors_total",
            "Failed pipelines and refused commands, by kind: connection, timeout, retriable (LOADING, "
            "OOM, CLUSTERDOWN...), refused (WRONGTYPE, NOPERM...), mirror (the checkpoint-key write)",
            ["kind"],
            registry=registry,
        )
        self.durable_ts = Gauge(
            "bridge_sink_redis_durable_ts",
            "Highest commit_ts such that Redis acknowledged every command at or below it",
            registry=registry,
        )
