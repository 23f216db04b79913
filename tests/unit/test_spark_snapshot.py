"""spark_consumers.snapshot: the latest row per key as typed Parquet, idempotent, following the
newest schema version."""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from spark_consumers.latest import latest_per_document, newest_columns
from spark_consumers.snapshot import Snapshot

KINDS = {"id": "int", "name": "string", "day": "date", "at": "datetime", "raw": "bytes"}


def row(op: str, ts: int, image: dict[str, Any], kinds: dict[str, str] = KINDS) -> dict[str, Any]:
    body = json.dumps(image)
    return {
        "db": "main", "table": "t", "op": op, "key": json.dumps({"id": image["id"]}),
        "before": body if op == "d" else None, "after": None if op == "d" else body,
        "types": json.dumps(kinds), "commit_ts": ts, "position": 0,
    }  # fmt: skip


def apply(snap: Snapshot, *rows: dict[str, Any]) -> None:
    batch = latest_per_document(rows)
    snap.apply(batch, newest_columns(batch, {}))


def table(path: Path) -> list[dict[str, Any]]:
    data = pq.read_table(path / "main.t" / "rows.parquet").to_pylist()
    return sorted(
        ({k: v for k, v in r.items() if not k.startswith("_")} for r in data), key=lambda r: r["id"]
    )


def image(i: int, name: str) -> dict[str, Any]:
    return {"id": i, "name": name, "day": "2024-01-02", "at": "2024-01-02T03:04:05.000006", "raw": "AP8="}


def test_rows_are_typed_and_the_latest_per_key(tmp_path: Path) -> None:
    snap = Snapshot(tmp_path)
    apply(snap, row("c", 1, image(1, "a")), row("c", 1, image(2, "b")) | {"position": 1})
    apply(snap, row("u", 2, image(1, "a2")), row("d", 3, image(2, "b")))
    assert table(tmp_path) == [
        {
            "id": 1,
            "name": "a2",
            "day": date(2024, 1, 2),
            "at": datetime(2024, 1, 2, 3, 4, 5, 6),
            "raw": b"\x00\xff",
        }
    ]
    # replays of old changes change nothing, the deleted key included
    apply(snap, row("c", 1, image(1, "a")), row("c", 1, image(2, "b")) | {"position": 1})
    assert [r["name"] for r in table(tmp_path)] == ["a2"]


def test_columns_follow_the_newest_schema_version(tmp_path: Path) -> None:
    snap = Snapshot(tmp_path)
    apply(snap, row("c", 1, image(1, "a")))
    wider = {**KINDS, "extra": "int"}
    apply(snap, row("c", 2, {**image(2, "b"), "extra": 7}, kinds=wider))
    assert [(r["id"], r["extra"]) for r in table(tmp_path)] == [(1, None), (2, 7)]
    narrower = {k: v for k, v in wider.items() if k != "raw"}
    apply(snap, row("c", 3, {**image(3, "c"), "extra": 8}, kinds=narrower))
    assert "raw" not in table(tmp_path)[0]


def rename(old: str, new: str, ts: int) -> dict[str, Any]:
    before = json.dumps({"old_db": "main", "old_table": old})
    return {"db": "main", "table": new, "op": "RENAME_TABLE", "key": None, "before": before, "after": None,
            "types": json.dumps(KINDS), "commit_ts": ts, "position": -1}  # fmt: skip


def test_a_renamed_tables_rows_move_to_the_new_name(tmp_path: Path) -> None:
    """Rows already in the snapshot move at the rename's version, typed values intact, through a
    chain of renames in one batch; a newer change of the new name wins; replays change nothing."""
    snap = Snapshot(tmp_path)
    apply(snap, row("c", 1, image(1, "a")), row("c", 1, image(2, "b")) | {"position": 1})
    before = table(tmp_path)
    batch = [row("c", 2, image(3, "c")), rename("t", "t2", 5), rename("t2", "t3", 6),
             row("u", 7, image(2, "b2")) | {"table": "t3"}]  # fmt: skip
    apply(snap, *batch)
    assert not pq.read_table(tmp_path / "main.t" / "rows.parquet").num_rows
    assert not pq.read_table(tmp_path / "main.t2" / "rows.parquet").num_rows
    moved = pq.read_table(tmp_path / "main.t3" / "rows.parquet").to_pylist()
    by_id = {r["id"]: r for r in moved}
    assert sorted(by_id) == [1, 2, 3]
    assert {k: v for k, v in by_id[1].items() if not k.startswith("_")} == before[0]
    assert by_id[1]["_commit_ts"] == 6 and by_id[2]["name"] == "b2"
    apply(snap, *batch)
    assert pq.read_table(tmp_path / "main.t3" / "rows.parquet").to_pylist() == moved
    apply(snap, row("c", 3, image(9, "late")))  # the old name is floored
    assert not pq.read_table(tmp_path / "main.t" / "rows.parquet").num_rows


def test_a_change_in_the_renames_batch_moves_rather_than_the_older_row(tmp_path: Path) -> None:
    snap = Snapshot(tmp_path)
    apply(snap, row("c", 1, image(1, "a")))
    apply(snap, row("u", 2, image(1, "a2")), rename("t", "t2", 5))
    assert [r["name"] for r in pq.read_table(tmp_path / "main.t2" / "rows.parquet").to_pylist()] == ["a2"]
