"""How node kinds and states are spelled: in node records, ``ctl`` tables, logs and metrics labels."""

from __future__ import annotations

from bridge.proto import meta_pb2

KIND_NAMES: dict[meta_pb2.NodeKind, str] = {meta_pb2.PUMP: "pump", meta_pb2.DRAINER: "drainer"}
STATE_NAMES: dict[meta_pb2.NodeState, str] = {
    meta_pb2.ONLINE: "online",
    meta_pb2.PAUSING: "pausing",
    meta_pb2.PAUSED: "paused",
    meta_pb2.CLOSING: "closing",
    meta_pb2.OFFLINE: "offline",
}
