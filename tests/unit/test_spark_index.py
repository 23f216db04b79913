"""spark_consumers.index: typed documents, idempotent apply with per-key versions, floors, search.
A real tantivy index in a temporary folder (tantivy is embedded: nothing to mock)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from spark_consumers.index import search
from spark_consumers.index.documents import typed_row
from spark_consumers.index.store import ChangeIndex, table_columns
from spark_consumers.latest import latest_per_document

KINDS = {
    "id": "int",
    "title": "string",
    "price": "decimal",
    "at": "datetime",
    "day": "date",
    "score": "double",
}


def row(
    op: str, ts: int, image: dict[str, Any], pos: int = 0, kinds: dict[str, str] = KINDS
) -> dict[str, Any]:
    body = json.dumps(image)
    return {
        "db": "shop", "table": "items", "op": op, "key": json.dumps({"id": image["id"]}),
        "before": body if op == "d" else None, "after": None if op == "d" else body,
        "types": json.dumps(kinds), "commit_ts": ts, "position": pos,
    }  # fmt: skip


def item(i: int, title: str = "red bike", **extra: Any) -> dict[str, Any]:
    return {"id": i, "title": title, "price": "9.50", "at": "2024-05-01T12:00:00.500000", "day": "2024-05-01",
            "score": 1.5, **extra}  # fmt: skip


def apply(index: ChangeIndex, *rows: dict[str, Any]) -> tuple[int, int]:
    batch = latest_per_document(rows)
    return index.apply(batch)


def live(path: Path) -> dict[str, dict[str, Any]]:
    index = search.open_existing(path)
    return {h["id"]: h for h in search.search(path, "*", limit=1000)} if search.live_documents(index) else {}


def test_values_are_typed_where_tantivy_has_the_type(tmp_path: Path) -> None:
    assert typed_row(item(1), KINDS) == {
        "id": 1, "title": "red bike", "price": "9.50", "at": "2024-05-01T12:00:00.500000Z",
        "day": "2024-05-01T00:00:00Z", "score": 1.5,
    }  # fmt: skip
    assert typed_row({"day": "0000-00-00", "gone": None}, KINDS) == {"day": "0000-00-00"}
    index = ChangeIndex(tmp_path)
    apply(index, row("c", 1, item(1)))
    found = search.search(tmp_path, "row.score:>1 AND row.at:[2024-05-01T00:00:00Z TO 2024-05-02T00:00:00Z]")
    assert [h["id"] for h in found] == ["shop/items/1"]
    assert found[0]["row"]["at"] == datetime(2024, 5, 1, 12, 0, 0, 500000, tzinfo=UTC).isoformat()


def test_apply_is_idempotent_and_older_changes_never_win(tmp_path: Path) -> None:
    index = ChangeIndex(tmp_path)
    assert apply(index, row("c", 10, item(1)), row("c", 10, item(2), pos=1)) == (2, 0)
    assert apply(index, row("c", 10, item(1)), row("c", 10, item(2), pos=1)) == (0, 0)  # a replay
    assert apply(index, row("d", 12, item(2))) == (0, 1)
    # an older insert of the deleted row, replayed later: the tombstone's version keeps it out
    assert apply(index, row("c", 11, item(2, "old"))) == (0, 0)
    assert apply(index, row("c", 5, item(1, "stale"))) == (0, 0)
    assert apply(index, row("u", 13, item(1, "blue car"))) == (1, 0)
    docs = live(tmp_path)
    assert list(docs) == ["shop/items/1"] and docs["shop/items/1"]["row"]["title"] == "blue car"
    assert search.stats(tmp_path)["tables"] == {"shop.items": 1}
    assert search.stats(tmp_path)["tombstones"] == 1 and search.stats(tmp_path)["last_commit_ts"] == 13


def test_versions_survive_reopening_the_index(tmp_path: Path) -> None:
    first = ChangeIndex(tmp_path)
    apply(first, row("c", 10, item(1)))
    first.close()
    again = ChangeIndex(tmp_path)
    assert apply(again, row("c", 9, item(1, "older"))) == (0, 0)
    assert apply(again, row("c", 10, item(1), pos=1)) == (1, 0)


def test_a_new_column_appears_in_later_documents(tmp_path: Path) -> None:
    index = ChangeIndex(tmp_path)
    wider = {**KINDS, "color": "string"}
    apply(index, row("c", 1, item(1)))
    index.apply(
        latest_per_document([row("c", 2, item(2, color="green"), kinds=wider)]),
        {"shop.items": (json.dumps(wider), (2, 0))},
    )
    assert search.search(tmp_path, "row.color:green")[0]["id"] == "shop/items/2"
    assert "color" not in search.search(tmp_path, "row.id:1")[0]["row"]
    assert table_columns(tmp_path)["shop.items"]["kinds"] == wider


def test_full_text_uses_the_configured_columns(tmp_path: Path) -> None:
    index = ChangeIndex(tmp_path, {"shop.items": ["title"]})
    apply(index, row("c", 1, item(1, "green lantern", note="never searched")))
    assert [h["id"] for h in search.search(tmp_path, "lantern")] == ["shop/items/1"]
    assert search.search(tmp_path, "lantern", table="shop.other") == []


def test_a_dropped_table_loses_its_documents_and_older_replays(tmp_path: Path) -> None:
    index = ChangeIndex(tmp_path)
    apply(index, row("c", 1, item(1)), row("c", 1, item(2), pos=1))
    drop = {"db": "shop", "table": "items", "op": "DROP_TABLE", "key": None, "before": None, "after": None,
            "types": "{}", "commit_ts": 5, "position": -1}  # fmt: skip
    apply(index, drop)
    assert live(tmp_path) == {}
    index.close()
    reopened = ChangeIndex(tmp_path)  # floors are kept beside the index
    assert apply(reopened, row("c", 3, item(3))) == (0, 0)
    assert apply(reopened, row("c", 6, item(4))) == (1, 0)


def rename(old: str, new: str, ts: int) -> dict[str, Any]:
    before = json.dumps({"old_db": "shop", "old_table": old})
    return {"db": "shop", "table": new, "op": "RENAME_TABLE", "key": None, "before": before, "after": None,
            "types": json.dumps(KINDS), "commit_ts": ts, "position": -1}  # fmt: skip


def test_a_renamed_tables_documents_move_to_the_new_name(tmp_path: Path) -> None:
    """Indexed rows move at the rename's version (dates and text intact); rows of the same batch
    move too, through a chain of renames; a newer change of the new name wins; replays change nothing."""
    index = ChangeIndex(tmp_path)
    apply(index, row("c", 1, item(1, "brass lantern")), row("c", 1, item(2), pos=1))
    before = live(tmp_path)["shop/items/1"]["row"]
    batch = [row("c", 2, item(3, "oak table")), rename("items", "goods", 5), rename("goods", "wares", 6),
             {**row("u", 7, item(2, "steel lamp")), "table": "wares"}]  # fmt: skip
    apply(index, *batch)
    found = live(tmp_path)
    assert sorted(found) == ["shop/wares/1", "shop/wares/2", "shop/wares/3"]
    assert found["shop/wares/1"]["row"] == before and found["shop/wares/1"]["commit_ts"] == 6
    assert found["shop/wares/2"]["row"]["title"] == "steel lamp"
    assert [h["id"] for h in search.search(tmp_path, "lantern")] == ["shop/wares/1"]
    assert apply(index, *batch) == (0, 0)
    index.close()
    assert apply(ChangeIndex(tmp_path), row("c", 3, item(9))) == (0, 0)  # the old name is floored


def test_a_change_in_the_renames_batch_moves_rather_than_the_older_document(tmp_path: Path) -> None:
    """An update of the old name in the same micro-batch as the rename (a stream under load): the
    updated row moves, not the document indexed before it, through a chain of renames too; a replay
    of an older change with the rename keeps the newer document."""
    index = ChangeIndex(tmp_path)
    apply(index, row("c", 1, item(1, "brass lantern")), row("c", 1, item(2, "oak table"), pos=1))
    apply(index, row("u", 2, item(1, "steel lamp")), rename("items", "goods", 5),
          {**row("u", 6, item(2, "pine table")), "table": "goods"}, rename("goods", "wares", 7))  # fmt: skip
    assert {k: v["row"]["title"] for k, v in live(tmp_path).items()} == {
        "shop/wares/1": "steel lamp", "shop/wares/2": "pine table",
    }  # fmt: skip
    other = ChangeIndex(tmp_path / "replay")
    apply(other, row("c", 3, item(1, "new lamp")))
    apply(other, row("c", 1, item(1, "brass lantern")), rename("items", "goods", 5))
    assert {k: v["row"]["title"] for k, v in live(tmp_path / "replay").items()} == {
        "shop/goods/1": "new lamp"
    }
