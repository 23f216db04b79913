"""Field compatibility with the original TiDB Binlog messages and services.

The expected numbers and types are the reference's (shared/reference.md), typed
in here by hand rather than read from our .proto files. Compatibility is also
checked on bytes: serialized messages equal what the protobuf wire rules give
for those numbers and types, and bytes written that way parse back.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from bridge.proto import binlog_pb2, drainer_pb2, drainer_pb2_grpc, pump_pb2, pump_pb2_grpc

F = FieldDescriptor
ENUM, MESSAGE = F.TYPE_ENUM, F.TYPE_MESSAGE

# message -> {field name: (number, type, repeated, enum/message full name or "")}
REFERENCE: dict[Any, dict[str, tuple[int, int, bool, str]]] = {
    binlog_pb2.Binlog: {
        "tp": (1, ENUM, False, "binlog.BinlogType"),
        "start_ts": (2, F.TYPE_INT64, False, ""),
        "commit_ts": (3, F.TYPE_INT64, False, ""),
        "prewrite_key": (4, F.TYPE_BYTES, False, ""),
        "prewrite_value": (5, F.TYPE_BYTES, False, ""),
        "ddl_query": (6, F.TYPE_BYTES, False, ""),
        "ddl_job_id": (7, F.TYPE_INT64, False, ""),
        "ddl_schema_state": (8, F.TYPE_INT32, False, ""),
    },
    binlog_pb2.PrewriteValue: {
        "schema_version": (1, F.TYPE_INT64, False, ""),
        "mutations": (2, MESSAGE, True, "binlog.TableMutation"),
    },
    binlog_pb2.TableMutation: {
        "table_id": (1, F.TYPE_INT64, False, ""),
        "inserted_rows": (2, F.TYPE_BYTES, True, ""),
        "updated_rows": (3, F.TYPE_BYTES, True, ""),
        "deleted_ids": (4, F.TYPE_INT64, True, ""),
        "deleted_pks": (5, F.TYPE_BYTES, True, ""),
        "deleted_rows": (6, F.TYPE_BYTES, True, ""),
        "sequence": (7, ENUM, True, "binlog.MutationType"),
    },
    pump_pb2.WriteBinlogReq: {
        "clusterID": (1, F.TYPE_UINT64, False, ""),
        "payload": (2, F.TYPE_BYTES, False, ""),
    },
    pump_pb2.WriteBinlogResp: {"errmsg": (1, F.TYPE_STRING, False, "")},
    pump_pb2.PullBinlogReq: {
        "clusterID": (1, F.TYPE_UINT64, False, ""),
        "startFrom": (2, MESSAGE, False, "binlog.Pos"),
    },
    pump_pb2.Pos: {"suffix": (1, F.TYPE_UINT64, False, ""), "offset": (2, F.TYPE_INT64, False, "")},
    pump_pb2.PullBinlogResp: {"entity": (1, MESSAGE, False, "binlog.Entity")},
    pump_pb2.Entity: {
        "pos": (1, MESSAGE, False, "binlog.Pos"),
        "payload": (2, F.TYPE_BYTES, False, ""),
        "checksum": (3, F.TYPE_BYTES, False, ""),
        "meta": (4, MESSAGE, False, "binlog.Meta"),
    },
    pump_pb2.Meta: {"startTs": (1, F.TYPE_INT64, False, ""), "commitTs": (2, F.TYPE_INT64, False, "")},
}

# Our additions, each on a number the original does not use.
ADDITIONS = {
    "binlog.Binlog": {"ddl_schema_change": 20, "chunk": 21, "chunks": 22},
    "binlog.TableMutation": {"snapshot": 20},
    "binlog.PullBinlogResp": {"entities": 2},
}


def described(field: FieldDescriptor) -> tuple[int, int, bool, str]:
    target = field.enum_type or field.message_type
    return field.number, field.type, field.is_repeated, target.full_name if target else ""


@pytest.mark.parametrize("message", list(REFERENCE), ids=lambda m: m.DESCRIPTOR.full_name)
def test_fields_have_the_reference_numbers_and_types(message: Any) -> None:
    descriptor: Descriptor = message.DESCRIPTOR
    assert descriptor.full_name.startswith("binlog.")
    for name, expected in REFERENCE[message].items():
        assert described(descriptor.fields_by_name[name]) == expected, name
    extra = {f.name: f.number for f in descriptor.fields if f.name not in REFERENCE[message]}
    assert extra == ADDITIONS.get(descriptor.full_name, {})
    reference_numbers = {number for number, *_ in REFERENCE[message].values()}
    assert not reference_numbers & set(extra.values())


def test_binlog_proto_is_proto2_with_optional_fields_and_unpacked_repeats() -> None:
    for field in binlog_pb2.Binlog.DESCRIPTOR.fields:
        assert field.has_presence, field.name  # proto2 optional: zero values are still written when set
    for name in ("deleted_ids", "sequence"):
        assert not binlog_pb2.TableMutation.DESCRIPTOR.fields_by_name[name].is_packed


@pytest.mark.parametrize(
    ("enum", "values"),
    [
        (binlog_pb2.BinlogType, {"Prewrite": 0, "Commit": 1, "Rollback": 2, "PreDDL": 3, "PostDDL": 4}),
        (binlog_pb2.MutationType, {"Insert": 0, "Update": 1, "DeleteID": 2, "DeletePK": 3, "DeleteRow": 4}),
    ],
)
def test_enums_have_the_reference_values(enum: Any, values: dict[str, int]) -> None:
    additions = {"PrewriteChunk": 5} if enum is binlog_pb2.BinlogType else {}  # ours, after the original's
    assert dict(enum.items()) == values | additions
    assert enum.DESCRIPTOR.full_name.startswith("binlog.")


def test_service_methods_have_the_reference_paths_and_shapes() -> None:
    pump = pump_pb2.DESCRIPTOR.services_by_name["Pump"]
    assert pump.full_name == "binlog.Pump"
    write, pull = pump.methods_by_name["WriteBinlog"], pump.methods_by_name["PullBinlogs"]
    assert (write.input_type.full_name, write.output_type.full_name) == (
        "binlog.WriteBinlogReq",
        "binlog.WriteBinlogResp",
    )
    assert not write.client_streaming and not write.server_streaming
    assert (pull.input_type.full_name, pull.output_type.full_name) == (
        "binlog.PullBinlogReq",
        "binlog.PullBinlogResp",
    )
    assert not pull.client_streaming and pull.server_streaming
    notify = drainer_pb2.DESCRIPTOR.services_by_name["Cistern"].methods_by_name["Notify"]
    assert notify.full_name == "binlog.Cistern.Notify"
    assert (notify.input_type.full_name, notify.output_type.full_name) == (
        "binlog.NotifyReq",
        "binlog.NotifyResp",
    )


class RecordingChannel:
    """Stands in for a grpc.Channel and records the method paths a stub binds."""

    def __init__(self) -> None:
        self.paths: dict[str, str] = {}

    def _bind(self, kind: str) -> Any:
        def bind(path: str, *args: object, **kwargs: object) -> None:
            self.paths[path] = kind

        return bind

    def __getattr__(self, kind: str) -> Any:
        return self._bind(kind)


def test_generated_stubs_call_the_reference_paths() -> None:
    channel = RecordingChannel()
    pump_pb2_grpc.PumpStub(channel)
    drainer_pb2_grpc.CisternStub(channel)
    assert channel.paths["/binlog.Pump/WriteBinlog"] == "unary_unary"
    assert channel.paths["/binlog.Pump/PullBinlogs"] == "unary_stream"
    assert channel.paths["/binlog.Cistern/Notify"] == "unary_unary"


# --- the wire rules, by hand: tag = number << 3 | wire type; varints little-endian base 128.
VARINT, LENGTH = 0, 2


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int32/int64 are sign-extended to ten bytes
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def key(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def int_field(number: int, value: int) -> bytes:
    return key(number, VARINT) + varint(value)


def bytes_field(number: int, value: bytes) -> bytes:
    return key(number, LENGTH) + varint(len(value)) + value


START_TS, COMMIT_TS = 449_573_028_459_986_946, 449_573_028_459_986_950  # realistic TSO values


def test_varint_helper_matches_the_protobuf_spec_examples() -> None:
    assert varint(1) == b"\x01" and varint(150) == b"\x96\x01" and varint(300) == b"\xac\x02"
    assert varint(-1) == b"\xff" * 9 + b"\x01"


def test_a_commit_binlog_serializes_to_the_hand_computed_bytes() -> None:
    binlog = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=START_TS, commit_ts=COMMIT_TS)
    expected = int_field(1, 1) + int_field(2, START_TS) + int_field(3, COMMIT_TS)
    assert binlog.SerializeToString() == expected


def test_a_prewrite_binlog_serializes_to_the_hand_computed_bytes() -> None:
    mutation = binlog_pb2.TableMutation(
        table_id=42,
        inserted_rows=[b"r1"],
        updated_rows=[b"o", b"n"],
        deleted_ids=[7],
        sequence=[binlog_pb2.Insert, binlog_pb2.Update],
    )
    mutation_bytes = (
        int_field(1, 42)
        + bytes_field(2, b"r1")
        + bytes_field(3, b"o")
        + bytes_field(3, b"n")
        + int_field(4, 7)
        + int_field(7, 0)  # proto2 repeated enum: one unpacked varint per entry
        + int_field(7, 1)
    )
    assert mutation.SerializeToString() == mutation_bytes
    value = binlog_pb2.PrewriteValue(schema_version=3, mutations=[mutation])
    value_bytes = int_field(1, 3) + bytes_field(2, mutation_bytes)
    assert value.SerializeToString() == value_bytes
    binlog = binlog_pb2.Binlog(
        tp=binlog_pb2.Prewrite,
        start_ts=START_TS,
        prewrite_key=b"k",
        prewrite_value=value_bytes,
        ddl_schema_state=-1,
    )
    expected = int_field(1, 0) + int_field(2, START_TS) + bytes_field(4, b"k") + bytes_field(5, value_bytes)
    expected += int_field(8, -1)  # int32, not sint32: -1 takes ten bytes
    assert binlog.SerializeToString() == expected


def test_bytes_written_by_the_wire_rules_parse_back() -> None:
    # How a Go producer of the original format writes a DDL binlog: every field, zeros included.
    payload = (
        int_field(1, 0)
        + int_field(2, START_TS)
        + int_field(3, 0)
        + bytes_field(6, b"CREATE TABLE t (a INT)")
        + int_field(7, 12)
        + int_field(8, 0)
    )
    binlog = binlog_pb2.Binlog.FromString(payload)
    assert (binlog.tp, binlog.start_ts, binlog.ddl_job_id) == (binlog_pb2.Prewrite, START_TS, 12)
    assert binlog.ddl_query == b"CREATE TABLE t (a INT)" and binlog.HasField("commit_ts")
    # A packed encoding of the repeated enum must be read as well (the protobuf spec requires it).
    packed = binlog_pb2.TableMutation.FromString(key(7, LENGTH) + b"\x03" + b"\x00\x01\x04")
    assert list(packed.sequence) == [binlog_pb2.Insert, binlog_pb2.Update, binlog_pb2.DeleteRow]


def test_pump_messages_serialize_to_the_hand_computed_bytes() -> None:
    request = pump_pb2.WriteBinlogReq(clusterID=2**64 - 1, payload=b"xyz")
    assert request.SerializeToString() == int_field(1, 2**64 - 1) + bytes_field(2, b"xyz")
    pull = pump_pb2.PullBinlogReq(clusterID=5, startFrom=pump_pb2.Pos(offset=COMMIT_TS))
    assert pull.SerializeToString() == int_field(1, 5) + bytes_field(2, int_field(2, COMMIT_TS))
    entity_bytes = (
        bytes_field(1, int_field(2, COMMIT_TS))
        + bytes_field(2, b"payload")
        + bytes_field(3, b"\x01\x02")
        + bytes_field(4, int_field(1, START_TS) + int_field(2, COMMIT_TS))
    )
    response = pump_pb2.PullBinlogResp.FromString(bytes_field(1, entity_bytes))
    assert response.entity.payload == b"payload" and response.entity.meta.commitTs == COMMIT_TS
    assert response.SerializeToString() == bytes_field(1, entity_bytes)
    assert pump_pb2.WriteBinlogResp(errmsg="no").SerializeToString() == bytes_field(1, b"no")
