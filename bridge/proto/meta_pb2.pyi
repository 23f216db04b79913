from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_KIND_UNSPECIFIED: _ClassVar[NodeKind]
    PUMP: _ClassVar[NodeKind]
    DRAINER: _ClassVar[NodeKind]

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_STATE_UNSPECIFIED: _ClassVar[NodeState]
    ONLINE: _ClassVar[NodeState]
    PAUSING: _ClassVar[NodeState]
    PAUSED: _ClassVar[NodeState]
    CLOSING: _ClassVar[NodeState]
    OFFLINE: _ClassVar[NodeState]
    FAILED: _ClassVar[NodeState]
NODE_KIND_UNSPECIFIED: NodeKind
PUMP: NodeKind
DRAINER: NodeKind
NODE_STATE_UNSPECIFIED: NodeState
ONLINE: NodeState
PAUSING: NodeState
PAUSED: NodeState
CLOSING: NodeState
OFFLINE: NodeState
FAILED: NodeState

class TsoRequest(_message.Message):
    __slots__ = ("count",)
    COUNT_FIELD_NUMBER: _ClassVar[int]
    count: int
    def __init__(self, count: _Optional[int] = ...) -> None: ...

class TsoResponse(_message.Message):
    __slots__ = ("first", "count")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    first: int
    count: int
    def __init__(self, first: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("node_id", "kind", "addr", "state", "is_alive", "score", "label", "max_commit_ts", "update_ts", "ttl_ms", "status_addr", "error", "error_ms")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    IS_ALIVE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    MAX_COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    STATUS_ADDR_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_MS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    kind: NodeKind
    addr: str
    state: NodeState
    is_alive: bool
    score: int
    label: str
    max_commit_ts: int
    update_ts: int
    ttl_ms: int
    status_addr: str
    error: str
    error_ms: int
    def __init__(self, node_id: _Optional[str] = ..., kind: _Optional[_Union[NodeKind, str]] = ..., addr: _Optional[str] = ..., state: _Optional[_Union[NodeState, str]] = ..., is_alive: _Optional[bool] = ..., score: _Optional[int] = ..., label: _Optional[str] = ..., max_commit_ts: _Optional[int] = ..., update_ts: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., status_addr: _Optional[str] = ..., error: _Optional[str] = ..., error_ms: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("cluster_id", "status")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    status: NodeStatus
    def __init__(self, cluster_id: _Optional[int] = ..., status: _Optional[_Union[NodeStatus, _Mapping]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("update_ts",)
    UPDATE_TS_FIELD_NUMBER: _ClassVar[int]
    update_ts: int
    def __init__(self, update_ts: _Optional[int] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ("kind", "wait_revision", "wait_ms")
    KIND_FIELD_NUMBER: _ClassVar[int]
    WAIT_REVISION_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    kind: NodeKind
    wait_revision: int
    wait_ms: int
    def __init__(self, kind: _Optional[_Union[NodeKind, str]] = ..., wait_revision: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes", "revision", "errors")
    NODES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    revision: int
    errors: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., revision: _Optional[int] = ..., errors: _Optional[_Iterable[str]] = ...) -> None: ...

class RemoveNodeRequest(_message.Message):
    __slots__ = ("cluster_id", "kind", "node_id")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    kind: NodeKind
    node_id: str
    def __init__(self, cluster_id: _Optional[int] = ..., kind: _Optional[_Union[NodeKind, str]] = ..., node_id: _Optional[str] = ...) -> None: ...

class RemoveNodeResponse(_message.Message):
    __slots__ = ("removed",)
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    removed: NodeStatus
    def __init__(self, removed: _Optional[_Union[NodeStatus, _Mapping]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("cluster_id", "member_id", "is_leader", "leader_addr", "backend")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBER_ID_FIELD_NUMBER: _ClassVar[int]
    IS_LEADER_FIELD_NUMBER: _ClassVar[int]
    LEADER_ADDR_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    member_id: str
    is_leader: bool
    leader_addr: str
    backend: str
    def __init__(self, cluster_id: _Optional[int] = ..., member_id: _Optional[str] = ..., is_leader: _Optional[bool] = ..., leader_addr: _Optional[str] = ..., backend: _Optional[str] = ...) -> None: ...
