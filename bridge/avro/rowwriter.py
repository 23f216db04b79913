"""Keys and envelopes written straight from rowcodec tuples: the Kafka sink's per-row path.

:meth:`TableAvro.key_record` and :meth:`TableAvro.envelope` build dicts (a
row record per image, the source record, the envelope) that the compiled
writer then reads back field by field. :class:`RowWriter` writes the same
Avro bodies from the tuples directly, with what a transaction's messages
share encoded once (:meth:`RowWriter.source`): the bytes are those of the
dict route (``tests/unit/test_avro_rowwriter.py`` compares them), and
anything it does not take (a wrong kind or image, a datum outside the
compiled writer's rules, a converter's error) raises :class:`Fallback`,
after which the caller takes the dict route, which writes the message or
raises the error that names the problem.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from bridge.avro.events import SOURCE_SCHEMA
from bridge.avro.primitives import Fallback, varint, write_string
from bridge.avro.types import Converter

# the compiler's parts, shared within the package: a tuple writer is its records with other reads
from bridge.avro.writer import Sources, Unsupported, Write, _Compiler, _record_writer

__all__ = ["FALLBACK_ERRORS", "Fallback", "RowWriter", "Unsupported"]

# what a RowWriter call may raise for a change it does not take: take the dict route then
FALLBACK_ERRORS = (
    Fallback,
    KeyError,
    TypeError,
    ValueError,
    OverflowError,
    IndexError,
    AttributeError,
    ArithmeticError,
    struct.error,
)

# the envelope's fields and the source record's, in the order this module writes them
_ENVELOPE = ("before", "after", "op", "source", "ts_ms")
_SOURCE = (
    ("cluster_id", "long"),
    ("db", "string"),
    ("table", "string"),
    ("start_ts", "long"),
    ("commit_ts", "long"),
    ("pos", "int"),
    ("last", "boolean"),
)
# op as an Avro string (length 1, zig-zag 2), per change kind; a snapshot insert is "r"
_OPS = {"insert": b"\x02c", "update": b"\x02u", "delete": b"\x02d"}
_SNAPSHOT_OP = b"\x02r"
_INT_MAX = (1 << 31) - 1
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1


class RowWriter:
    """The Avro bodies of one table version's keys and envelopes (no framing header).

    Built from a :class:`~bridge.avro.TableAvro`'s schemas and per-column converters; raises
    :class:`Unsupported` when the schemas are not the layout this writes (the caller then keeps
    the dict route for the table).
    """

    __slots__ = ("_key", "_row", "_width")

    def __init__(
        self,
        value_schema: dict[str, Any],
        row_schema: dict[str, Any],
        key_schema: dict[str, Any] | None,
        columns: Sequence[Converter | None],
        key_columns: Sequence[tuple[int, Converter | None]],
    ) -> None:
        fields = value_schema.get("fields", [])
        if tuple(f.get("name") for f in fields) != _ENVELOPE:
            raise Unsupported("an envelope of other fields")
        source = fields[3]["type"]
        if not isinstance(source, dict) or [(f["name"], f["type"]) for f in source["fields"]] != list(
            _SOURCE
        ):
            raise Unsupported("a source record of other fields")
        if source["fields"] != SOURCE_SCHEMA["fields"] or fields[4]["type"] != "long":
            raise Unsupported("a source record or ts_ms other than bridge.Source's")
        self._width = len(columns)
        self._row: Write = compile_tuple_writer(row_schema, list(enumerate(columns)))
        self._key: Write | None = None
        if key_schema is not None:
            self._key = compile_tuple_writer(key_schema, key_columns)

    def key(self, header: bytes, values: tuple[object, ...]) -> bytes:
        """``header`` + the ``Key`` record of a full row image (the table has a key)."""
        if self._key is None or len(values) != self._width:
            raise Fallback
        out = bytearray(header)
        self._key(out, values)
        return bytes(out)

    @staticmethod
    def source(cluster_id: int, db: str, table: str, start_ts: int, commit_ts: int) -> bytes:
        """The source record's fields before ``pos``: the same for every change of one table in
        one transaction (:class:`Fallback` for a number outside Avro's long)."""
        if not (_LONG_MIN <= cluster_id <= _LONG_MAX and _LONG_MIN <= start_ts <= commit_ts <= _LONG_MAX):
            raise Fallback
        out = bytearray()
        varint(out, cluster_id)
        write_string(out, db)
        write_string(out, table)
        varint(out, start_ts)
        varint(out, commit_ts)
        return bytes(out)

    @staticmethod
    def tail(last: bool, ts_ms: int) -> bytes:
        """What follows ``pos``: the source's ``last`` and the envelope's ``ts_ms``."""
        if not _LONG_MIN <= ts_ms <= _LONG_MAX:
            raise Fallback
        out = bytearray(b"\x01" if last else b"\x00")
        varint(out, ts_ms)
        return bytes(out)

    def envelope(
        self,
        header: bytes,
        kind: str,
        snapshot: bool,
        before: tuple[object, ...] | None,
        after: tuple[object, ...] | None,
        source: bytes,
        pos: int,
        tail: bytes,
    ) -> bytes:
        """``header`` + the ``Envelope`` record of one change (as :meth:`TableAvro.envelope` with
        ``source_record(...)`` of ``source``, ``pos`` and ``tail``)."""
        op = _OPS.get(kind)
        if (
            op is None
            or (before is None) != (kind == "insert")
            or (after is None) != (kind == "delete")
            or not 0 <= pos <= _INT_MAX
        ):
            raise Fallback
        width = self._width
        out = bytearray(header)
        if before is None:
            out.append(0)
        elif len(before) != width:
            raise Fallback
        else:
            out.append(2)
            self._row(out, before)
        if after is None:
            out.append(0)
        elif len(after) != width:
            raise Fallback
        else:
            out.append(2)
            self._row(out, after)
        out += _SNAPSHOT_OP if snapshot and kind == "insert" else op
        out += source
        if pos < 64:
            out.append(pos << 1)
        else:
            varint(out, pos)
        out += tail
        return bytes(out)


def compile_tuple_writer(schema: dict[str, Any], sources: Sources) -> Write:
    """A writer of the record ``schema`` whose datum is a tuple: field ``i`` is
    ``convert(values[index])`` for ``(index, convert) = sources[i]`` (``None`` values pass
    unconverted; ``convert`` None: unchanged). The bytes are what :mod:`bridge.avro.writer`'s
    ``compile_writer`` writer gives for the record built that way; it raises :class:`Fallback` (or
    what a converter raises) for a datum it does not take, and :class:`Unsupported` for a schema
    ``compile_writer`` refuses."""
    try:
        compiler = _Compiler()
        _, space, holder = compiler.define(schema, "")
        fields = [(f["name"], f["type"], compiler.compile(f["type"], space)) for f in schema["fields"]]
    except (KeyError, TypeError) as exc:
        raise Unsupported(f"malformed schema: {exc!r}") from None
    if schema.get("type") != "record" or len(fields) != len(sources):
        raise Unsupported("a tuple writer needs a record and one source per field")
    write = _record_writer(fields, sources)
    holder.append(write)  # a field referring to the record itself writes a dict (never here)
    return write
