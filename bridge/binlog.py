"""Building, recognising and parsing ``binlog.Binlog`` messages.

A transaction's life is two binlogs paired by ``start_ts``: a Prewrite that
carries its changes (row mutations, or a DDL), then a Commit with
``commit_ts`` or a Rollback. Two conventions ride on the same message:

- a **probe** has ``start_ts = commit_ts = 0``; a pump answers it without
  storing anything (the pump client uses it to see whether a pump is back);
- a **fake binlog** is a Rollback with ``start_ts = commit_ts = ts``: the
  watermark a pump emits so that an idle pump does not stall the merge.

:func:`parse_binlog` is the boundary where bytes from the network become a
``Binlog``: protobuf's ``DecodeError`` and every structural fault become
:class:`~bridge.errors.ProtocolError` with a message naming the fault. The
builders check their arguments and raise ``ValueError`` on misuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2, row_pb2
from bridge.schema import SchemaError, validate_table_schema

Binlog = binlog_pb2.Binlog
BinlogType = binlog_pb2.BinlogType
MutationType = binlog_pb2.MutationType
SchemaChange = row_pb2.SchemaChange

_MAX_TS = (1 << 63) - 1
_KNOWN_TYPES = frozenset(BinlogType.values())
# Enum values as plain ints: attribute lookups on protobuf enum wrappers cost
# ~1.7 us each, and parse_binlog runs for every binlog a pump receives.
PREWRITE, COMMIT, ROLLBACK = BinlogType.Prewrite, BinlogType.Commit, BinlogType.Rollback
PREWRITE_CHUNK = BinlogType.PrewriteChunk
PRE_DDL, POST_DDL = BinlogType.PreDDL, BinlogType.PostDDL
INSERT, UPDATE, DELETE_ROW = MutationType.Insert, MutationType.Update, MutationType.DeleteRow
DELETE_ID, DELETE_PK = MutationType.DeleteID, MutationType.DeletePK


def _check_ts(name: str, ts: int) -> int:
    if isinstance(ts, bool) or not isinstance(ts, int) or not 0 < ts <= _MAX_TS:
        raise ValueError(f"{name} must be a positive 63-bit timestamp, got {ts!r}")
    return ts


def prewrite(
    start_ts: int,
    mutations: binlog_pb2.PrewriteValue | Iterable[binlog_pb2.TableMutation],
    prewrite_key: bytes = b"",
    *,
    schema_version: int = 0,
) -> binlog_pb2.Binlog:
    """The Prewrite of a DML transaction: its row changes, serialized into ``prewrite_value``.

    ``mutations`` is a ``PrewriteValue`` (its own ``schema_version`` wins) or
    the transaction's ``TableMutation`` messages, one per table.
    """
    if isinstance(mutations, binlog_pb2.PrewriteValue):
        value = mutations
    else:
        value = binlog_pb2.PrewriteValue(schema_version=schema_version, mutations=mutations)
    return Binlog(
        tp=PREWRITE,
        start_ts=_check_ts("start_ts", start_ts),
        prewrite_key=prewrite_key,
        prewrite_value=value.SerializeToString(),
    )


def commit(start_ts: int, commit_ts: int) -> binlog_pb2.Binlog:
    """The Commit of the transaction whose Prewrite had ``start_ts``; ``commit_ts > start_ts``."""
    _check_ts("start_ts", start_ts)
    if _check_ts("commit_ts", commit_ts) <= start_ts:
        raise ValueError(f"commit_ts {commit_ts} must be greater than start_ts {start_ts}")
    return Binlog(tp=COMMIT, start_ts=start_ts, commit_ts=commit_ts)


def rollback(start_ts: int) -> binlog_pb2.Binlog:
    """The Rollback of the transaction whose Prewrite had ``start_ts``."""
    return Binlog(tp=ROLLBACK, start_ts=_check_ts("start_ts", start_ts))


# A pump's errmsg for a binlog it cannot take *right now* (paused, joining,
# closing, offline, low on disk) starts with this: a producer retries such a
# Prewrite on another pump. Any other errmsg is about the binlog itself and is
# final (schemas/README.md, "Errors").
PUMP_UNAVAILABLE_PREFIX = "unavailable: "

# A pump's errmsg for a Commit it will not deliver (its Prewrite was settled by
# the lost-commit resolver, or its commit_ts is below the pump's watermark):
# final, and no other pump knows the Prewrite (pump/storage/late_commits.py).
COMMIT_REFUSED_PREFIX = "commit refused: "


def probe() -> binlog_pb2.Binlog:
    """The empty binlog a pump acknowledges without storing (``start_ts = commit_ts = 0``)."""
    return Binlog(tp=PREWRITE, start_ts=0, commit_ts=0)


def is_probe(binlog: binlog_pb2.Binlog) -> bool:
    return binlog.start_ts == 0 and binlog.commit_ts == 0


def fake_binlog(ts: int) -> binlog_pb2.Binlog:
    """A pump's watermark: no commit at or below ``ts`` is still to come from that pump."""
    _check_ts("ts", ts)
    return Binlog(tp=ROLLBACK, start_ts=ts, commit_ts=ts)


def is_fake(binlog: binlog_pb2.Binlog) -> bool:
    return binlog.tp == ROLLBACK and binlog.commit_ts != 0 and binlog.start_ts == binlog.commit_ts


def ddl_prewrite(
    start_ts: int,
    query: str | bytes,
    job_id: int,
    schema_change: row_pb2.SchemaChange,
    prewrite_key: bytes = b"",
) -> binlog_pb2.Binlog:
    """The Prewrite of a DDL: the statement, its job id (> 0) and the schema it leaves.

    ``schema_change`` must follow the rules in ``schemas/README.md`` (its
    ``table_schema`` set for create/alter/rename/truncate, unset for drops).
    """
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id <= _MAX_TS:
        raise ValueError(f"job_id must be a positive int64, got {job_id!r}")
    text = query.encode() if isinstance(query, str) else query
    if not text.strip():
        raise ValueError("a DDL binlog needs its query text")
    problem = schema_change_problem(schema_change)
    if problem:
        raise ValueError(problem)
    return Binlog(
        tp=PREWRITE,
        start_ts=_check_ts("start_ts", start_ts),
        prewrite_key=prewrite_key,
        ddl_query=text,
        ddl_job_id=job_id,
        ddl_schema_change=schema_change.SerializeToString(),
    )


def is_ddl(binlog: binlog_pb2.Binlog) -> bool:
    return binlog.ddl_job_id > 0


class TableMutationBuilder:
    """Collects one table's row changes within a transaction, in the order made.

    Rows are serialized row images (:class:`bridge.rowcodec.RowCodec`). Each
    call appends the image(s) and one ``sequence`` entry, so the n-th Update in
    ``sequence`` is ``updated_rows[2n]`` (old) and ``updated_rows[2n+1]`` (new).
    """

    __slots__ = ("_mutation", "table_id")

    def __init__(self, table_id: int) -> None:
        self.table_id = table_id
        self._mutation = binlog_pb2.TableMutation(table_id=table_id)

    def insert(self, row: bytes) -> None:
        self._mutation.inserted_rows.append(row)
        self._mutation.sequence.append(INSERT)

    def update(self, old_row: bytes, new_row: bytes) -> None:
        self._mutation.updated_rows.extend((old_row, new_row))
        self._mutation.sequence.append(UPDATE)

    def delete(self, row: bytes) -> None:
        self._mutation.deleted_rows.append(row)
        self._mutation.sequence.append(DELETE_ROW)

    def insert_all(self, rows: Sequence[bytes]) -> None:
        """:meth:`insert` of each of ``rows`` in turn (one append per field for the lot)."""
        self._mutation.inserted_rows.extend(rows)
        self._mutation.sequence.extend([INSERT] * len(rows))

    def update_all(self, images: Sequence[bytes]) -> None:
        """:meth:`update` of each (old, new) pair of ``images`` = [old, new, old, new, ...] in turn."""
        if len(images) % 2:
            raise ValueError("update images come in (old, new) pairs")
        self._mutation.updated_rows.extend(images)
        self._mutation.sequence.extend([UPDATE] * (len(images) // 2))

    def delete_all(self, rows: Sequence[bytes]) -> None:
        """:meth:`delete` of each of ``rows`` in turn."""
        self._mutation.deleted_rows.extend(rows)
        self._mutation.sequence.extend([DELETE_ROW] * len(rows))

    def __len__(self) -> int:
        """The number of changes collected so far."""
        return len(self._mutation.sequence)

    def build(self) -> binlog_pb2.TableMutation:
        """Hand over the collected mutation; the builder starts again empty."""
        mutation = self._mutation
        self._mutation = binlog_pb2.TableMutation(table_id=self.table_id)
        return mutation


def parse_binlog(payload: bytes, *, deep: bool = True) -> binlog_pb2.Binlog:
    """Parse and check a serialized Binlog; :class:`ProtocolError` if malformed.

    Always checked: the type is known, timestamps fit the type (a Commit has
    ``commit_ts > start_ts``; a Rollback has none or is fake; a Prewrite has
    none; a PrewriteChunk has none, or as pulled one > start_ts), a DDL job id
    is positive and its Prewrite carries the query, ``chunk`` (>= 1) is only on
    a PrewriteChunk and ``chunks`` (>= 0) only on a DML Prewrite or Commit. With
    ``deep`` (the default) ``prewrite_value`` and ``ddl_schema_change`` are
    parsed and checked too (see :func:`read_prewrite_value`); a pump that only
    stores the payload may pass ``deep=False``.
    """
    try:
        binlog = Binlog.FromString(payload)
    except DecodeError as exc:
        raise ProtocolError(f"payload is not a binlog.Binlog: {exc}") from None
    problem = binlog_problem(binlog, deep=deep)
    if problem:
        raise ProtocolError(f"invalid binlog (start_ts {binlog.start_ts}): {problem}")
    return binlog


def binlog_problem(binlog: binlog_pb2.Binlog, *, deep: bool = True) -> str | None:
    """What makes ``binlog`` structurally invalid, or ``None``; see :func:`parse_binlog`."""
    tp = _binlog_type(binlog)
    if tp is None:
        values = _unknown_values(binlog, Binlog.TP_FIELD_NUMBER)
        return f"unknown binlog type {', '.join(map(_describe_unknown, values))}"
    if is_probe(binlog):
        return None
    problem = _timestamp_problem(binlog, tp) or _ddl_problem(binlog, tp) or _chunk_problem(binlog, tp)
    if problem or not deep:
        return problem
    try:
        if binlog.HasField("prewrite_value"):
            read_prewrite_value(binlog)
        read_schema_change(binlog)
    except ProtocolError as exc:
        return str(exc)
    return None


def _binlog_type(binlog: binlog_pb2.Binlog) -> int | None:
    if binlog.HasField("tp"):
        return binlog.tp
    # proto2 enums are closed: an unknown value is kept as an unknown field 1.
    if _unknown_values(binlog, Binlog.TP_FIELD_NUMBER):
        return None
    return PREWRITE


def _unknown_values(message: Message, field_number: int) -> list[object]:
    """Values of ``field_number`` the parser kept as unknown (e.g. unknown proto2 enum values)."""
    unknown = UnknownFieldSet(message)
    fields = (unknown[i] for i in range(len(unknown)))
    return [f.data for f in fields if f.field_number == field_number]


def _describe_unknown(value: object) -> str:
    """An unknown field's value for an error message: numbers as they are, other wire types by kind."""
    if isinstance(value, int):
        return str(value)
    if isinstance(value, bytes):
        return f"({len(value)} bytes, not a number)"
    return "(a group, not a number)"


def _timestamp_problem(binlog: binlog_pb2.Binlog, tp: int) -> str | None:
    start_ts, commit_ts = binlog.start_ts, binlog.commit_ts
    if start_ts <= 0:
        return f"start_ts must be positive, got {start_ts}"
    if tp == COMMIT and commit_ts <= start_ts:
        return f"a Commit needs commit_ts > start_ts, got commit_ts {commit_ts}"
    if tp == ROLLBACK and commit_ts not in (0, start_ts):
        return f"a Rollback carries no commit_ts unless it is fake (= start_ts), got {commit_ts}"
    if tp == PREWRITE and commit_ts:
        return f"a Prewrite carries no commit_ts, got {commit_ts}"
    if tp == PREWRITE_CHUNK and commit_ts and commit_ts <= start_ts:
        return f"a PrewriteChunk carries no commit_ts (or, pulled, one > start_ts), got {commit_ts}"
    return None


def _chunk_problem(binlog: binlog_pb2.Binlog, tp: int) -> str | None:
    """``chunk`` only on a PrewriteChunk (>= 1), ``chunks`` (>= 0) only on a DML Prewrite or
    its Commit; a PrewriteChunk carries no DDL fields. A value of 0 counts as unset."""
    chunk, chunks = binlog.chunk, binlog.chunks
    if tp == PREWRITE_CHUNK:
        if chunk < 1:
            return f"a PrewriteChunk needs chunk >= 1, got {chunk}"
        if chunks:
            return f"a PrewriteChunk carries no chunks, got {chunks}"
        if binlog.ddl_job_id or binlog.ddl_query or binlog.HasField("ddl_schema_change"):
            return "a PrewriteChunk carries no DDL fields (a DDL is never chunked)"
        return None
    if chunk:
        return f"only a PrewriteChunk carries chunk, got chunk {chunk} on a {BinlogType.Name(tp)}"
    if chunks < 0:
        return f"chunks must be >= 0, got {chunks}"
    if chunks and tp not in (PREWRITE, COMMIT):
        return f"only a Prewrite or Commit carries chunks, got chunks {chunks} on a {BinlogType.Name(tp)}"
    if chunks and binlog.ddl_job_id:
        return f"a DDL is never chunked, got chunks {chunks}"
    return None


def _ddl_problem(binlog: binlog_pb2.Binlog, tp: int) -> str | None:
    if binlog.ddl_job_id < 0:
        return f"ddl_job_id must be positive, got {binlog.ddl_job_id}"
    needs_query = tp in (PRE_DDL, POST_DDL) or (tp == PREWRITE and binlog.ddl_job_id > 0)
    if needs_query and (binlog.ddl_job_id <= 0 or not binlog.ddl_query):
        return f"a DDL {BinlogType.Name(tp)} needs ddl_job_id > 0 and ddl_query"
    return None


def read_prewrite_value(binlog: binlog_pb2.Binlog) -> binlog_pb2.PrewriteValue:
    """Parse ``binlog.prewrite_value`` and check every mutation; :class:`ProtocolError` if bad.

    A mutation is well-formed when ``updated_rows`` holds pairs and each
    MutationType occurs in ``sequence`` exactly as often as its row list has
    entries (Update: pairs).
    """
    try:
        value = binlog_pb2.PrewriteValue.FromString(binlog.prewrite_value)
    except DecodeError as exc:
        raise ProtocolError(f"prewrite_value is not a binlog.PrewriteValue: {exc}") from None
    for mutation in value.mutations:
        problem = mutation_problem(mutation)
        if problem:
            raise ProtocolError(f"table id {mutation.table_id}: {problem}")
    return value


def mutation_problem(mutation: binlog_pb2.TableMutation) -> str | None:
    """What makes one TableMutation inconsistent, or ``None``."""
    if len(mutation.updated_rows) % 2:
        return f"updated_rows holds {len(mutation.updated_rows)} images; updates come in old/new pairs"
    # On the hot path of every pump write: list.count runs in C, where a
    # Counter over the repeated field cost ~4 us per mutation.
    sequence = list(mutation.sequence)
    rows = (
        (INSERT, len(mutation.inserted_rows)),
        (UPDATE, len(mutation.updated_rows) // 2),
        (DELETE_ROW, len(mutation.deleted_rows)),
        (DELETE_ID, len(mutation.deleted_ids)),
        (DELETE_PK, len(mutation.deleted_pks)),
    )
    if len(UnknownFieldSet(mutation)):
        unknown = _unknown_values(mutation, mutation.SEQUENCE_FIELD_NUMBER)
        if unknown:
            return f"sequence holds unknown mutation type {_describe_unknown(unknown[0])}"
    for kind, expected in rows:
        found = sequence.count(kind)
        if found != expected:
            name = MutationType.Name(kind)
            return f"sequence has {found} {name} entries for {expected} {name} rows"
    return None


class Change(NamedTuple):
    """One row change of a TableMutation: ``before`` is None for an insert, ``after`` for a delete."""

    kind: MutationType
    before: bytes | None
    after: bytes | None


def iter_changes(mutation: binlog_pb2.TableMutation) -> Iterator[Change]:
    """The mutation's row changes in ``sequence`` order, as serialized row images.

    Raises :class:`ProtocolError` for an inconsistent mutation (see
    :func:`mutation_problem`) or an obsolete DeleteID/DeletePK entry, which
    carries no row image.
    """
    problem = mutation_problem(mutation)
    if problem:
        raise ProtocolError(f"table id {mutation.table_id}: {problem}")
    inserted, updated, deleted = (
        iter(mutation.inserted_rows),
        iter(mutation.updated_rows),
        iter(mutation.deleted_rows),
    )
    for kind in mutation.sequence:
        if kind == INSERT:
            yield Change(kind, None, next(inserted))
        elif kind == UPDATE:
            yield Change(kind, next(updated), next(updated))
        elif kind == DELETE_ROW:
            yield Change(kind, next(deleted), None)
        else:
            name = MutationType.Name(kind)
            raise ProtocolError(
                f"table id {mutation.table_id}: obsolete mutation type {name} has no row image"
            )


def read_schema_change(binlog: binlog_pb2.Binlog) -> row_pb2.SchemaChange | None:
    """Parse and check ``binlog.ddl_schema_change``; ``None`` when absent (an original DDL binlog)."""
    if not binlog.HasField("ddl_schema_change"):
        return None
    try:
        change = SchemaChange.FromString(binlog.ddl_schema_change)
    except DecodeError as exc:
        raise ProtocolError(f"ddl_schema_change is not a bridge.row.SchemaChange: {exc}") from None
    problem = schema_change_problem(change)
    if problem:
        raise ProtocolError(problem)
    return change


_TABLE_KINDS = frozenset(
    (
        SchemaChange.CREATE_TABLE,
        SchemaChange.ALTER_TABLE,
        SchemaChange.RENAME_TABLE,
        SchemaChange.TRUNCATE_TABLE,
    )
)
_SCHEMALESS_KINDS = frozenset(
    (SchemaChange.DROP_TABLE, SchemaChange.CREATE_DATABASE, SchemaChange.DROP_DATABASE)
)


def schema_change_problem(change: row_pb2.SchemaChange) -> str | None:
    """What breaks the SchemaChange rules of ``schemas/README.md``, or ``None``."""
    kind = change.kind
    if kind not in _TABLE_KINDS and kind not in _SCHEMALESS_KINDS:
        return f"schema change of unknown kind {kind}"
    name = SchemaChange.Kind.Name(kind)
    database_level = kind in (SchemaChange.CREATE_DATABASE, SchemaChange.DROP_DATABASE)
    if not change.db or (not change.table and not database_level):
        return f"{name} must name its {'database' if database_level else 'database and table'}"
    has_schema = change.HasField("table_schema")
    if kind in _SCHEMALESS_KINDS:
        return f"{name} carries no table_schema" if has_schema else None
    if not has_schema:
        return f"{name} must carry the resulting table_schema"
    schema = change.table_schema
    if (schema.db, schema.table) != (change.db, change.table):
        return f"{name} of {change.db}.{change.table} carries the schema of {schema.db}.{schema.table}"
    if kind == SchemaChange.RENAME_TABLE and not (change.old_db and change.old_table):
        return "RENAME_TABLE must name old_db and old_table"
    try:
        validate_table_schema(schema)
    except SchemaError as exc:
        return str(exc)
    return None
