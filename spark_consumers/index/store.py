"""A tantivy change index that applies micro-batches idempotently.

:meth:`ChangeIndex.apply` takes a reduced batch (``spark_consumers.latest``)
and, before returning, commits it: an action is applied only if its version
is above the version its document holds (deleted rows keep a tombstone
document with their version, so an older change replayed later cannot bring
them back) and not below its table's floor. The index job calls it inside
``foreachBatch``, so the index commit happens before Spark commits the
batch's offsets; a crash between the two replays the batch, which then
changes nothing.

Floors (dropped, truncated, renamed-away tables) are kept in
``floors.json`` beside the index, written after the index commit that
applied them (a crash in between replays the batch and writes it again).
One writer per index: tantivy holds a lock file while a :class:`ChangeIndex`
is open.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tantivy

from spark_consumers.index.documents import build_schema, document, id_hash, kinds_of, stored_image
from spark_consumers.latest import Action, BatchChanges, Floor, Version, moved_changes

log = logging.getLogger(__name__)

FLOORS_FILE = "floors.json"
TABLES_FILE = "tables.json"
WRITER_HEAP = 128 * 1024 * 1024
LOOKUP_CHUNK = 20_000


def open_index(path: Path) -> tantivy.Index:
    """The index at ``path``, created (with its directory) when absent."""
    path.mkdir(parents=True, exist_ok=True)
    if tantivy.Index.exists(str(path)):
        return tantivy.Index.open(str(path))
    return tantivy.Index(build_schema(), path=str(path))


class ChangeIndex:
    """See the module docstring. ``text_columns``: ``db.table`` -> its full-text columns."""

    def __init__(self, path: Path, text_columns: Mapping[str, Sequence[str]] | None = None) -> None:
        self.path = path
        self.index = open_index(path)
        self.schema = self.index.schema
        self.text_columns = {table: tuple(columns) for table, columns in (text_columns or {}).items()}
        self.writer = self.index.writer(heap_size=WRITER_HEAP, num_threads=1)
        self.floors = self._load_floors()
        self.tables = table_columns(path)

    def _load_floors(self) -> list[Floor]:
        file = self.path / FLOORS_FILE
        if not file.exists():
            return []
        return [
            Floor(f["db"], f["table"], (f["ts"], f["pos"]), f.get("to_db", ""), f.get("to_table", ""))
            for f in json.loads(file.read_text())
        ]

    def _save(self, name: str, data: object) -> None:
        tmp = self.path / (name + ".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path / name)

    def _save_floors(self) -> None:
        data = [
            {"db": f.db, "table": f.table, "ts": f.version[0], "pos": f.version[1]}
            | ({"to_db": f.to_db, "to_table": f.to_table} if f.to_table else {})
            for f in self.floors
        ]
        self._save(FLOORS_FILE, data)

    def _note_columns(self, columns: Mapping[str, tuple[str, Version]]) -> bool:
        changed = False
        for table, (types, version) in columns.items():
            held = self.tables.get(table)
            if held is None or (held["ts"], held["pos"]) < version:
                self.tables[table] = {"kinds": json.loads(types), "ts": version[0], "pos": version[1]}
                changed = True
        return changed

    def versions(self, hashes: list[int]) -> dict[int, Version]:
        """The version each document of ``hashes`` (``id_hash`` of its id) holds; absent ones are missing."""
        self.index.reload()
        searcher = self.index.searcher()
        out: dict[int, Version] = {}
        for at in range(0, len(hashes), LOOKUP_CHUNK):
            chunk = hashes[at : at + LOOKUP_CHUNK]
            query = tantivy.Query.term_set_query(self.schema, "_idh", chunk)
            hits = [addr for _, addr in searcher.search(query, limit=len(chunk), count=False).hits]
            if not hits:
                continue
            found = searcher.fast_field_values("_idh", hits)
            ts = searcher.fast_field_values("_ts", hits)
            pos = searcher.fast_field_values("_pos", hits)
            for h, t, p in zip(found, ts, pos, strict=True):
                version = (int(t or 0), int(p or 0))
                out[int(h or 0)] = max(out.get(int(h or 0), version), version)
        return out

    def floor_of(self, act: Action) -> Version | None:
        covering = [f.version for f in self.floors if f.covers(act.db, act.table)]
        return max(covering) if covering else None

    def apply(
        self, batch: BatchChanges, columns: Mapping[str, tuple[str, Version]] | None = None
    ) -> tuple[int, int]:
        """Apply and commit ``batch``; (documents put, tombstones put). Nothing is left uncommitted.
        ``columns`` (``latest.newest_columns``) updates ``tables.json``: each table's columns now."""
        new_floors = sorted((f for f in batch.floors if f not in self.floors), key=lambda f: f.version)
        for floor in new_floors:
            if floor.to_table:  # committed before the next floor: a rename's copies must be visible
                self._move_renamed(floor, moved_changes(batch, floor))
            self._drop_below(floor)
            self.floors.append(floor)
            if floor.to_table:
                self.writer.commit()
        hashes = {doc_id: id_hash(doc_id) for doc_id in batch.actions}
        held = self.versions(list(hashes.values()))
        put = deleted = 0
        for act in batch.actions.values():
            current = held.get(hashes[act.doc_id])
            lowest = self.floor_of(act) if self.floors else None
            if (current is not None and current >= act.version) or (
                lowest is not None and act.version < lowest
            ):
                continue
            if current is not None:
                self.writer.delete_documents_by_term("_id", act.doc_id)
            doc = document(act, self.text_columns.get(act.table_name), hashes[act.doc_id])
            self.writer.add_document(doc)
            put += act.image is not None
            deleted += act.image is None
        self.writer.commit()
        if new_floors:
            self._save_floors()
        if self._note_columns(columns or {}):
            self._save(TABLES_FILE, self.tables)
        return put, deleted

    def _move_renamed(self, floor: Floor, newer: Mapping[str, Version]) -> None:
        """Put the live documents of a renamed table below the rename under the new name, at the
        rename's version (a newer document of the new name stays, and so does a document the
        batch itself changed later: ``newer``, key part -> that change's version, which then moves).
        A replay after the commit finds nothing left under the old name."""
        self.index.reload()
        searcher = self.index.searcher()
        query = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, self._below(floor)), (tantivy.Occur.Must, self._live_query())]
        )
        total = int(getattr(searcher.search(query, limit=1, count=True), "count", 0) or 0)
        moved = []
        for _, addr in searcher.search(query, limit=max(total, 1)).hits if total else []:
            stored = searcher.doc(addr).to_dict()
            types = stored["_types"][0]
            key = stored["_key"][0]
            if newer.get(key, (-1, -1)) > (stored["_ts"][0], stored["_pos"][0]):
                continue
            image = stored_image((stored.get("row") or [{}])[0], kinds_of(types))
            moved.append(Action(f"{floor.to_db}/{floor.to_table}/{key}", floor.to_db, floor.to_table, key,
                                floor.version, image, types))  # fmt: skip
        held = self.versions([id_hash(a.doc_id) for a in moved])
        for act in moved:
            current = held.get(id_hash(act.doc_id))
            if current is not None and current >= act.version:
                continue
            if current is not None:
                self.writer.delete_documents_by_term("_id", act.doc_id)
            self.writer.add_document(
                document(act, self.text_columns.get(act.table_name), id_hash(act.doc_id))
            )
        log.info("%s.%s renamed to %s.%s: %d documents moved", floor.db, floor.table, floor.to_db,
                 floor.to_table, len(moved))  # fmt: skip

    def _live_query(self) -> tantivy.Query:
        return tantivy.Query.term_query(self.schema, "_live", True)

    def _below(self, floor: Floor) -> tantivy.Query:
        below = tantivy.Query.range_query(
            self.schema, "_ts", tantivy.FieldType.Integer, None, floor.version[0], include_upper=False
        )
        if floor.table:
            table = tantivy.Query.term_query(self.schema, "_table", f"{floor.db}.{floor.table}")
        else:
            table = tantivy.Query.regex_query(self.schema, "_table", _regex_escape(floor.db) + r"\..*")
        return tantivy.Query.boolean_query([(tantivy.Occur.Must, below), (tantivy.Occur.Must, table)])

    def _drop_below(self, floor: Floor) -> None:
        self.writer.delete_documents_by_query(self._below(floor))

    def close(self) -> None:
        self.writer.wait_merging_threads()


def table_columns(path: Path) -> dict[str, dict[str, Any]]:
    """``tables.json`` of an index: table -> {"kinds": column kinds, "ts", "pos"} of the newest
    schema version seen (documents written before a DROP COLUMN may still hold the column)."""
    file = path / TABLES_FILE
    return dict(json.loads(file.read_text())) if file.exists() else {}


def _regex_escape(text: str) -> str:
    return "".join("\\" + c if not c.isalnum() and c != "_" else c for c in text)
