"""The index job's direct mode: each shard task reads its own Kafka partitions; no rows cross Spark.

The Kafka sink partitions a table topic by key (``partition-by = "key"``, its default: CRC-32 of
the key's Avro body modulo the partition count, keyless rows in partition 0), so every change of a
document is in one partition number, of whichever table topic (a renamed table's new topic too,
when partition counts are equal). The index's shard i is then partition i of every table topic
(placement ``kafka-partition``, :mod:`spark_consumers.index.shards`), and a micro-batch needs no
shuffle: the data source (``rows=index``) plans one input partition per shard::

    driver: offsets of the batch (the source's planner)  -->  ShardPartition i = partition i of every
    selected table topic + the batch's whole DDL range  -->  task i (a Python worker): read, decode,
    reduce to the latest change per document, apply to shard i (versions, tombstones, floors),
    commit  -->  one summary row  -->  driver (foreachBatch): collects N summary rows

The rows never enter the JVM. Every shard task reads the DDL range itself (one small partition),
so each shard's floors and table columns are complete for it, as in the shuffle mode. Spark
records the batch's offsets after ``foreachBatch`` returned, hence after every task committed; a
retried task (or a replayed batch) re-applies harmlessly: versions decide.

One change crosses shards: an update that changes the key is written to the new key's partition,
while the old key's document lives in the old key's shard. The task computes that shard (the old
key written again with the key's schema and hashed as the sink does) and returns such deletes in
its summary (``foreign``); the driver applies them to their shards after the tasks (rare: only
key changes; versions decide there too). A batch with a RENAME leaves its floors to the driver
too (``floors`` of the summaries, :func:`apply_deferred_floors`), applied after those deletes: the
old key's delete reaches the old name before the old name's documents move.

Every message is checked to be in the partition its key hashes to: a topic written with
``partition-by = "table"`` or ``"commit-ts"`` is refused (``--index-mode shuffle`` indexes it),
and so is a table topic whose partition count is not the index's shard count.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from bridge.errors import ConfigError
from spark_consumers.decode import COMPACT_FIELDS, DDL_SUFFIX, ChangeDecoder, Compact
from spark_consumers.index import tasks
from spark_consumers.index.shards import create_or_open, placement_of, recorded_shards, shard_dir
from spark_consumers.latest import (
    Action,
    BatchChanges,
    Floor,
    apply_floors,
    ddl_columns,
    ddl_floor,
    keep_latest,
    newest_columns,
)
from spark_consumers.source import kafka
from spark_consumers.source.offsets import Offsets, ranges

SUMMARY_SCHEMA = (
    "shard int, rows long, changes long, put long, deleted long, max_commit_ts long, executor string, "
    "cpu_seconds double, attempt int, reduce_cpu_seconds double, read_cpu_seconds double, foreign string, "
    "floors string"
)
SUMMARY_ARROW = pa.schema(
    [("shard", pa.int32()), ("rows", pa.int64()), ("changes", pa.int64()), ("put", pa.int64()),
     ("deleted", pa.int64()), ("max_commit_ts", pa.int64()), ("executor", pa.string()),
     ("cpu_seconds", pa.float64()), ("attempt", pa.int32()), ("reduce_cpu_seconds", pa.float64()),
     ("read_cpu_seconds", pa.float64()), ("foreign", pa.string()),
     ("floors", pa.string())]
)  # fmt: skip

_loads = orjson.loads
Range = tuple[str, int, int, int]  # topic, partition, first offset, end offset


class ShardPartition(InputPartition):
    """Shard ``shard`` of ``count``: its partition of every table topic, and every DDL range."""

    def __init__(self, shard: int, count: int, ranges: Sequence[Range]) -> None:
        super().__init__((shard, count, tuple(ranges)))
        self.shard, self.count, self.ranges = shard, count, tuple(ranges)


def shard_count(index_path: str, end: Offsets) -> int:
    """The shard count of the index the job writes. The driver creates the index before the query
    starts when it can tell the count (``--shards``, or table topics already there); otherwise the
    first batch that reads a table topic creates it, one shard per partition of those topics."""
    path = Path(index_path)
    count = recorded_shards(path)
    if count is None:
        counts = {len(parts) for topic, parts in end.items() if not topic.endswith(DDL_SUFFIX)}
        if len(counts) != 1:
            raise ConfigError(
                f"--index {index_path}: the table topics' partition counts differ ({sorted(counts)}): the "
                "direct index mode has one shard per partition; give the topics one count, or run with "
                "--index-mode shuffle"
            )
        count = counts.pop()
        create_or_open(path, count, "kafka-partition")
    if placement_of(path) != "kafka-partition":
        raise ConfigError(
            f"--index {index_path}: not an index of the direct mode (placement kafka-partition)"
        )
    return count


def has_table_topic(end: Offsets) -> bool:
    return any(not topic.endswith(DDL_SUFFIX) for topic in end)


def hold_back_ddl_until_indexed(index_path: str, start: Offsets, end: Offsets) -> Offsets:
    """``end`` with the DDL topics kept at ``start`` while there is no index yet and no table topic
    to create it from (its shard count is their partition count): a DDL waits for the first batch
    that has shards to apply it to."""
    if recorded_shards(Path(index_path)) is not None or has_table_topic(end):
        return end
    return {t: ({p: start.get(t, {}).get(p, 0) for p in parts} if t.endswith(DDL_SUFFIX) else dict(parts))
            for t, parts in end.items()}  # fmt: skip


def check_partitions(end: Offsets, count: int) -> None:
    """Every table topic of the batch has exactly ``count`` partitions (the index's shards)."""
    for topic, parts in sorted(end.items()):
        if topic.endswith(DDL_SUFFIX):
            continue
        if sorted(int(p) for p in parts) != list(range(count)):
            raise ConfigError(
                f"topic {topic}: {len(parts)} partitions, but the index has {count} shards (one per "
                "Kafka partition): give every table topic of a job the same partition count, or run "
                "with --index-mode shuffle"
            )


def plan(start: Offsets, end: Offsets, count: int) -> list[InputPartition]:
    """The batch's input partitions: one per shard that has anything to read (every shard when
    the batch has DDL: each shard applies it)."""
    check_partitions(end, count)
    ddl: list[Range] = []
    mine: dict[int, list[Range]] = {}
    for r in ranges(start, end):
        if r[0].endswith(DDL_SUFFIX):
            ddl.append(r)
        else:
            mine.setdefault(r[1], []).append(r)
    shards = range(count) if ddl else sorted(mine)
    return [ShardPartition(shard, count, [*mine.get(shard, []), *ddl]) for shard in shards]


def read_shard(options: Any, part: ShardPartition) -> Iterator[pa.RecordBatch]:
    """Read, reduce, apply and commit one shard's part of the batch (runs in a Python worker);
    yields its summary row."""
    from spark_consumers.source.clients import _CLIENTS, _clients

    began = time.process_time()
    rows: list[Compact] = []
    foreign: list[tuple[int, Compact]] = []
    for topic, partition, start, end in part.ranges:
        clients = _clients(options, topic)
        place = clients.decoder.compact_placed
        header_kind = kafka.header_kind
        try:
            for chunk in kafka.read_range(clients.consumer, topic, partition, start, end):
                for m in chunk:
                    own, others = place(
                        topic, partition, m.offset() or 0, m.key(), m.value(), header_kind(m), part.count
                    )
                    rows.extend(own)
                    if others:
                        foreign.extend(others)
        except BaseException:
            _CLIENTS.pop((options, options.schemas_topic_of(topic)), None)
            clients.close()  # a failed read leaves the consumer in an unknown state
            raise
    read = time.process_time()
    decoders: dict[str, ChangeDecoder] = {}

    def decoder_for(topic: str) -> ChangeDecoder:
        found = decoders.get(topic)
        if found is None:
            found = decoders[topic] = _clients(options, topic).decoder
        return found

    changes = reduce_compact(rows, decoder_for, floors=False)
    # a batch with a RENAME leaves its floors to the driver, after the deletes of changed keys other
    # shards found: the old key's delete must reach the old name before its documents move
    deferred = changes.floors if any(f.to_table for f in changes.floors) else []
    if deferred:
        changes.floors = []
    else:
        apply_floors(changes)
    reduced = time.process_time()
    path = shard_dir(Path(options.index_path), part.shard)
    index = tasks.open_writer(str(path), json.loads(options.text_fields or "{}"))
    try:
        ddl = [dict(zip(COMPACT_FIELDS, r, strict=True)) for r in rows if r[6] is None]
        put, deleted = index.apply(changes, newest_columns(changes, ddl_columns(ddl)))
    finally:
        index.close()
    from pyspark import TaskContext

    context = TaskContext.get()
    summary = {
        "shard": part.shard,
        "rows": len(changes.actions),
        "changes": changes.rows - len(ddl),
        "put": put,
        "deleted": deleted,
        "max_commit_ts": changes.max_commit_ts,
        "executor": tasks.executor_label(),
        "cpu_seconds": time.process_time() - read,  # reduce and index, as in the shuffle mode
        "attempt": context.attemptNumber() if context is not None else 0,
        "reduce_cpu_seconds": reduced - read,
        "read_cpu_seconds": read - began,
        "foreign": json.dumps([[s, r[3], r[4], r[6], r[8], r[9]] for s, r in foreign]) if foreign else None,
        "floors": json.dumps([[f.db, f.table, *f.version, f.to_db, f.to_table] for f in deferred])
        if deferred
        else None,
    }
    yield pa.RecordBatch.from_pylist([summary], schema=SUMMARY_ARROW)


def reduce_compact(
    rows: Sequence[Compact], decoder_for: Callable[[str], ChangeDecoder], floors: bool = True
) -> BatchChanges:
    """Compact rows -> the latest action per document and the floors: the rules of
    :func:`spark_consumers.index.tasks.reduce_rows` (the first of equal versions kept), on the
    tuples; only the surviving rows' images are parsed. ``floors=False``: the floors are not yet
    let hide or move the batch's older actions (the caller does, or leaves them to the store)."""
    out = BatchChanges({}, [])
    latest: dict[str, Compact] = {}
    top = 0
    for row in rows:
        doc, ts = row[6], row[8]
        if ts > top:
            top = ts
        if doc is None:
            floor = ddl_floor(row[3], row[4], row[5], row[12], (ts, row[9]))
            if floor is not None:
                out.floors.append(floor)
            continue
        doc_id = f"{row[3]}/{row[4]}/{doc}"
        held = latest.get(doc_id)
        if held is None or (held[8], held[9]) < (ts, row[9]):
            latest[doc_id] = row
    out.rows, out.max_commit_ts = len(rows), top
    actions = out.actions
    for doc_id, row in latest.items():
        image = None if row[10] is None else _loads(row[10])
        actions[doc_id] = Action(doc_id, row[3], row[4], row[6] or "", (row[8], row[9]), image,
                                 decoder_for(row[0]).types_of(row[11] or b""))  # fmt: skip
    return apply_floors(out) if floors else out


def apply_foreign(paths: Sequence[Path], text_fields: Mapping[str, Sequence[str]],
                  summaries: Sequence[Mapping[str, Any]]) -> int:  # fmt: skip
    """On the driver, after the shard tasks: the deletes of old keys (updates that changed a key)
    that belong to another shard than the task that read them; versions decide. Returns how many."""
    by_shard: dict[int, dict[str, Action]] = {}
    for summary in summaries:
        for shard, db, table, doc, ts, pos in json.loads(summary.get("foreign") or "[]"):
            actions = by_shard.setdefault(int(shard), {})
            keep_latest(
                actions, [Action(f"{db}/{table}/{doc}", db, table, doc, (int(ts), int(pos)), None, "")]
            )
    done = 0
    for shard, actions in sorted(by_shard.items()):
        index = tasks.open_writer(str(paths[shard]), text_fields)
        try:
            batch = BatchChanges(actions, [], rows=len(actions))
            batch.max_commit_ts = max(a.version[0] for a in actions.values())
            _, deleted = index.apply(batch)
            done += deleted
        finally:
            index.close()
    return done


def apply_deferred_floors(paths: Sequence[Path], text_fields: Mapping[str, Sequence[str]],
                          summaries: Sequence[Mapping[str, Any]]) -> int:  # fmt: skip
    """On the driver, after :func:`apply_foreign`: the floors of a batch with a RENAME, which its
    shard tasks left (every task read the same DDL range), applied to every shard in version order:
    the old name's documents, the batch's own changes and other shards' deletes of changed keys
    included, move to the new name at the rename's version. A replay finds the floors recorded
    and moves nothing twice. Returns how many floors."""
    floors: set[Floor] = set()
    for summary in summaries:
        for db, table, ts, pos, to_db, to_table in json.loads(summary.get("floors") or "[]"):
            floors.add(Floor(db, table, (int(ts), int(pos)), to_db, to_table))
    if not floors:
        return 0
    ordered = sorted(floors, key=lambda f: (f.version, f.db, f.table))
    for path in paths:
        index = tasks.open_writer(str(path), text_fields)
        try:
            index.apply(BatchChanges({}, list(ordered)))
        finally:
            index.close()
    return len(ordered)
