"""spark_consumers.latest: change rows -> the latest action per document, by (commit_ts, position)."""

from __future__ import annotations

import json
from typing import Any

from spark_consumers.latest import Floor, image_digest, key_text, latest_per_document, newest_columns

TYPES = json.dumps({"id": "int", "v": "string"})


def change(
    op: str, ts: int, pos: int, before: Any = None, after: Any = None, keyed: bool = True, **row: Any
) -> dict[str, Any]:
    image = after if after is not None else before
    key = json.dumps({"id": image["id"]}) if keyed and image is not None else None
    return {
        "db": "main", "table": row.get("table", "t"), "op": op, "key": key,
        "before": json.dumps(before) if before is not None else None,
        "after": json.dumps(after) if after is not None else None,
        "types": row.get("types", TYPES), "commit_ts": ts, "position": pos,
    }  # fmt: skip


def test_the_highest_version_wins_whatever_the_order_of_the_rows() -> None:
    rows = [
        change("u", 20, 1, {"id": 1, "v": "b"}, {"id": 1, "v": "c"}),
        change("c", 10, 0, after={"id": 1, "v": "a"}),
        change("u", 20, 0, {"id": 1, "v": "a"}, {"id": 1, "v": "b"}),
    ]
    batch = latest_per_document(rows)
    (action,) = batch.actions.values()
    assert (action.doc_id, action.version, action.image) == ("main/t/1", (20, 1), {"id": 1, "v": "c"})
    assert (batch.rows, batch.max_commit_ts) == (3, 20)


def test_a_delete_is_an_action_without_image() -> None:
    batch = latest_per_document(
        [change("c", 1, 0, after={"id": 2, "v": "x"}), change("d", 2, 0, before={"id": 2, "v": "x"})]
    )
    assert batch.actions["main/t/2"].image is None and batch.actions["main/t/2"].version == (2, 0)


def test_a_key_change_puts_the_new_key_and_deletes_the_old_one() -> None:
    batch = latest_per_document([change("u", 5, 0, {"id": 1, "v": "x"}, {"id": 9, "v": "x"})])
    assert batch.actions["main/t/9"].image == {"id": 9, "v": "x"}
    assert batch.actions["main/t/1"].image is None and batch.actions["main/t/1"].version == (5, 0)


def test_keyless_rows_are_identified_by_their_non_null_values() -> None:
    insert = change("c", 1, 0, after={"id": 3, "v": "k", "added": None}, keyed=False)
    delete = change("d", 2, 0, before={"id": 3, "v": "k"}, keyed=False)
    batch = latest_per_document([insert, delete])
    (action,) = batch.actions.values()  # the same document: a NULL column does not change the id
    assert action.image is None and action.key == image_digest({"id": 3, "v": "k"})


def test_a_drop_is_a_floor_hiding_older_changes_of_its_table_only() -> None:
    rows = [
        change("c", 1, 0, after={"id": 1, "v": "a"}),
        change("c", 1, 1, after={"id": 1, "v": "a"}, table="other"),
        {"db": "main", "table": "t", "op": "DROP_TABLE", "key": None, "before": None, "after": None,
         "types": "{}", "commit_ts": 3, "position": -1},
        change("c", 4, 0, after={"id": 2, "v": "recreated"}),
    ]  # fmt: skip
    batch = latest_per_document(rows)
    assert batch.floors == [Floor("main", "t", (3, -1))]
    assert sorted(batch.actions) == ["main/other/1", "main/t/2"]


def test_a_rename_floors_the_old_name() -> None:
    old = json.dumps({"old_db": "main", "old_table": "old"})
    rename = {"db": "main", "table": "new", "op": "RENAME_TABLE", "key": None, "after": None, "types": "{}",
              "before": old, "commit_ts": 3, "position": -1}  # fmt: skip
    assert latest_per_document([rename]).floors == [Floor("main", "old", (3, -1), "main", "new")]


def test_key_text() -> None:
    assert key_text([5]) == "5"
    assert key_text(["a/b"]) == "a/b"
    assert key_text([1, "x"]) == '[1,"x"]'


def test_newest_columns_come_from_the_newest_change_or_ddl() -> None:
    wide = json.dumps({"id": "int", "v": "string", "x": "int"})
    batch = latest_per_document([change("c", 5, 0, after={"id": 1, "v": "a"})])
    assert newest_columns(batch, {}) == {"main.t": (TYPES, (5, 0))}
    assert newest_columns(batch, {"main.t": (wide, (6, -1))}) == {"main.t": (wide, (6, -1))}
