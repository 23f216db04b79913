"""The row codec: Python values <-> a serialized ``bridge.row.Row``.

A :class:`RowCodec` is built once per table schema and then encodes and
decodes rows of that table. The rules (the table in ``schemas/README.md``):

- a row is a sequence with one value per column, in ``TableSchema.columns``
  order; ``None`` is SQL NULL and is refused for NOT NULL columns;
- each column type maps to one ``Datum`` field and one Python type
  (:mod:`bridge.rowvalues`, :mod:`bridge.rowtemporal`); a value of the wrong type or out of the
  column's range raises :class:`RowValueError` naming table, column and type;
- decoding returns a tuple in schema column order whatever the order of
  ``Row.column_ids``; an unknown, missing or repeated column id, a datum of
  the wrong kind for its column, NULL in a NOT NULL column, or bytes that
  are not a ``Row`` raise :class:`~bridge.errors.ProtocolError` naming the
  table and column.

Encoding then decoding gives back an equal value for every type, with two
documented normalisations: TIMESTAMP decodes as an aware UTC ``datetime``,
SET decodes as its members joined by ``,`` in declaration order; DECIMAL is
padded to the column's scale (exactly, never rounded) and JSON given as a
Python object decodes as its canonical JSON text.

An update is the pair (old image, new image): :meth:`RowCodec.encode_update`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from bridge import rowtemporal, rowvalues
from bridge.errors import ProtocolError
from bridge.proto import row_pb2
from bridge.rowencode import fast_encoder
from bridge.rowtemporal import MySQLDate, MySQLDateTime
from bridge.rowvalues import ColumnPlan, RowValueError, column_label
from bridge.schema import table_name, validate_table_schema

__all__ = ["MySQLDate", "MySQLDateTime", "RowCodec", "RowValueError"]

_Row = row_pb2.Row
_PLANNERS = {**rowvalues.PLANNERS, **rowtemporal.PLANNERS}


def plan_column(table: str, column: row_pb2.Column) -> ColumnPlan:
    """How ``column`` of ``table`` is written and read; ``column`` passed schema validation."""
    return _PLANNERS[column.type](column_label(table, column), column)


class RowCodec:
    """Encodes and decodes the rows of one table at one schema version.

    Building one validates the schema (:class:`bridge.schema.SchemaError`)
    and precomputes a plan per column; keep it for as long as the schema
    holds. Instances are immutable and safe to share between threads.
    """

    __slots__ = (
        "_converters",
        "_encoders",
        "_fast",
        "_fast_encode",
        "_header",
        "_ids",
        "_kinds",
        "_labels",
        "_names",
        "_nullable",
        "_position",
        "_scalar",
        "_table",
        "schema",
    )

    def __init__(self, schema: row_pb2.TableSchema) -> None:
        validate_table_schema(schema)
        self.schema = row_pb2.TableSchema()
        self.schema.CopyFrom(schema)  # later changes to the caller's message do not reach the plan
        self._table = table_name(schema)
        columns = list(schema.columns)
        plans = [plan_column(self._table, c) for c in columns]
        self._encoders = tuple(p.encode for p in plans)
        self._kinds = tuple(p.kind for p in plans)
        # a scalar field that is not set reads as its default, which is falsy: a truthy read
        # proves the oneof holds that field (decode's fast path); message fields always read truthy
        self._scalar = tuple(
            row_pb2.Datum.DESCRIPTOR.fields_by_name[p.kind].message_type is None for p in plans
        )
        self._converters = tuple(p.decode for p in plans)
        self._labels = tuple(p.label for p in plans)
        self._nullable = tuple(c.nullable for c in columns)
        self._names = tuple(c.name for c in columns)
        self._ids = [c.id for c in columns]
        self._position = {c.id: i for i, c in enumerate(columns)}
        # column_ids is the same for every row, so serialize it once; the
        # concatenation of two serialized messages is their merge.
        self._header = _Row(column_ids=self._ids).SerializeToString()
        self._fast: Callable[[Sequence[Any]], tuple[object, ...]] | None = None  # on first decode
        self._fast_encode: Callable[[Sequence[object]], bytes] | None = None  # on first encode

    @property
    def column_names(self) -> tuple[str, ...]:
        return self._names

    def encode(self, values: Sequence[object]) -> bytes:
        """Serialize one row image; ``values`` holds one value per column in order.

        Raises :class:`RowValueError` for a wrong count, a NULL in a NOT NULL
        column, or a value the column's type does not accept.

        Runs the table's generated encoder (:func:`bridge.rowencode.fast_encoder`, built on the
        first call), which writes the bytes :meth:`encode_reference` writes and hands every value
        off its fast paths to it (so the errors are the reference's too).
        """
        fast = self._fast_encode
        if fast is None:
            fast = self._fast_encode = fast_encoder(self)
        return fast(values)

    def encode_reference(self, values: Sequence[object]) -> bytes:
        """:meth:`encode` column by column through each column's plan: the reference the
        generated encoder is checked against and falls back to."""
        if len(values) != len(self._encoders):
            raise RowValueError(
                f"table {self._table}: row has {len(values)} values for {len(self._ids)} columns"
            )
        row = _Row()
        add = row.values.add
        label = ""
        try:
            for encode, nullable, label, value in zip(
                self._encoders, self._nullable, self._labels, values, strict=True
            ):
                if value is None:
                    if not nullable:
                        raise RowValueError(f"{label}: NULL in a NOT NULL column")
                    add().is_null = True
                else:
                    encode(add(), value)
        except UnicodeEncodeError as exc:
            raise RowValueError(f"{label}: text is not encodable as UTF-8 ({exc.reason})") from None
        return self._header + row.SerializeToString()

    def encode_named(self, values: Mapping[str, object]) -> bytes:
        """Like :meth:`encode` with values keyed by column name; every column must be given."""
        unknown = set(values) - set(self._names)
        if unknown:
            raise RowValueError(f"table {self._table}: no column named {sorted(unknown)[0]!r}")
        try:
            return self.encode([values[name] for name in self._names])
        except KeyError as exc:
            raise RowValueError(f"table {self._table}: no value for column {exc.args[0]!r}") from None

    def encode_update(self, old: Sequence[object], new: Sequence[object]) -> tuple[bytes, bytes]:
        """An update's two images, in the order ``TableMutation.updated_rows`` holds them."""
        return self.encode(old), self.encode(new)

    def decode(self, data: bytes) -> tuple[object, ...]:
        """Parse one row image into a tuple in schema column order.

        Raises :class:`~bridge.errors.ProtocolError` naming the table (and the
        column, when one is at fault) for anything that is not a well-formed
        row of this table.
        """
        datums = self._datums(data)
        fast = self._fast
        if fast is None:
            fast = self._fast = self._unrolled()
        try:
            return fast(datums)
        except (ProtocolError, ValueError, ArithmeticError):
            return self._decode_datums(datums)  # raises the error that names the column

    def _decode_datums(self, datums: Sequence[Any]) -> tuple[object, ...]:
        """:meth:`decode` of parsed datums, column by column (the reference of :meth:`_unrolled`)."""
        out: list[object] = []
        append = out.append
        label = ""
        try:
            for datum, kind, scalar, convert, nullable, label in zip(
                datums, self._kinds, self._scalar, self._converters, self._nullable, self._labels, strict=True
            ):
                if scalar:
                    value = getattr(datum, kind)
                    if value:
                        append(value if convert is None else convert(value))
                        continue
                got = datum.WhichOneof("value")
                if got == kind:
                    value = getattr(datum, kind)
                    append(value if convert is None else convert(value))
                elif got == "is_null" and nullable and datum.is_null:
                    append(None)
                else:
                    found = got or "no value"
                    raise ProtocolError(f"{label}: expected {kind} in the row image, found {found}")
        except (ValueError, ArithmeticError) as exc:
            raise ProtocolError(f"{label}: invalid value in the row image: {exc}") from None
        return tuple(out)

    def _unrolled(self) -> Callable[[Sequence[Any]], tuple[object, ...]]:
        """:meth:`_decode_datums` as one generated function without the per-column loop: each
        column's field read by name and converted; NULL in a nullable column is None; another
        falsy scalar read (0, "", no value) or a message field goes through :meth:`_column`. It
        raises where the reference would (the caller then runs the reference for its error). The
        source is built from fixed snippets, ints and the plans' Datum field names (identifiers)."""
        scope: dict[str, Any] = {}
        lines = ["def decode(datums):"]
        names = []
        for i, (kind, scalar, convert) in enumerate(
            zip(self._kinds, self._scalar, self._converters, strict=True)
        ):
            if not kind.isidentifier():
                raise ValueError(f"Datum field {kind!r}")
            scope[f"s{i}"] = functools.partial(self._column, i)
            names.append(f"a{i}")
            if not scalar:
                lines.append(f"    a{i} = s{i}(datums[{i}])")
                continue
            lines += [f"    d = datums[{i}]", f"    x = d.{kind}"]
            # a set is_null proves the oneof holds it: NULL, in a nullable column
            other = f"(None if d.is_null else s{i}(d))" if self._nullable[i] else f"s{i}(d)"
            if convert is None:
                lines.append(f"    a{i} = x if x else {other}")
            else:
                scope[f"c{i}"] = convert
                lines.append(f"    a{i} = c{i}(x) if x else {other}")
        lines.append(f"    return ({', '.join(names)}{',' if len(names) == 1 else ''})")
        exec("\n".join(lines), scope)  # noqa: S102 - fixed snippets, ints and protobuf field names
        decode: Callable[[Sequence[Any]], tuple[object, ...]] = scope["decode"]
        return decode

    def _column(self, i: int, datum: Any) -> object:
        """Column ``i``'s value when its scalar read was falsy or it is a message field."""
        kind = self._kinds[i]
        got = datum.WhichOneof("value")
        if got == kind:
            value = getattr(datum, kind)
            convert = self._converters[i]
            return value if convert is None else convert(value)
        if got == "is_null" and self._nullable[i] and datum.is_null:
            return None
        raise ProtocolError(f"{self._labels[i]}: expected {kind} in the row image, found {got or 'no value'}")

    def decode_sparse(self, data: bytes, positions: Sequence[int]) -> list[object]:
        """One entry per column, only those at ``positions`` decoded (as :meth:`decode` gives them),
        the others None: what a caller that needs a few columns (say, the keys) pays for.

        The whole row is still parsed and checked as :meth:`decode` checks it, except the datums
        of the columns not asked for.
        """
        datums = self._datums(data)
        out: list[object] = [None] * len(self._ids)
        for i in positions:
            datum, kind, convert = datums[i], self._kinds[i], self._converters[i]
            try:
                if self._scalar[i]:  # decode's fast path: a truthy scalar proves the oneof
                    value = getattr(datum, kind)
                    if value:
                        out[i] = value if convert is None else convert(value)
                        continue
                got = datum.WhichOneof("value")
                if got == kind:
                    value = getattr(datum, kind)
                    out[i] = value if convert is None else convert(value)
                    continue
            except (ValueError, ArithmeticError) as exc:
                raise ProtocolError(f"{self._labels[i]}: invalid value in the row image: {exc}") from None
            if not (got == "is_null" and self._nullable[i] and datum.is_null):
                raise ProtocolError(
                    f"{self._labels[i]}: expected {kind} in the row image, found {got or 'no value'}"
                )
        return out

    def decode_named(self, data: bytes) -> dict[str, object]:
        """Like :meth:`decode`, keyed by column name."""
        return dict(zip(self._names, self.decode(data), strict=True))

    def _datums(self, data: bytes) -> Sequence[Any]:
        """The datums of row image ``data`` in schema column order (parsed, not converted)."""
        try:
            row = _Row.FromString(data)
        except DecodeError as exc:
            raise ProtocolError(f"table {self._table}: row image is not a bridge.row.Row: {exc}") from None
        datums: Sequence[Any] = row.values
        # Rows this codec wrote start with its column_ids header; comparing bytes
        # is cheaper than comparing the parsed ids.
        if not (data.startswith(self._header) and len(row.column_ids) == len(self._ids)):
            datums = self._in_schema_order(row)
        elif len(datums) != len(self._ids):
            raise ProtocolError(f"table {self._table}: row has {len(datums)} values for {len(self._ids)} ids")
        return datums

    def _in_schema_order(self, row: row_pb2.Row) -> list[row_pb2.Datum]:
        ids = list(row.column_ids)
        if len(ids) != len(row.values):
            raise ProtocolError(f"table {self._table}: row has {len(row.values)} values for {len(ids)} ids")
        found: dict[int, int] = {}
        for i, column_id in enumerate(ids):
            if column_id not in self._position:
                raise ProtocolError(f"table {self._table}: row holds unknown column id {column_id}")
            if column_id in found:
                raise ProtocolError(f"table {self._table}: row holds column id {column_id} twice")
            found[column_id] = i
        if len(found) != len(self._ids):
            missing = next(c for c in self._ids if c not in found)
            name = self._names[self._position[missing]]
            raise ProtocolError(f"table {self._table}: row lacks column {name!r} (id {missing})")
        values = row.values
        return [values[found[column_id]] for column_id in self._ids]
