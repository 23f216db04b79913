"""Reading back what a sink wrote to Kafka: confluent-kafka's loosely typed message fields, checked."""

from __future__ import annotations

from confluent_kafka import Message


def headers(message: Message) -> dict[str, str]:
    """A message's headers as text (an empty header value reads as "")."""
    raw = message.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    return {k: v.decode() if isinstance(v, bytes) else v or "" for k, v in pairs}
