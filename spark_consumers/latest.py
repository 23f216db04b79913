"""The latest change per document, by (commit_ts, position): what a micro-batch applies.

A change row (``spark_consumers.decode``) becomes one or two
:class:`Action`\\ s on documents identified by ``db/table/key``:

* insert (``c``, ``r``): put the ``after`` image;
* update (``u``): put ``after``; when the key changed, also delete the old
  key's document (its key read from ``before`` with the key's columns);
* delete (``d``): delete the key's document.

A table without a key (its messages have no key) has a document per
distinct row image: the id is a digest of the image's non-null values, so
identical rows are one document, and a row image gaining a NULL column
(``ADD COLUMN ... NULL``) keeps its id.

Every action carries the change's version ``(commit_ts, position)``; of the
actions on one document only the highest version survives
(:func:`latest_per_document`), and a store applies it only if it is higher
than the version the document already has, so a batch replayed after a
crash, or a message delivered twice, changes nothing.

DDL rows that remove a table's rows (``DROP_TABLE``, ``TRUNCATE_TABLE``,
``DROP_DATABASE``, the old name of ``RENAME_TABLE``) become :class:`Floor`\\ s:
every document of the table below that version goes, and changes below it
are ignored from then on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

import orjson

Version = tuple[int, int]
_loads = orjson.loads  # the change rows' JSON texts: ~4x the standard library's decoder
FLOOR_KINDS = frozenset({"DROP_TABLE", "TRUNCATE_TABLE", "DROP_DATABASE", "RENAME_TABLE"})
ROW_OPS = frozenset({"c", "r", "u", "d"})
SCHEMA_DDL_KINDS = frozenset({"CREATE_TABLE", "ALTER_TABLE", "RENAME_TABLE", "TRUNCATE_TABLE"})


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~1 us more per change
class Action:
    """Put ``image`` (None: delete) as document ``doc_id`` of ``db.table`` at ``version``."""

    doc_id: str
    db: str
    table: str
    key: str
    version: Version
    image: dict[str, Any] | None
    types: str
    # a change moved to a renamed table's new name: the table it was a change of, and its own version
    # (a document moved from the index at the rename must not win over a newer change of the batch)
    origin_table: str = ""
    origin: Version = (-1, -1)

    @property
    def table_name(self) -> str:
        return f"{self.db}.{self.table}"


@dataclass(frozen=True, slots=True)
class Floor:
    """Documents of ``db.table`` (every table of ``db`` when ``table`` is "") below ``version`` go.
    A rename's floor names the new table (``to_db``, ``to_table``): the documents move there,
    at the rename's version, instead of going."""

    db: str
    table: str
    version: Version
    to_db: str = ""
    to_table: str = ""

    def covers(self, db: str, table: str) -> bool:
        return db == self.db and (not self.table or table == self.table)


def id_hash(text: str) -> int:
    """BLAKE2b-64 of a document id or key part (the same in every process, unlike ``hash``)."""
    return int.from_bytes(blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def key_text(values: Sequence[Any]) -> str:
    """The key part of a document id: the value itself for a one-column key, else a JSON array."""
    if len(values) == 1 and not isinstance(values[0], dict | list):
        return str(values[0])
    return json.dumps(list(values), separators=(",", ":"), ensure_ascii=False)


def image_digest(image: Mapping[str, Any]) -> str:
    """The key part for a keyless table's row: a digest of its non-null values."""
    items = sorted((k, v) for k, v in image.items() if v is not None)
    text = json.dumps(items, separators=(",", ":"), ensure_ascii=False)
    return "#" + blake2b(text.encode("utf-8"), digest_size=8).hexdigest()


def document_keys(
    op: str, key_json: str | None, before_json: str | None, after_json: str | None
) -> list[str]:
    """The key parts of the documents a row change touches: the document it puts (or deletes)
    first, then the old key's document of an update that changed the key. An insert into a keyed
    table parses only its key (the shard router calls this for every row)."""
    key = _loads(key_json) if key_json else None
    if op == "d":
        if key is not None:
            return [key_text(list(key.values()))]
        return [image_digest(_loads(before_json))] if before_json else []
    if after_json is None:  # a key-only (oversize) change: the row changed, how is unknown
        return []
    new = key_text(list(key.values())) if key is not None else image_digest(_loads(after_json))
    if op == "u" and before_json:
        before = _loads(before_json)
        old = image_digest(before) if key is None else key_text([before.get(c) for c in key])
        if old != new:
            return [new, old]
    return [new]


def row_actions(
    db: str,
    table: str,
    op: str,
    key_json: str | None,
    before_json: str | None,
    after_json: str | None,
    types: str,
    version: Version,
) -> list[Action]:
    """The actions of one row change (see the module docstring)."""
    parts = document_keys(op, key_json, before_json, after_json)
    if not parts:
        return []
    prefix = f"{db}/{table}/"
    image = None if op == "d" or after_json is None else _loads(after_json)
    out = [Action(prefix + parts[0], db, table, parts[0], version, image, types)]
    out.extend(Action(prefix + old, db, table, old, version, None, types) for old in parts[1:])
    return out


def ddl_floor(db: str, table: str, op: str, before_json: str | None, version: Version) -> Floor | None:
    if op not in FLOOR_KINDS:
        return None
    if op == "RENAME_TABLE":
        old = json.loads(before_json) if before_json else {}
        if not old:
            return None
        return Floor(str(old.get("old_db") or db), str(old.get("old_table") or ""), version, db, table)
    return Floor(db, "" if op == "DROP_DATABASE" else table, version)


@dataclass
class BatchChanges:
    """A micro-batch reduced: the surviving action per document and the floors."""

    actions: dict[str, Action]
    floors: list[Floor]
    rows: int = 0
    max_commit_ts: int = 0


def latest_per_document(rows: Iterable[Mapping[str, Any]]) -> BatchChanges:
    """Reduce change rows (mappings with the data source's columns) to :class:`BatchChanges`."""
    out = BatchChanges({}, [])
    for row in rows:
        out.rows += 1
        version = (int(row["commit_ts"]), int(row["position"]))
        out.max_commit_ts = max(out.max_commit_ts, version[0])
        op, db, table = row["op"], row["db"], row["table"]
        if op not in ROW_OPS:
            floor = ddl_floor(db, table, op, row.get("before"), version)
            if floor is not None:
                out.floors.append(floor)
            continue
        keep_latest(
            out.actions,
            row_actions(db, table, op, row["key"], row["before"], row["after"], row["types"], version),
        )
    return apply_floors(out)


def keep_latest(actions: dict[str, Action], new: Iterable[Action]) -> None:
    """Of the actions on one document keep the one with the highest version."""
    for act in new:
        held = actions.get(act.doc_id)
        if held is None or held.version < act.version:
            actions[act.doc_id] = act


def apply_floors(batch: BatchChanges) -> BatchChanges:
    """Let the batch's floors hide (or, for a rename, move) its older actions; ``batch``, changed."""
    for floor in sorted(batch.floors, key=lambda f: f.version):  # in order: t -> t2 -> t3 moves twice
        _apply_floor(batch.actions, floor)
    return batch


def _apply_floor(actions: dict[str, Action], floor: Floor) -> None:
    """A floor in the batch hides the batch's older changes of its table; a rename's moves them
    to the new name at the rename's version, unless a newer change of the new name is there."""
    for name, act in list(actions.items()):
        if not floor.covers(act.db, act.table) or act.version >= floor.version:
            continue
        del actions[name]
        if floor.to_table:
            moved = Action(f"{floor.to_db}/{floor.to_table}/{act.key}", floor.to_db, floor.to_table, act.key,
                           floor.version, act.image, act.types, act.origin_table or act.table_name,
                           act.origin if act.origin_table else act.version)  # fmt: skip
            held = actions.get(moved.doc_id)
            if held is None or held.version < moved.version:
                actions[moved.doc_id] = moved


def moved_changes(batch: BatchChanges, floor: Floor) -> dict[str, Version]:
    """key part -> version of the batch's own changes of ``floor``'s table that its rename moved:
    a document of the old name found in a store at a lower version is not moved (the change is)."""
    name = f"{floor.db}.{floor.table}"
    return {a.key: a.origin for a in batch.actions.values() if a.origin_table == name}


def newest_columns(
    batch: BatchChanges, ddl: Mapping[str, tuple[str, Version]]
) -> dict[str, tuple[str, Version]]:
    """table -> (column kinds JSON, version) of the newest schema version the batch shows for it,
    from its changes and from ``ddl`` (the DDL rows that leave a table's columns behind)."""
    out = dict(ddl)
    for act in batch.actions.values():
        held = out.get(act.table_name)
        if held is None or held[1] < act.version:
            out[act.table_name] = (act.types, act.version)
    return out


def ddl_columns(rows: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, Version]]:
    """table -> (column kinds, version) of the batch's DDL that leave a table's columns behind."""
    out: dict[str, tuple[str, Version]] = {}
    for row in rows:
        if row["op"] in ROW_OPS or row["op"] not in SCHEMA_DDL_KINDS or row["types"] in ("{}", None):
            continue
        version = (int(row["commit_ts"]), int(row["position"]))
        name = f"{row['db']}.{row['table']}"
        if name not in out or out[name][1] < version:
            out[name] = (row["types"], version)
    return out
