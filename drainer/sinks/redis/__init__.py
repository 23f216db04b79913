"""The ``redis`` sink: cache keys of changed rows invalidated in commit order (also publish,
stream and upsert). Guide: docs/redis-sink.md; the class: :class:`RedisSink`."""

from drainer.sinks.redis.sink import RedisSink

__all__ = ["RedisSink"]
