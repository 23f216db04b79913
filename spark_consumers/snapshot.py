"""The snapshot consumer's store: the latest row per key of each table, as Parquet.

Layout under the snapshot directory, one folder per table::

    <db>.<table>/rows.parquet        the table now: its columns, typed, plus _key, _commit_ts, _position
    <db>.<table>/tombstones.parquet  deleted keys with the version of the delete (for idempotence)
    <db>.<table>/columns.json        the column kinds of the newest schema version seen, and its version

A micro-batch rewrites the files of the tables it touched (each written to a
temporary name and renamed over the old one): the rows of keys it did not
touch are carried over with Arrow, the touched keys get the batch's latest
change if that is newer than what the files hold. Like the index, a replayed
batch changes nothing. A dropped or truncated table's folder is emptied of rows below the DDL's
version; a renamed table's rows below the rename move to the new name's folder first.

Column types: int -> int64, double -> float64, bool -> bool, date -> date32,
datetime -> timestamp[us], timestamp -> timestamp[us, UTC], time -> int64
microseconds, binary -> binary; decimal (its exact digits), json and
strings -> string. A zero date (MySQL only) has no Arrow value and is null.
Columns follow the newest schema version: an added column is null in rows
written before it, a dropped column disappears.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bridge.errors import UserError
from spark_consumers.index.documents import kinds_of
from spark_consumers.latest import Action, BatchChanges, Floor, Version, moved_changes

ARROW_TYPES: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "double": pa.float64(),
    "bool": pa.bool_(),
    "date": pa.date32(),
    "datetime": pa.timestamp("us"),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "time": pa.int64(),
    "bytes": pa.binary(),
}
META = [("_key", pa.string()), ("_commit_ts", pa.int64()), ("_position", pa.int32())]
TOMBSTONES = pa.schema(META)


def arrow_value(value: Any, kind: str) -> Any:
    """A JSON image value as the Arrow column of its kind takes it (a value read back from the
    snapshot's own files, already typed, is taken as it is)."""
    if value is None or not isinstance(value, str):
        return float(value) if kind == "double" and isinstance(value, int) else value
    try:
        if kind == "date":
            return date.fromisoformat(value)
        if kind in ("datetime", "timestamp"):
            return datetime.fromisoformat(value)
        if kind == "bytes":
            return base64.b64decode(value)
    except ValueError:
        return None  # a zero date
    if kind == "double" and isinstance(value, int):
        return float(value)
    return value


def table_schema(kinds: Mapping[str, str]) -> pa.Schema:
    return pa.schema([(c, ARROW_TYPES.get(k, pa.string())) for c, k in kinds.items()] + META)


def _write(table: pa.Table, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    pq.write_table(table, tmp)
    os.replace(tmp, path)


class TableSnapshot:
    """One table's folder (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.rows_path = folder / "rows.parquet"
        self.tombstones_path = folder / "tombstones.parquet"
        self.columns_path = folder / "columns.json"

    def columns(self) -> tuple[dict[str, str], Version, Version | None]:
        """The kinds of the newest schema version seen, that version, and the table's floor."""
        if not self.columns_path.exists():
            return {}, (-1, -1), None
        saved = json.loads(self.columns_path.read_text())
        floor: Version | None = (saved["floor"][0], saved["floor"][1]) if saved.get("floor") else None
        return dict(saved["kinds"]), (saved["ts"], saved["pos"]), floor

    def _read(self, path: Path, schema: pa.Schema) -> pa.Table:
        if not path.exists():
            return schema.empty_table()
        table = pq.read_table(path)
        columns = []
        for field in schema:
            column = table[field.name] if field.name in table.column_names else pa.nulls(len(table))
            try:
                columns.append(column.cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise UserError(
                    f"snapshot {self.folder.name}: column {field.name} changed its type ({exc}); "
                    "rebuild the snapshot from an empty checkpoint"
                ) from None
        return pa.Table.from_arrays(columns, schema=schema)

    def apply(self, actions: list[Action], kinds: dict[str, str], floor: Version | None) -> None:
        schema = table_schema(kinds)
        rows = self._read(self.rows_path, schema)
        tombs = self._read(self.tombstones_path, TOMBSTONES)
        if floor is not None:
            rows = rows.filter(_at_least(rows, floor))
            tombs = tombs.filter(_at_least(tombs, floor))
        held = _versions(rows) | _versions(tombs)
        fresh = [
            a
            for a in actions
            if held.get(a.key, (-1, -1)) < a.version and (floor is None or a.version >= floor)
        ]
        touched = pa.array([a.key for a in fresh], pa.string())
        rows = rows.filter(pc.invert(pc.is_in(rows["_key"], value_set=touched)))
        tombs = tombs.filter(pc.invert(pc.is_in(tombs["_key"], value_set=touched)))
        live = [a for a in fresh if a.image is not None]
        new_rows = {
            c: [arrow_value(a.image.get(c) if a.image else None, k) for a in live] for c, k in kinds.items()
        }
        new_rows |= _meta(live)
        dead = [a for a in fresh if a.image is None]
        self.folder.mkdir(parents=True, exist_ok=True)
        _write(pa.concat_tables([rows, pa.Table.from_pydict(new_rows, schema=schema)]), self.rows_path)
        _write(
            pa.concat_tables([tombs, pa.Table.from_pydict(_meta(dead), schema=TOMBSTONES)]),
            self.tombstones_path,
        )

    def save_columns(self, kinds: Mapping[str, str], version: Version, floor: Version | None) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        saved = {"kinds": kinds, "ts": version[0], "pos": version[1], "floor": floor}
        tmp = self.columns_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(saved))
        os.replace(tmp, self.columns_path)


def _meta(actions: list[Action]) -> dict[str, list[Any]]:
    return {
        "_key": [a.key for a in actions],
        "_commit_ts": [a.version[0] for a in actions],
        "_position": [a.version[1] for a in actions],
    }


def _at_least(table: pa.Table, version: Version) -> pa.ChunkedArray:
    return pc.greater_equal(table["_commit_ts"], version[0])


def _versions(table: pa.Table) -> dict[str, Version]:
    keys, ts, pos = (table[c].to_pylist() for c in ("_key", "_commit_ts", "_position"))
    return {k: (t, p) for k, t, p in zip(keys, ts, pos, strict=True)}


class Snapshot:
    """The snapshot directory: applies reduced micro-batches table by table."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)

    def table(self, name: str) -> TableSnapshot:
        return TableSnapshot(self.path / name.replace("/", "_"))

    def apply(self, batch: BatchChanges, columns: Mapping[str, tuple[str, Version]]) -> int:
        """Apply ``batch``; ``columns``: table -> (kinds JSON, version) of the newest schema version
        the batch shows (``latest.newest_columns``). Returns the number of tables rewritten."""
        for floor in sorted((f for f in batch.floors if f.to_table), key=lambda f: f.version):
            self._move_renamed(floor, columns, moved_changes(batch, floor))
        by_table: dict[str, list[Action]] = {}
        for act in batch.actions.values():
            by_table.setdefault(act.table_name, []).append(act)
        names = set(by_table) | set(columns) | {f"{f.db}.{f.table}" for f in batch.floors if f.table}
        names |= {p.name for f in batch.floors if not f.table for p in self.path.glob(f"{f.db}.*")}
        for name in sorted(names):
            self._apply_table(name, by_table.get(name, []), columns.get(name), batch.floors)
        return len(names)

    def _move_renamed(
        self, floor: Floor, columns: Mapping[str, tuple[str, Version]], newer: Mapping[str, Version]
    ) -> None:
        """Rows of a renamed table below the rename go to the new name's files at the rename's
        version (a newer row of the new name stays), then the old name's floor drops them. In
        version order, each written before the next: a chain of renames moves them on. A replay
        after the old table was floored finds nothing to move; one after a crash between the two
        writes finds the new name holding them at the same version, and changes nothing. A row the
        batch itself changed later (``newer``) is not moved: that change is, at the same version."""
        old = self.table(f"{floor.db}.{floor.table}")
        kinds, version, _ = old.columns()
        if not old.rows_path.exists():
            return
        rows = old._read(old.rows_path, table_schema(kinds))
        below = [
            r
            for r in rows.filter(pc.less(rows["_commit_ts"], floor.version[0])).to_pylist()
            if newer.get(r["_key"], (-1, -1)) <= (r["_commit_ts"], r["_position"])
        ]
        if not below:
            return
        moved = [
            Action(f"{floor.to_db}/{floor.to_table}/{r['_key']}", floor.to_db, floor.to_table, r["_key"],
                   floor.version, {c: r[c] for c in kinds}, "")
            for r in below
        ]  # fmt: skip
        name = f"{floor.to_db}.{floor.to_table}"
        newest = columns.get(name) or (json.dumps(kinds), max(version, floor.version))
        self._apply_table(name, moved, newest, [])
        self._apply_table(old.folder.name, [], None, [floor])

    def _apply_table(
        self, name: str, actions: list[Action], newest: tuple[str, Version] | None, floors: list[Floor]
    ) -> None:
        snap = self.table(name)
        kinds, version, floor = snap.columns()
        if newest is not None and newest[1] > version:
            kinds, version = dict(kinds_of(newest[0])), newest[1]
        db, _, table = name.partition(".")
        covering = [f.version for f in floors if f.covers(db, table)] + ([floor] if floor else [])
        floor = max(covering) if covering else None
        snap.apply(actions, kinds, floor)
        snap.save_columns(kinds, version, floor)
