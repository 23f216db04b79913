"""The sharded change index without Spark: the shard tasks' functions (route, apply a shard) run on
Arrow batches as Spark would hand them, into real tantivy shards; search and stats read every shard."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import pytest

from bridge.avro import SingleObjectCodec, source_record, table_avro
from bridge.errors import UserError
from bridge.proto import row_pb2
from spark_consumers.decode import COMPACT_FIELDS, ChangeDecoder, Compact
from spark_consumers.index import search
from spark_consumers.index.shards import META_FILE, create_or_open, merged_floors, shard_of, shard_paths
from spark_consumers.index.tasks import apply_shard
from spark_consumers.source.datasource import latest_rows

SHARDS = 3
TOPIC = "bridge.shop.items"
T = row_pb2.ColumnType


class Messages:
    """``shop.items`` changes as the Kafka sink writes them (single-object Avro), and a decoder
    that reads them back: what the data source and the shard tasks each hold."""

    def __init__(self) -> None:
        schema = row_pb2.TableSchema(table_id=7, db="shop", table="items")
        schema.columns.add(id=1, name="id", type=T.BIGINT)
        schema.columns.add(id=2, name="title", type=T.VARCHAR, length=64, nullable=True)
        schema.max_column_id = 2
        schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
        self.schemas: dict[int, str] = {}
        self.codec = SingleObjectCodec(self.schemas.__setitem__)
        self.avro = table_avro(schema)
        self.decoder = ChangeDecoder(None, self.schemas.get)

    def change(
        self, op: str, ts: int, new: int | None, title: str = "red bike", old: int | None = None
    ) -> list[Compact]:
        """One row change, as the source's compact rows (two for an update that changes the key)."""
        after = None if new is None else (new, title)
        before = None if old is None else (old, title)
        kind: Literal["insert", "update", "delete"] = {"c": "insert", "u": "update", "d": "delete"}[op]  # type: ignore[assignment]
        source = source_record(
            cluster_id=1, db="shop", table="items", start_ts=ts, commit_ts=ts, pos=0, last=True
        )
        assert self.avro.key_schema is not None
        key = self.codec.encode(
            f"{TOPIC}-key", self.avro.key_schema, self.avro.key_record(after or before or ())
        )
        value = self.codec.encode(
            f"{TOPIC}-value", self.avro.value_schema, self.avro.envelope(kind, before, after, source, 0)
        )
        return self.decoder.compact(TOPIC, 0, ts, key, value, "row")


def ddl(op: str, ts: int) -> list[Compact]:
    return [("bridge._ddl", 0, ts, "shop", "items", op, None, 0, ts, -1, None, None, None, "{}")]


def run_batch(paths: list[Path], messages: Messages, *changes: list[Compact]) -> list[dict[str, Any]]:
    """What a micro-batch does: the source reduces its range, each row goes to its key part's shard
    (a DDL row to every shard), each shard task applies its rows."""
    rows: list[dict[str, Any]] = [
        dict(zip(COMPACT_FIELDS, r, strict=True)) for r in latest_rows([r for c in changes for r in c])
    ]
    summaries = []
    for shard in range(len(paths)):
        mine = [r for r in rows if r["doc"] is None or shard_of(r["doc"], len(paths)) == shard]
        if mine:
            summaries.append(
                apply_shard([str(p) for p in paths], shard, mine, {}, lambda t: messages.decoder)
            )
    return summaries


def test_documents_land_in_their_shard_and_search_reads_every_shard(tmp_path: Path) -> None:
    paths = create_or_open(tmp_path, SHARDS)
    recorded = json.loads((tmp_path / META_FILE).read_text())
    assert recorded == {"format": 2, "shards": SHARDS, "placement": "hash"}
    messages = Messages()
    summaries = run_batch(
        paths, messages, *[messages.change("c", 10 + i, i, f"red bike {i}") for i in range(30)]
    )
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
    messages = Messages()
    old = 1
    new = next(i for i in range(2, 100) if shard_of(str(i), SHARDS) != shard_of("1", SHARDS))
    moved = messages.change("u", 20, new, old=old)
    assert [(r[5], r[6]) for r in moved] == [
        ("u", str(new)),
        ("d", str(old)),
    ]  # the put, the old key's delete
    batch = [messages.change("c", 10, old), moved]
    run_batch(paths, messages, *batch)
    assert {h["row"]["id"] for h in search.search(tmp_path, "*", limit=10)} == {new}
    assert sum(s["put"] + s["deleted"] for s in run_batch(paths, messages, *batch)) == 0  # retried: no change
    assert search.get(search.open_existing(tmp_path), f"shop/items/{old}") is None


def test_the_source_keeps_the_latest_change_per_document_of_its_range(tmp_path: Path) -> None:
    messages = Messages()
    changes = [
        messages.change("c", 10, 1, "first"),
        messages.change("u", 11, 1, "second", old=1),
        messages.change("c", 12, 2),
        ddl("ALTER_TABLE", 13),
        messages.change("d", 14, None, old=2),
    ]
    kept = latest_rows([r for c in changes for r in c])
    assert [(r[5], r[6], r[8]) for r in kept] == [("u", "1", 11), ("ALTER_TABLE", None, 13), ("d", "2", 14)]
    paths = create_or_open(tmp_path, SHARDS)
    run_batch(paths, messages, *changes)
    assert [h["row"]["title"] for h in search.search(tmp_path, "*", limit=10)] == ["second"]


def test_a_drop_reaches_every_shard(tmp_path: Path) -> None:
    paths = create_or_open(tmp_path, SHARDS)
    messages = Messages()
    run_batch(paths, messages, *[messages.change("c", 10 + i, i) for i in range(12)])
    run_batch(paths, messages, ddl("DROP_TABLE", 50), messages.change("c", 40, 99))  # older: below the floor
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


def test_the_direct_mode_plans_one_task_per_shard_each_with_every_ddl_range() -> None:
    from spark_consumers.index.direct import ShardPartition, plan

    start = {"b.shop.items": {"0": 5}, "b._ddl": {"0": 3}}
    end = {
        "b.shop.items": {"0": 9, "1": 4, "2": 0},
        "b.shop.users": {"0": 0, "1": 2, "2": 0},
        "b._ddl": {"0": 3},
    }
    parts = plan(start, end, 3)  # no DDL: only the shards with something to read
    assert all(isinstance(p, ShardPartition) for p in parts)
    assert [(p.shard, p.ranges) for p in parts] == [  # type: ignore[attr-defined]
        (0, (("b.shop.items", 0, 5, 9),)),
        (1, (("b.shop.items", 1, 0, 4), ("b.shop.users", 1, 0, 2))),
    ]
    end["b._ddl"] = {"0": 7}
    parts = plan(start, end, 3)  # a DDL: every shard applies it
    assert [p.shard for p in parts] == [0, 1, 2]  # type: ignore[attr-defined]
    assert all(("b._ddl", 0, 3, 7) in p.ranges for p in parts)  # type: ignore[attr-defined]


def test_the_direct_mode_refuses_a_topic_whose_partitions_are_not_the_shards() -> None:
    from bridge.errors import ConfigError
    from spark_consumers.index.direct import plan

    with pytest.raises(ConfigError, match=r"topic b.shop.users: 2 partitions, but the index has 3 shards"):
        plan({}, {"b.shop.items": {"0": 1, "1": 1, "2": 1}, "b.shop.users": {"0": 1, "1": 1}}, 3)


def test_an_index_of_one_mode_is_refused_by_the_other(tmp_path: Path) -> None:
    create_or_open(tmp_path / "a", SHARDS)
    with pytest.raises(UserError, match="created by --index-mode shuffle"):
        create_or_open(tmp_path / "a", SHARDS, "kafka-partition")
    create_or_open(tmp_path / "b", SHARDS, "kafka-partition")
    with pytest.raises(UserError, match="created by --index-mode direct"):
        create_or_open(tmp_path / "b", SHARDS)


def test_the_direct_modes_reduction_is_the_shuffle_modes() -> None:
    """``direct.reduce_compact`` on the tuples gives the actions and floors ``tasks.reduce_rows``
    gives on the same rows as dicts (a key change, a delete, a rename, equal versions)."""
    from spark_consumers.index.direct import reduce_compact
    from spark_consumers.index.tasks import reduce_rows

    messages = Messages()
    moved_from = '{"old_db": "shop", "old_table": "items"}'
    rename: list[Compact] = [
        (
            "bridge._ddl",
            0,
            30,
            "shop",
            "things",
            "RENAME_TABLE",
            None,
            0,
            30,
            -1,
            None,
            None,
            moved_from,
            "{}",
        )
    ]
    rows: list[Compact] = [r for c in [
        messages.change("c", 10, 1, "first"), messages.change("u", 11, 1, "second", old=1),
        messages.change("u", 12, 3, "moved", old=2), messages.change("c", 12, 3, "same version"),
        messages.change("d", 14, None, old=4), rename, messages.change("c", 40, 5),
    ] for r in c]  # fmt: skip
    tuples = reduce_compact(rows, lambda t: messages.decoder)
    dicts = reduce_rows([dict(zip(COMPACT_FIELDS, r, strict=True)) for r in rows], lambda t: messages.decoder)
    assert tuples.actions == dicts.actions and tuples.floors == dicts.floors
    assert (tuples.rows, tuples.max_commit_ts) == (dicts.rows, dicts.max_commit_ts)
    assert {a.doc_id for a in tuples.actions.values()} >= {"shop/things/1", "shop/items/5"}


def test_the_driver_applies_old_key_deletes_to_their_shard_by_version(tmp_path: Path) -> None:
    from spark_consumers.index.direct import apply_foreign

    paths = create_or_open(tmp_path, SHARDS, "kafka-partition")
    messages = Messages()
    rows = [dict(zip(COMPACT_FIELDS, r, strict=True)) for r in messages.change("c", 10, 7)]
    apply_shard([str(p) for p in paths], 2, rows, {}, lambda t: messages.decoder, placed_by_hash=False)
    newer: list[dict[str, Any]] = [
        {"foreign": json.dumps([[2, "shop", "items", "7", 5, 0]])}
    ]  # older than the put: no change
    assert apply_foreign(paths, {}, newer) == 0
    assert search.get(search.open_existing(tmp_path), "shop/items/7") is not None
    later: list[dict[str, Any]] = [
        {"foreign": json.dumps([[2, "shop", "items", "7", 20, 0]])},
        {"foreign": None},
    ]
    assert apply_foreign(paths, {}, later) == 1
    assert search.get(search.open_existing(tmp_path), "shop/items/7") is None
    assert apply_foreign(paths, {}, later) == 0  # replayed: the tombstone holds the version


def test_a_renames_floors_wait_for_the_old_key_deletes_of_other_shards(tmp_path: Path) -> None:
    """The direct mode's driver: an old key's delete (from another shard's task) reaches the old
    name before the batch's RENAME moves the old name's documents; a replay changes nothing."""
    from spark_consumers.index.direct import apply_deferred_floors, apply_foreign

    paths = create_or_open(tmp_path, SHARDS, "kafka-partition")
    messages = Messages()
    rows = [
        dict(zip(COMPACT_FIELDS, r, strict=True)) for k in (7, 8) for r in messages.change("c", 10 + k, k)
    ]
    apply_shard([str(p) for p in paths], 2, rows, {}, lambda t: messages.decoder, placed_by_hash=False)
    summaries: list[dict[str, Any]] = [
        {"foreign": json.dumps([[2, "shop", "items", "7", 20, 0]]), "floors": None},
        {"foreign": None, "floors": json.dumps([["shop", "items", 30, -1, "shop", "goods"]])},
    ]
    for _ in range(2):  # the second time: the batch replayed after a crash
        apply_foreign(paths, {}, summaries)
        assert apply_deferred_floors(paths, {}, summaries) == 1
        index = search.open_existing(tmp_path)
        assert search.get(index, "shop/goods/7") is None and search.get(index, "shop/items/7") is None
        assert search.get(index, "shop/goods/8") is not None and search.get(index, "shop/items/8") is None


def test_a_pending_direct_index_reads_empty_until_its_first_batch_records_the_shards(tmp_path: Path) -> None:
    from spark_consumers.index.direct import shard_count
    from spark_consumers.index.shards import create_pending

    create_pending(tmp_path, "kafka-partition")
    assert search.search(tmp_path, "x") == [] and search.stats(tmp_path)["documents"] == 0
    assert shard_count(str(tmp_path), {"b._ddl": {"0": 4}, "b.shop.items": {"0": 1, "1": 0}}) == 2
    assert len(shard_paths(tmp_path)) == 2
    create_pending(tmp_path, "kafka-partition")  # a later start changes nothing
    assert len(shard_paths(tmp_path)) == 2
