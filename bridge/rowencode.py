"""A row codec's ``encode`` as one generated function per table, writing the protobuf wire bytes.

:meth:`bridge.rowcodec.RowCodec.encode_reference` builds a ``Row`` message datum by datum (a
message object, a field set and a check per column) and serializes it: about 10 µs for an
8-column row here. :func:`fast_encoder` gives a function with the same contract that, for the
common values, writes the serialized bytes itself — no loop over columns, no message objects.
:meth:`~bridge.rowcodec.RowCodec.encode` runs it (every producer: the SDK's callers, ``capture``,
the benches):

- signed and unsigned integers, DOUBLE/FLOAT, CHAR/VARCHAR/TEXT and BINARY/VARBINARY/BLOB values
  of the exact Python type the column takes, in range, are written straight to the wire format
  (the checks are the plans' own fast-path checks, inlined);
- NULL in a nullable column is the constant datum ``is_null = true``;
- any other column type (DECIMAL, temporal types, ENUM, SET, JSON, BIT, YEAR) goes through its
  plan's ``encode`` into a scratch ``Datum``, serialized on its own (a repeated message field's
  element is its serialized bytes behind a length);
- anything else — a value off those fast paths, a NULL in a NOT NULL column, a wrong count, text
  that is not UTF-8 — is handed to the reference :meth:`~bridge.rowcodec.RowCodec.encode_reference`,
  which encodes it or raises the error that names the column.

The bytes are those the reference writes (protobuf's encoding is deterministic for these
messages: fields in number order, a oneof member written even when it holds its default);
tests/unit/test_rowencode.py compares the two over every column type.

The source is generated from fixed snippets, column positions and ints only.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from bridge import rowtemporal, rowvalues
from bridge.proto import row_pb2
from bridge.rowvalues import column_label
from bridge.schema import table_name

T = row_pb2.ColumnType
Encoder = Callable[[Sequence[object]], bytes]
# the column plans RowCodec builds on (bridge.rowcodec imports this module: no import back)
_PLANNERS = {**rowvalues.PLANNERS, **rowtemporal.PLANNERS}


class Codec(Protocol):
    """What :func:`fast_encoder` needs of a :class:`bridge.rowcodec.RowCodec`."""

    schema: row_pb2.TableSchema

    def encode_reference(self, values: Sequence[object]) -> bytes: ...


_INT_BITS = {T.TINYINT: 8, T.SMALLINT: 16, T.MEDIUMINT: 24, T.INT: 32, T.BIGINT: 64}
_TEXT = frozenset((T.CHAR, T.VARCHAR, T.TEXT))
_BYTES = frozenset((T.BINARY, T.VARBINARY, T.BLOB))
_LIMITED = frozenset((T.CHAR, T.VARCHAR, T.BINARY, T.VARBINARY))

# Datum field tags (field number << 3 | wire type) and Row's `values` (field 2, length-delimited)
_VALUES = 0x12
_INT, _UINT, _DOUBLE, _DECIMAL, _STRING, _BYTES_TAG, _DATETIME = 0x10, 0x18, 0x21, 0x2A, 0x32, 0x3A, 0x42
_NULL_DATUM = bytes((_VALUES, 2, 0x08, 1))

_ONE_BYTE = tuple(bytes((i,)) for i in range(128))


def varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int below 2**64."""
    if value < 128:
        return _ONE_BYTE[value]
    out = bytearray()
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: int, data: bytes) -> bytes:
    """Field ``tag`` holding ``data`` (the datum of a text or bytes value, before its own frame)."""
    return bytes((tag,)) + varint(len(data)) + data


def _framed(payload: bytes) -> bytes:
    """One element of Row.values: the serialized Datum behind its tag and length."""
    return bytes((_VALUES,)) + varint(len(payload)) + payload


def _scratch(encode: Callable[[row_pb2.Datum, Any], None]) -> Callable[[Any], bytes]:
    """A column without a fast path: its plan's encode into a fresh Datum, serialized."""
    datum_type = row_pb2.Datum

    def element(value: Any) -> bytes:
        datum = datum_type()
        encode(datum, value)
        return _framed(datum.SerializeToString())

    return element


def _datetime_element(value: Any) -> bytes:
    """A naive ``datetime.datetime`` as a Row.values element (its DateTime's zero fields left out)."""
    year = value.year  # 1..9999: one or two varint bytes
    sub = [8, (year & 0x7F) | 0x80, year >> 7] if year >= 128 else [8, year]
    sub += (0x10, value.month, 0x18, value.day)
    hour, minute, second, micro = value.hour, value.minute, value.second, value.microsecond
    if hour:
        sub += (0x20, hour)
    if minute:
        sub += (0x28, minute)
    if second:
        sub += (0x30, second)
    if micro:
        sub.append(0x38)
        while micro >= 128:
            sub.append((micro & 0x7F) | 0x80)
            micro >>= 7
        sub.append(micro)
    return bytes((_VALUES, len(sub) + 2, _DATETIME, len(sub), *sub))


def _zigzag(value: int) -> int:
    return value << 1 if value >= 0 else ((-value) << 1) - 1


def _short(name: str, tag: int) -> str:
    """The expression framing bytes ``name`` as field ``tag`` of a Datum, one length byte when short."""
    short = f"bytes(({_VALUES}, len({name}) + 2, {tag}, len({name}))) + {name}"
    return f"{short} if len({name}) < 126 else framed(ld({tag}, {name}))"


def fast_encoder(codec: Codec) -> Encoder:
    """``codec.encode_reference`` as one generated function for this table (see the module docstring)."""
    schema = codec.schema
    table = table_name(schema)
    columns = list(schema.columns)
    header = row_pb2.Row(column_ids=[c.id for c in columns]).SerializeToString()
    scope: dict[str, Any] = {
        "reference": codec.encode_reference,
        "header": header,
        "NULL": _NULL_DATUM,
        "varint": varint,
        "zigzag": _zigzag,
        "framed": _framed,
        "ld": _length_delimited,
        "pack_double": struct.Struct("<d").pack,
        "isfinite": math.isfinite,
        "Decimal": Decimal,
        "datetime": datetime,
        "datetime_element": _datetime_element,
        "INT": bytes((_INT,)),
        "UINT": bytes((_UINT,)),
        "DOUBLE": bytes((_VALUES, 9, _DOUBLE)),
    }
    lines = [
        "def encode(values):",
        f"    if len(values) != {len(columns)}:",
        "        return reference(values)",
    ]
    lines.append("    try:")
    parts = ["header"]
    for i, column in enumerate(columns):
        kind = column.type
        lines.append(f"        v = values[{i}]")
        on_null = f"p{i} = NULL" if column.nullable else "return reference(values)"
        lines.append(f"        if v is None:\n            {on_null}")
        if kind in _INT_BITS:
            bits = _INT_BITS[kind]
            low, high = (
                (0, (1 << bits) - 1) if column.unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
            )
            number = "v" if column.unsigned else "(v << 1 if v >= 0 else ((-v) << 1) - 1)"
            tag = _UINT if column.unsigned else _INT
            lines += [
                f"        elif type(v) is int and {low} <= v <= {high}:",
                f"            z = {number}",
                f"            if z < 128:\n                p{i} = bytes(({_VALUES}, 2, {tag}, z))",
                "            elif z < 16384:",
                f"                p{i} = bytes(({_VALUES}, 3, {tag}, z & 127 | 128, z >> 7))",
                "            elif z < 2097152:",
                f"                p{i} = bytes(({_VALUES}, 4, {tag}, z & 127 | 128,"
                " z >> 7 & 127 | 128, z >> 14))",
                f"            else:\n                p{i} = framed(bytes(({tag},)) + varint(z))",
            ]
        elif kind in (T.FLOAT, T.DOUBLE):
            lines += [
                "        elif type(v) is float and isfinite(v):",
                f"            p{i} = DOUBLE + pack_double(v)",
            ]
        elif kind in _TEXT or kind in _BYTES:
            limit = column.length if kind in _LIMITED else 0
            within = f" and len(v) <= {limit}" if limit else ""
            if kind in _TEXT:
                lines.append(f"        elif type(v) is str{within}:")
                lines += ["            b = v.encode()", f"            p{i} = {_short('b', _STRING)}"]
            else:
                lines.append(f"        elif type(v) is bytes{within}:")
                lines.append(f"            p{i} = {_short('v', _BYTES_TAG)}")
        elif kind == T.DECIMAL and column.precision > 0:
            # the plan's checks for a Decimal at or below the column's scale (padded with zeros to
            # it, as the plan pads): finite, no more integer digits than declared, not a negative
            # zero (anything else, a longer fraction included: the reference)
            digits, scale = column.precision - column.scale, column.scale
            lines += [
                "        elif type(v) is Decimal and v.is_finite():",
                "            t = format(v, 'f')",
                "            w, _, f = t.partition('.')",
                f"            if len(f) != {scale}:",
                f"                if len(f) > {scale}:",
                "                    return reference(values)",
                f"                t = w + '.' + f + '0' * ({scale} - len(f))",
                f"            if len(w.lstrip('-0')) > {digits}:",
                "                return reference(values)",
                "            if t[0] == '-' and not v:",
                "                return reference(values)",
                "            b = t.encode()",
                f"            p{i} = {_short('b', _DECIMAL)}",
            ]
        elif kind == T.DATETIME:
            unit = 10 ** (6 - column.fsp)
            lines += [
                f"        elif type(v) is datetime and v.tzinfo is None and not v.microsecond % {unit}:",
                f"            p{i} = datetime_element(v)",
            ]
        else:
            scope[f"e{i}"] = _scratch(_PLANNERS[column.type](column_label(table, column), column).encode)
            lines.append("        else:")
            lines.append(f"            p{i} = e{i}(v)")
            parts.append(f"p{i}")
            continue
        lines.append("        else:\n            return reference(values)")
        parts.append(f"p{i}")
    lines += [
        "    except Exception:",  # the reference encodes it or raises the error naming the column
        "        return reference(values)",
        f"    return b''.join(({', '.join(parts)},))",
    ]
    exec("\n".join(lines), scope)  # noqa: S102 - fixed snippets, column positions and ints
    encode: Encoder = scope["encode"]
    return encode
