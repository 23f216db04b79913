"""A table's Avro key and value (envelope) schemas, and its rows as Avro records.

:func:`table_avro` builds a :class:`TableAvro` from one ``TableSchema``
version; callers keep it for as long as that schema holds (building one
costs a few hundred microseconds, using one costs per-column converter
calls only). The schemas it holds are plain JSON-able dicts, the same
object on every call, so the codecs' per-schema caches hit.

Names: the row record is ``<ns>.<db>.<table>.Value``, the key record
``<ns>.<db>.<table>.Key`` and the envelope ``<ns>.<db>.<table>.Envelope``,
every part sanitized to an Avro name. A column whose name is not a valid
Avro name becomes a field with the sanitized name and keeps the original
as the field property ``"bridge.name"``; if the sanitized name collides
with another column's field, the column id is appended (``a_b_7``).

A generated column's field carries ``"bridge.generated"`` (``"VIRTUAL"`` or
``"STORED"``) and ``"bridge.expression"`` (the upstream's generation
expression): its values are in every row image, but a consumer that
recreates the table (``consume --apply``) makes it a generated column and
never writes it.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from bridge.avro.events import SOURCE_SCHEMA
from bridge.avro.rowwriter import RowWriter, Unsupported
from bridge.avro.types import BRIDGE_NAME, NO_DEFAULT, AvroColumn, Converter, column_type, sanitize_name
from bridge.errors import ProtocolError
from bridge.proto import row_pb2
from bridge.schema import key_positions, table_name, validate_table_schema

ENVELOPE_OPS: Final[Mapping[str, str]] = {"insert": "c", "update": "u", "delete": "d"}
"""Envelope ``op`` per change kind; ``"r"`` is reserved for snapshot rows."""

ChangeKind = Literal["insert", "update", "delete"]
BRIDGE_GENERATED = "bridge.generated"
BRIDGE_EXPRESSION = "bridge.expression"


def field_names(schema: row_pb2.TableSchema) -> tuple[str, ...]:
    """The Avro field name of every column of ``schema``, in column order.

    A valid name stays; an invalid one is sanitized; a sanitized name that
    equals another column's field name gets ``_<column id>`` appended. Stable
    across schema versions: a column's field name depends only on its own
    name and id and on which other names exist.
    """
    raw = [c.name for c in schema.columns]
    clean = [sanitize_name(name) for name in raw]
    valid = {name for name, fixed in zip(raw, clean, strict=True) if name == fixed}
    uses = Counter(clean)
    out: list[str] = []
    taken: set[str] = set()
    for column, name, fixed in zip(schema.columns, raw, clean, strict=True):
        if fixed != name and (fixed in valid or uses[fixed] > 1):
            fixed = f"{fixed}_{column.id}"
        while fixed in taken:
            fixed += "_"
        taken.add(fixed)
        out.append(fixed)
    return tuple(out)


class TableAvro:
    """The Avro view of one table schema version (shareable between threads; treat the schema
    dicts as read-only: the codecs cache by their identity).

    Attributes: ``table`` (the ``TableSchema``), ``namespace`` (of the
    table's records), ``row_schema`` (the ``Value`` record), ``key_schema``
    (the ``Key`` record, ``None`` for a table without primary or not-null
    unique key), ``value_schema`` (the ``Envelope`` record), ``fields``
    (field name per column).
    """

    __slots__ = (
        "_columns",
        "_from_avro",
        "_key_columns",
        "_name",
        "_writer",
        "fields",
        "key_schema",
        "namespace",
        "row_schema",
        "table",
        "value_schema",
    )

    def __init__(self, schema: row_pb2.TableSchema, namespace: str = "bridge") -> None:
        validate_table_schema(schema)
        self.table = row_pb2.TableSchema()
        self.table.CopyFrom(schema)
        self._name = table_name(schema)
        self.namespace = ".".join(
            sanitize_name(part) for part in (*namespace.split("."), schema.db, schema.table) if part
        )
        self.fields = field_names(schema)
        mapped = [column_type(c) for c in schema.columns]
        row_fields = [
            _field(name, column, m)
            for name, column, m in zip(self.fields, schema.columns, mapped, strict=True)
        ]
        self._columns: tuple[tuple[str, Converter | None], ...] = tuple(
            (name, m.to_avro) for name, m in zip(self.fields, mapped, strict=True)
        )
        self._from_avro: tuple[tuple[str, Converter | None], ...] = tuple(
            (name, m.from_avro) for name, m in zip(self.fields, mapped, strict=True)
        )
        self.row_schema: dict[str, Any] = {
            "type": "record",
            "name": "Value",
            "namespace": self.namespace,
            "fields": row_fields,
            BRIDGE_NAME: self._name,
        }
        positions = key_positions(schema)
        self._key_columns = tuple((p, *self._columns[p]) for p in positions)
        self.key_schema: dict[str, Any] | None = None
        if positions:
            self.key_schema = {
                "type": "record",
                "name": "Key",
                "namespace": self.namespace,
                "fields": [copy.deepcopy(row_fields[p]) for p in positions],
                BRIDGE_NAME: self._name,
            }
        self.value_schema: dict[str, Any] = {
            "type": "record",
            "name": "Envelope",
            "namespace": self.namespace,
            BRIDGE_NAME: self._name,
            "fields": [
                {"name": "before", "type": ["null", self.row_schema], "default": None},
                {"name": "after", "type": ["null", f"{self.namespace}.Value"], "default": None},
                {"name": "op", "type": "string"},
                {"name": "source", "type": copy.deepcopy(SOURCE_SCHEMA)},
                {"name": "ts_ms", "type": "long"},
            ],
        }

        self._writer: RowWriter | bool | None = False  # built on first use

    def __repr__(self) -> str:
        return f"TableAvro({self.namespace})"

    def row_writer(self) -> RowWriter | None:
        """The :class:`~bridge.avro.rowwriter.RowWriter` of this table (built once), or None
        when its schemas need the dict route (:meth:`key_record`, :meth:`envelope`)."""
        if self._writer is False:
            try:
                self._writer = RowWriter(
                    self.value_schema,
                    self.row_schema,
                    self.key_schema,
                    [convert for _, convert in self._columns],
                    [(position, convert) for position, _, convert in self._key_columns],
                )
            except Unsupported:
                self._writer = None
        return self._writer if isinstance(self._writer, RowWriter) else None

    def row_record(self, values: Sequence[object]) -> dict[str, object]:
        """One row image (rowcodec values in column order) as a ``Value`` record."""
        if len(values) != len(self._columns):
            raise ValueError(
                f"table {self._name}: row has {len(values)} values for {len(self._columns)} columns"
            )
        try:
            return {
                name: value if convert is None or value is None else convert(value)
                for (name, convert), value in zip(self._columns, values, strict=True)
            }
        except (TypeError, ValueError) as exc:
            raise ValueError(f"table {self._name}: {exc}") from None

    def key_record(self, values: Sequence[object]) -> dict[str, object] | None:
        """The ``Key`` record of a full row image; ``None`` for a keyless table."""
        if self.key_schema is None:
            return None
        if len(values) != len(self._columns):
            raise ValueError(
                f"table {self._name}: row has {len(values)} values for {len(self._columns)} columns"
            )
        out: dict[str, object] = {}
        try:
            for position, name, convert in self._key_columns:
                value = values[position]
                out[name] = value if convert is None or value is None else convert(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"table {self._name}: key: {exc}") from None
        return out

    def envelope(
        self,
        kind: ChangeKind,
        before: Sequence[object] | None,
        after: Sequence[object] | None,
        source: Mapping[str, object],
        ts_ms: int,
        *,
        snapshot: bool = False,
    ) -> dict[str, object]:
        """The ``Envelope`` record of one change: inserts carry ``after`` only, deletes
        ``before`` only, updates both; an insert a snapshot read (``snapshot``) has op ``"r"``."""
        op = ENVELOPE_OPS.get(kind)
        if op is None:
            raise ValueError(f"table {self._name}: unknown change kind {kind!r}")
        if (before is None) != (op == "c") or (after is None) != (op == "d"):
            raise ValueError(
                f"table {self._name}: a{'n' if kind == 'insert' else ''} {kind} needs "
                f"{'after' if op == 'c' else 'before' if op == 'd' else 'before and after'} images only"
            )
        return {
            "before": None if before is None else self.row_record(before),
            "after": None if after is None else self.row_record(after),
            "op": "r" if snapshot and op == "c" else op,
            "source": source,
            "ts_ms": ts_ms,
        }

    def values(self, row_record: Mapping[str, object]) -> tuple[object, ...]:
        """A decoded ``Value`` record (as fastavro returns it) back to rowcodec values in column order.

        Raises :class:`~bridge.errors.ProtocolError` naming the table and
        column for a missing field or a datum the column cannot hold.
        """
        if not isinstance(row_record, Mapping):
            raise ProtocolError(f"table {self._name}: expected a row record, got {type(row_record).__name__}")
        out: list[object] = []
        name = ""
        try:
            for name, convert in self._from_avro:
                value = row_record[name]
                out.append(value if convert is None or value is None else convert(value))
        except KeyError:
            raise ProtocolError(f"table {self._name}: the record has no field {name!r}") from None
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise ProtocolError(f"table {self._name}: field {name!r}: {exc}") from None
        return tuple(out)


def _field(name: str, column: row_pb2.Column, mapped: AvroColumn) -> dict[str, Any]:
    field: dict[str, Any] = {"name": name, "type": mapped.avro_type}
    if mapped.default is not NO_DEFAULT:
        field["default"] = mapped.default
    if name != column.name:
        field[BRIDGE_NAME] = column.name
    if column.generated:
        field[BRIDGE_GENERATED] = "STORED" if column.generated == row_pb2.STORED else "VIRTUAL"
        field[BRIDGE_EXPRESSION] = column.generation_expression
    return field


def table_avro(schema: row_pb2.TableSchema, namespace: str = "bridge") -> TableAvro:
    """Build the :class:`TableAvro` of ``schema`` (callers cache it per schema version)."""
    return TableAvro(schema, namespace)
