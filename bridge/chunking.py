"""Splitting a large transaction's ``PrewriteValue`` into parts of bounded size.

A producer whose serialized PrewriteValue exceeds its ``chunk-bytes`` writes
the transaction as PrewriteChunk binlogs followed by the Prewrite (see
``Binlog.chunk`` in schemas/binlog.proto). :func:`iter_prewrite_parts` makes
the parts: each a PrewriteValue with the original's ``schema_version`` whose
serialized size is at most ``max_bytes`` - unless a single row change alone is
bigger, in which case that change is a part by itself. Concatenating the
parts' changes (mutation by mutation, each in
:func:`bridge.binlog.iter_changes` order) gives the original's changes.

One table's TableMutation may be split across parts (or within one part when
nothing else fits). Every piece carries the table_id and snapshot flag of its
mutation and a ``sequence`` of its own that indexes its own row lists, so each
piece is a well-formed TableMutation (:func:`bridge.binlog.mutation_problem`).

Sizes are computed from the protobuf wire format, not by serializing: the
work is one pass over the rows (O(rows)), and a mutation that fits in the
current part whole is copied in one C call.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import add
from typing import NamedTuple

from google.protobuf.unknown_fields import UnknownFieldSet

from bridge.binlog import DELETE_ROW, INSERT, UPDATE, iter_changes, mutation_problem
from bridge.errors import ProtocolError
from bridge.proto import binlog_pb2

PrewriteValue = binlog_pb2.PrewriteValue
TableMutation = binlog_pb2.TableMutation

# Each field used here has a number below 16, so its tag is one byte; a
# sequence entry (an unpacked proto2 enum of value 0..4) is tag + one byte.
_SEQUENCE_ENTRY = 2
_ROW_KINDS = frozenset((INSERT, UPDATE, DELETE_ROW))


def _varint_size(value: int) -> int:
    """Bytes of ``value`` as a protobuf varint (negative int64: ten)."""
    if value < 0:
        return 10
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def _bytes_field(length: int) -> int:
    """Bytes of one length-delimited field (tag, length, data) with a one-byte tag."""
    return 1 + _varint_size(length) + length


def _header(mutation: TableMutation) -> TableMutation:
    """An empty piece of ``mutation``: its table_id and snapshot flag, presence kept."""
    piece = TableMutation()
    if mutation.HasField("table_id"):
        piece.table_id = mutation.table_id
    if mutation.HasField("snapshot"):
        piece.snapshot = mutation.snapshot
    return piece


class _Parts:
    """The part being filled; hands each full part to the caller."""

    def __init__(self, value: PrewriteValue, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._schema: PrewriteValue = PrewriteValue()
        if value.HasField("schema_version"):
            self._schema.schema_version = value.schema_version
        self.empty_size = self._schema.ByteSize()
        self.part = self._new()
        self.size = self.empty_size  # of the part, closed mutations only
        self.changes = 0  # row changes in the part, closed and open pieces

    def _new(self) -> PrewriteValue:
        part = PrewriteValue()
        part.CopyFrom(self._schema)
        return part

    def take(self) -> PrewriteValue:
        """The current part; a new empty one takes its place."""
        part, self.part = self.part, self._new()
        self.size, self.changes = self.empty_size, 0
        return part


def iter_prewrite_parts(value: PrewriteValue, max_bytes: int) -> Iterator[PrewriteValue]:
    """``value``'s changes in parts of at most ``max_bytes`` serialized bytes each (see the module).

    Yields ``value`` itself when it fits. Parts are built one at a time, so a
    caller that serializes and drops each part holds one part beside ``value``.
    Raises :class:`~bridge.errors.ProtocolError` for an inconsistent mutation
    or an obsolete DeleteID/DeletePK change (they carry no row image).
    """
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    parts = _Parts(value, max_bytes)
    # Sizes from the rows' lengths: ByteSize() on protobuf's upb backend
    # serializes the message, a transient copy of a transaction as big as itself.
    measured = [_measure(mutation) for mutation in value.mutations]
    if parts.empty_size + sum(_bytes_field(m.size) for m in measured) <= max_bytes:
        yield value
        return
    for mutation, sizes in zip(value.mutations, measured, strict=True):
        whole = _bytes_field(sizes.size)
        if parts.size + whole <= max_bytes:  # the common case: the mutation fits whole
            parts.part.mutations.add().CopyFrom(mutation)
            parts.size += whole
            parts.changes += len(mutation.sequence)
        elif len(mutation.sequence):
            yield from _split_mutation(mutation, sizes, parts)
        else:  # no changes, yet too big for what is left: it starts the next part
            if parts.changes:
                yield parts.take()
            parts.part.mutations.add().CopyFrom(mutation)
            parts.size += whole
    yield parts.take()  # never empty: a value over max_bytes has a mutation


def _row_costs(rows: Sequence[bytes]) -> list[int]:
    """The serialized size of each row as a field of a TableMutation: tag, length varint, data.

    Computed with ``map`` over C callables (a list comprehension cost ~1 us a
    row): 2 + n, plus one for each 7 bits of n beyond the first 7.
    """
    lengths = list(map(len, rows))
    if not lengths:
        return lengths
    top = max(lengths)
    if top >= 1 << 21:  # rows of 2 MiB or more: rare, one Python step each
        return [1 + _varint_size(n) + n for n in lengths]
    costs = list(map(add, map((2).__add__, lengths), map((0x7F).__lt__, lengths)))
    if top > 0x3FFF:
        costs = list(map(add, costs, map((0x3FFF).__lt__, lengths)))
    return costs


class _Measured(NamedTuple):
    """A mutation's serialized size and each row's share of it."""

    size: int
    inserted: list[int]
    updated: list[int]
    deleted: list[int]


def _measure(mutation: TableMutation) -> _Measured:
    inserted = _row_costs(mutation.inserted_rows)
    updated = _row_costs(mutation.updated_rows)
    deleted = _row_costs(mutation.deleted_rows)
    if len(mutation.deleted_ids) or len(mutation.deleted_pks) or len(UnknownFieldSet(mutation)):
        size = mutation.ByteSize()  # obsolete or unknown fields: rare, measured by protobuf
    else:
        size = (
            _header(mutation).ByteSize()
            + sum(inserted)
            + sum(updated)
            + sum(deleted)
            + _SEQUENCE_ENTRY * len(mutation.sequence)
        )
    return _Measured(size, inserted, updated, deleted)


def _split_mutation(mutation: TableMutation, sizes: _Measured, parts: _Parts) -> Iterator[PrewriteValue]:
    """Add ``mutation``'s changes to ``parts`` piece by piece, yielding every part that fills up.

    One pass over ``sequence`` with the rows' sizes finds where each piece
    ends; a piece's rows are then copied with one slice per row list.
    """
    problem = mutation_problem(mutation)
    if problem:
        raise ProtocolError(f"table id {mutation.table_id}: {problem}")
    sequence = list(mutation.sequence)
    if any(kind not in _ROW_KINDS for kind in set(sequence)):
        list(iter_changes(mutation))  # raises the obsolete type's ProtocolError
    header = _header(mutation)
    header_size = header.ByteSize()
    inserted, updated, deleted = sizes.inserted, sizes.updated, sizes.deleted
    max_bytes = parts.max_bytes
    ins = upd = dele = 0  # next row of each list
    start = (0, 0, 0, 0)  # where the open piece begins: sequence, inserted, updated, deleted
    body = header_size  # serialized size of the open piece
    for position, kind in enumerate(sequence):
        if kind == INSERT:
            cost = inserted[ins] + _SEQUENCE_ENTRY
        elif kind == UPDATE:
            cost = updated[upd] + updated[upd + 1] + _SEQUENCE_ENTRY
        else:
            cost = deleted[dele] + _SEQUENCE_ENTRY
        if parts.changes and parts.size + _bytes_field(body + cost) > max_bytes:
            if position > start[0]:
                _add_piece(parts, mutation, header, start, (position, ins, upd, dele))
                start = (position, ins, upd, dele)
            yield parts.take()
            body = header_size
        body += cost
        parts.changes += 1
        if kind == INSERT:
            ins += 1
        elif kind == UPDATE:
            upd += 2
        else:
            dele += 1
    _add_piece(parts, mutation, header, start, (len(sequence), ins, upd, dele))
    parts.size += _bytes_field(body)


def _add_piece(
    parts: _Parts,
    mutation: TableMutation,
    header: TableMutation,
    start: tuple[int, int, int, int],
    end: tuple[int, int, int, int],
) -> None:
    """Append the changes of ``mutation`` between ``start`` and ``end`` to the current part."""
    piece = parts.part.mutations.add()
    piece.CopyFrom(header)
    piece.sequence.extend(mutation.sequence[start[0] : end[0]])
    if end[1] > start[1]:
        piece.inserted_rows.extend(mutation.inserted_rows[start[1] : end[1]])
    if end[2] > start[2]:
        piece.updated_rows.extend(mutation.updated_rows[start[2] : end[2]])
    if end[3] > start[3]:
        piece.deleted_rows.extend(mutation.deleted_rows[start[3] : end[3]])


def split_prewrite(value: PrewriteValue, max_bytes: int) -> list[PrewriteValue]:
    """All the parts of :func:`iter_prewrite_parts` at once; ``[value]`` when it fits."""
    return list(iter_prewrite_parts(value, max_bytes))


__all__ = ["iter_prewrite_parts", "split_prewrite"]
