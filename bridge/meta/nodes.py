"""How node kinds and states are spelled: in node records, ``ctl`` tables, logs and metrics labels."""

from __future__ import annotations

from datetime import UTC, datetime

from bridge.proto import meta_pb2

KIND_NAMES: dict[meta_pb2.NodeKind, str] = {meta_pb2.PUMP: "pump", meta_pb2.DRAINER: "drainer"}
STATE_NAMES: dict[meta_pb2.NodeState, str] = {
    meta_pb2.ONLINE: "online",
    meta_pb2.PAUSING: "pausing",
    meta_pb2.PAUSED: "paused",
    meta_pb2.CLOSING: "closing",
    meta_pb2.OFFLINE: "offline",
    meta_pb2.FAILED: "failed",
}


def wall_time(ms: int) -> str | None:
    """A record's wall-clock milliseconds (``error_ms``) as ISO 8601 UTC; None for 0 (not set)."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat() if ms else None
