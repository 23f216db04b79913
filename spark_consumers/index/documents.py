"""The tantivy schema of a change index, and change images -> tantivy documents.

One schema serves every table, so a new column never needs a new index:

==========  =========================  =================================================
field       tantivy type               holds
==========  =========================  =================================================
``_id``     text, raw, stored          ``db/table/key`` (the unit of upsert and delete)
``_idh``    u64, fast                  BLAKE2b-64 of ``_id``: versions are read by it
``_table``  text, raw, stored, fast    ``db.table``
``_key``    text, raw, stored          the key part of ``_id``
``_ts``     i64, stored, fast          commit_ts of the change the document holds
``_pos``    i64, stored, fast          its position in the transaction
``_live``   bool, indexed, fast        false: a deleted row's tombstone, kept for its version
``_types``  text, stored               the column kinds (``spark_consumers.decode``)
``row``     JSON, raw, stored, fast    every column, typed (below); ``row.status:paid``, ``row.n:>5``
``text``    text, default tokenizer    the table's text columns, for full-text search
==========  =========================  =================================================

Kinds in ``row``: int, double and bool as tantivy's i64/u64, f64 and bool;
date, datetime and timestamp as tantivy dates (RFC 3339, UTC; a DATETIME's
wall-clock time is taken as UTC; a zero date stays text); time as i64
microseconds; decimal as its exact digits (tantivy has no decimal type), json
as the document's text, binary as base64 text, strings as themselves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import tantivy

from spark_consumers.latest import Action, id_hash

__all__ = ["build_schema", "document", "id_hash", "kinds_of", "stored_image", "typed_row"]

DATE_KINDS = frozenset({"date", "datetime", "timestamp"})
TEXT_KINDS = frozenset({"string"})


def build_schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("_id", stored=True, tokenizer_name="raw")
    builder.add_unsigned_field("_idh", stored=False, indexed=True, fast=True)
    builder.add_text_field("_table", stored=True, tokenizer_name="raw", fast=True)
    builder.add_text_field("_key", stored=True, tokenizer_name="raw")
    builder.add_integer_field("_ts", stored=True, indexed=True, fast=True)
    builder.add_integer_field("_pos", stored=True, indexed=False, fast=True)
    builder.add_boolean_field("_live", stored=True, indexed=True, fast=True)
    builder.add_text_field("_types", stored=True, index_option="basic", tokenizer_name="raw")
    builder.add_json_field("row", stored=True, tokenizer_name="raw", fast=True)  # fast: range filters
    builder.add_text_field("text", stored=False, tokenizer_name="default")
    return builder.build()


def _date(value: object, kind: str) -> object:
    if not isinstance(value, str) or len(value) < 10 or value.startswith("0000") or "-00" in value[:10]:
        return value  # a zero or partial date: kept as text
    if kind == "date":
        return value + "T00:00:00Z"
    if kind == "datetime":
        return value + "Z"
    return value.replace("+00:00", "Z")


class RowPlan:
    """What building a document needs of one schema version (a ``types`` text) and one text-field
    setting, worked out once: the date columns and their kinds, the full-text columns."""

    __slots__ = ("dates", "text")

    def __init__(self, kinds: Mapping[str, str], columns: Sequence[str] | None) -> None:
        self.dates = tuple((c, k) for c, k in kinds.items() if k in DATE_KINDS)
        chosen = columns if columns is not None else [c for c, k in kinds.items() if k in TEXT_KINDS]
        self.text = tuple(chosen)

    def row(self, image: Mapping[str, Any]) -> dict[str, Any]:
        """An image's values as the ``row`` JSON field holds them (see the module docstring)."""
        out = {column: value for column, value in image.items() if value is not None}  # JSON: no null
        for column, kind in self.dates:
            value = out.get(column)
            if value is not None:
                out[column] = _date(value, kind)
        return out

    def text_of(self, image: Mapping[str, Any]) -> str:
        """The full-text field: the configured columns, else every string column."""
        return "\n".join([str(v) for v in map(image.get, self.text) if v is not None])


def typed_row(image: Mapping[str, Any], kinds: Mapping[str, str]) -> dict[str, Any]:
    """An image's values as the ``row`` JSON field holds them (see the module docstring)."""
    return RowPlan(kinds, None).row(image)


def stored_image(row: Mapping[str, Any], kinds: Mapping[str, str]) -> dict[str, Any]:
    """A stored ``row`` field back in the change rows' JSON image form (the inverse of
    :meth:`RowPlan.row`): tantivy dates become the DATE / DATETIME / TIMESTAMP texts again."""
    out = dict(row)
    for column, kind in kinds.items():
        value = out.get(column)
        if isinstance(value, datetime) and kind in DATE_KINDS:
            if kind == "date":
                out[column] = value.date().isoformat()
            elif kind == "datetime":
                out[column] = value.replace(tzinfo=None).isoformat()
            else:
                out[column] = value.astimezone(UTC).isoformat()
    return out


@lru_cache(maxsize=4096)
def kinds_of(types: str) -> dict[str, str]:
    """The kinds JSON of a change row, parsed once per distinct text (one per schema version)."""
    parsed: dict[str, str] = json.loads(types)
    return parsed


@lru_cache(maxsize=4096)
def plan_of(types: str, text_columns: tuple[str, ...] | None) -> RowPlan:
    return RowPlan(kinds_of(types), text_columns)


def document(action: Action, text_columns: tuple[str, ...] | None, idh: int) -> tantivy.Document:
    """The document of one action (``idh``: ``id_hash`` of its id): the row, or the tombstone
    of a deleted row. ``text_columns``: the table's configured full-text columns, if any. Built
    from one dict (one call into tantivy, where adding field by field made ten)."""
    fields: dict[str, Any] = {
        "_id": action.doc_id,
        "_idh": idh,
        "_table": f"{action.db}.{action.table}",
        "_key": action.key,
        "_ts": action.version[0],
        "_pos": action.version[1],
        "_live": action.image is not None,
    }
    if action.image is not None:
        plan = plan_of(action.types, text_columns)
        fields["_types"] = action.types
        fields["row"] = plan.row(action.image)
        fields["text"] = plan.text_of(action.image)
    return tantivy.Document.from_dict(fields, _SCHEMA)


_SCHEMA = build_schema()  # the field types from_dict converts by (every index has this schema)
