"""What a pump takes from a producer: the deep check of each written payload.

:func:`read_write_payload` is the contract: :func:`bridge.binlog.parse_binlog`
(deep: ``prewrite_value`` and ``ddl_schema_change`` too), then only Prewrite,
Commit, Rollback and PrewriteChunk binlogs and probes are taken, a fake binlog (a
Rollback with ``commit_ts = start_ts``) is refused: only the pump writes those,
and so is a PrewriteChunk with a ``commit_ts`` (its pulled form).

It runs for every binlog a pump is sent, so the usual shapes are checked by a
fast path first: a Prewrite, Commit or Rollback with its type set, ``start_ts >
0``, timestamps that fit the type, no DDL fields, and a ``prewrite_value``
whose mutations are consistent. The fast path only *accepts*: whatever it is
not sure of (any other shape, a mutation it does not recognise, unknown
fields, a ``chunk`` or ``chunks``: chunked transactions are rare and their
parts big) goes through the full check, which decides and names the fault. So it
never accepts a payload the full check refuses (``tests/unit/test_pump_checks.py``
compares both on valid and broken payloads).
"""

from __future__ import annotations

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from bridge.binlog import BinlogType, is_fake, is_probe, mutation_problem, parse_binlog
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2

# Plain ints: the enum wrapper's attribute lookup costs more than a check here.
PREWRITE, COMMIT, ROLLBACK = BinlogType.Prewrite, BinlogType.Commit, BinlogType.Rollback
PREWRITE_CHUNK = BinlogType.PrewriteChunk
STORED = frozenset((PREWRITE, COMMIT, ROLLBACK, PREWRITE_CHUNK))
_INSERT = binlog_pb2.MutationType.Insert
_from_string = binlog_pb2.Binlog.FromString
_value_from_string = binlog_pb2.PrewriteValue.FromString


def read_write_payload(payload: bytes) -> binlog_pb2.Binlog:
    """The binlog a producer sent, if a pump takes it; :class:`ProtocolError` naming the fault."""
    try:
        binlog = _from_string(payload)
    except DecodeError:
        return full_check(payload)
    if _surely_valid(binlog):
        return binlog
    return full_check(payload)


def full_check(payload: bytes) -> binlog_pb2.Binlog:
    """:func:`read_write_payload` without the fast path (the contract itself)."""
    binlog = parse_binlog(payload, deep=True)
    if is_probe(binlog):
        return binlog
    if binlog.tp not in STORED:
        name = BinlogType.Name(binlog.tp)
        raise ProtocolError(f"binlog type {name} (start_ts {binlog.start_ts}) is not stored by a pump")
    if binlog.tp == ROLLBACK and is_fake(binlog):
        raise ProtocolError(
            f"a Rollback with commit_ts = start_ts ({binlog.start_ts}) is a fake binlog; "
            "only a pump writes those"
        )
    if binlog.tp == PREWRITE_CHUNK and binlog.commit_ts:
        raise ProtocolError(
            f"a PrewriteChunk (start_ts {binlog.start_ts}, chunk {binlog.chunk}) is written without "
            f"commit_ts, got {binlog.commit_ts}"
        )
    return binlog


def _surely_valid(binlog: binlog_pb2.Binlog) -> bool:
    """True only when :func:`full_check` would take ``binlog`` (False: not sure)."""
    start_ts, commit_ts = binlog.start_ts, binlog.commit_ts
    if start_ts <= 0 or binlog.ddl_job_id or binlog.chunk or binlog.chunks or not binlog.HasField("tp"):
        return False
    tp = binlog.tp
    # (a fake Rollback, commit_ts = start_ts, is refused by the full check)
    fits = commit_ts > start_ts if tp == COMMIT else tp in (PREWRITE, ROLLBACK) and commit_ts == 0
    if not fits or binlog.HasField("ddl_schema_change"):
        return False
    if not binlog.HasField("prewrite_value"):  # checked whatever the type, as the full check does
        return True
    try:
        value = _value_from_string(binlog.prewrite_value)
    except DecodeError:
        return False
    for mutation in value.mutations:
        if not _inserts_only(mutation) and mutation_problem(mutation) is not None:
            return False
    return True


def _inserts_only(mutation: binlog_pb2.TableMutation) -> bool:
    """True when ``mutation`` is only inserts, consistently (the common case, checked cheaply)."""
    sequence = mutation.sequence
    count = len(sequence)
    if (
        count != len(mutation.inserted_rows)
        or mutation.updated_rows
        or mutation.deleted_rows
        or mutation.deleted_ids
        or mutation.deleted_pks
    ):
        return False
    if count == 1:
        if sequence[0] != _INSERT:
            return False
    elif sequence[:].count(_INSERT) != count:
        return False
    return not len(UnknownFieldSet(mutation))  # e.g. an unknown mutation type in sequence
