"""The sharded change index without Spark: the shard tasks' functions (route, apply a shard) run on
Arrow batches as Spark would hand them, into real tantivy shards; search and stats read every shard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bridge.errors import UserError
from spark_consumers.index import search
from spark_consumers.index.shards import META_FILE, create_or_open, merged_floors, shard_of, shard_paths
from spark_consumers.index.tasks import COLUMNS, apply_shard, router
from tests.unit.test_spark_index import item, row

SHARDS = 3


def ddl(op: str, ts: int) -> dict[str, Any]:
    return {"db": "shop", "table": "items", "op": op, "key": None, "before": None, "after": None,
            "types": "{}", "commit_ts": ts, "position": -1}  # fmt: skip


def run_batch(paths: list[Path], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Route ``rows`` as the first stage does, then apply each shard's part as its task does."""
    batch = pa.RecordBatch.from_pylist([{c: r[c] for c in COLUMNS} for r in rows])
    routed = pa.Table.from_batches(list(router(len(paths), list(range(len(paths))))(iter([batch]))))
    summaries = []
    for shard in range(len(paths)):
        mine = routed.filter(pa.compute.equal(routed["_shard"], shard)).select(COLUMNS).to_pylist()
        if mine:
            summaries.append(apply_shard([str(p) for p in paths], shard, mine, {}))
    return summaries


def test_documents_land_in_their_shard_and_search_reads_every_shard(tmp_path: Path) -> None:
    paths = create_or_open(tmp_path, SHARDS)
    assert json.loads((tmp_path / META_FILE).read_text()) == {"format": 2, "shards": SHARDS}
    summaries = run_batch(paths, [row("c", 10 + i, item(i, f"red bike {i}")) for i in range(30)])
    assert sum(s["put"] for s in summaries) == 30 and len(summaries) == SHARDS
    for s in summaries:  # a shard holds exactly the ids that hash to it
        index = search.open_existing(tmp_path)[s["shard"]]
        assert search.live_documents(index) == sum(shard_of(str(i), SHARDS) == s["shard"] for i in range(30))
    hits = search.search(tmp_path, "bike", limit=100)
    assert sorted(h["row"]["id"] for h in hits) == list(range(30))
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert len(search.search(tmp_path, "bike", limit=7)) == 7
    summary = search.stats(tmp_path)
    assert summary["tables"] == {"shop.items": 30} and summary["last_commit_ts"] == 39


def test_a_key_change_moves_the_document_between_shards_and_replays_change_nothing(tmp_path: Path) -> None:
    paths = create_or_open(tmp_path, SHARDS)
    old = 1
    new = next(i for i in range(2, 100) if shard_of(str(i), SHARDS) != shard_of("1", SHARDS))
    moved = {**row("u", 20, item(new)), "before": json.dumps(item(old)), "key": json.dumps({"id": new})}
    batch = [row("c", 10, item(old)), moved]
    run_batch(paths, batch)
    assert {h["row"]["id"] for h in search.search(tmp_path, "*", limit=10)} == {new}
    assert sum(s["put"] + s["deleted"] for s in run_batch(paths, batch)) == 0  # a retried batch: no change
    assert search.get(search.open_existing(tmp_path), f"shop/items/{old}") is None


def test_a_drop_reaches_every_shard(tmp_path: Path) -> None:
    paths = create_or_open(tmp_path, SHARDS)
    run_batch(paths, [row("c", 10 + i, item(i)) for i in range(12)])
    run_batch(paths, [ddl("DROP_TABLE", 50), row("c", 40, item(99))])  # an older change: below the floor
    assert search.stats(tmp_path)["documents"] == 0
    assert merged_floors(tmp_path) == [{"db": "shop", "table": "items", "ts": 50, "pos": -1}]


def test_the_number_of_shards_is_the_one_recorded_at_creation(tmp_path: Path) -> None:
    create_or_open(tmp_path, SHARDS)
    assert len(create_or_open(tmp_path, 5)) == SHARDS
    assert len(shard_paths(tmp_path)) == SHARDS


def test_reading_a_folder_without_an_index_is_a_clear_error(tmp_path: Path) -> None:
    for read in (lambda: search.stats(tmp_path / "nothing"), lambda: search.search(tmp_path, "x")):
        with pytest.raises(UserError, match="no index there"):
            read()
