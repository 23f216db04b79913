"""The index job's micro-batch as Spark tasks: the shards are written where the data is.

The index job reads the source's compact rows (``rows=latest``: per Kafka range, the latest change
per document, its key part and that part's hash worked out, the image it puts as JSON, no
``before``, ``key`` or column kinds: the writer schema's framing header stands for those).
For a micro-batch the driver plans (:func:`plan`)::

    compact rows --Spark SQL: _shard, _route--> --repartition(N)-->
         --mapInArrow(write shard)--> one summary row per shard task --collect--> driver

A row change goes to the shard of its key part (an update that changes the key is two rows at the
source: the put, and a delete of the old key's document), a DDL row to every shard, so every
shard task sees every floor and schema change of the batch. Rows are shuffled by a routing value
chosen so that Spark's hash partitioning sends shard ``i`` to partition ``i``. Tagging is Spark
SQL: no Python stage between the source and the shuffle.

A shard task reduces its rows to the latest change per document (the source reduced each range;
this reduces over the ranges), parsing the images of the rows that survive, applies them to
its shard folder with :class:`~spark_consumers.index.store.ChangeIndex` (newer versions only,
tombstones, floors) and commits before it returns its summary. Spark records the batch's offsets
only after every task succeeded; a retried or speculative task re-applies harmlessly (versions),
after waiting for the shard's writer lock if a dying attempt still holds it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa

from spark_consumers.decode import ChangeDecoder
from spark_consumers.index.shards import shard_of
from spark_consumers.index.store import ChangeIndex
from spark_consumers.latest import (
    Action,
    BatchChanges,
    apply_floors,
    ddl_columns,
    ddl_floor,
    keep_latest,
    newest_columns,
)
from spark_consumers.source.clients import SourceOptions

log = logging.getLogger(__name__)

COLUMNS = ["topic", "db", "table", "op", "doc", "commit_ts", "position", "image", "schema", "before", "types"]
SUMMARY_SCHEMA = (
    "shard int, rows long, put long, deleted long, max_commit_ts long, executor string, "
    "cpu_seconds double, attempt int, reduce_cpu_seconds double"
)
SUMMARY_ARROW = pa.schema(
    [("shard", pa.int32()), ("rows", pa.int64()), ("put", pa.int64()), ("deleted", pa.int64()),
     ("max_commit_ts", pa.int64()), ("executor", pa.string()), ("cpu_seconds", pa.float64()),
     ("attempt", pa.int32()), ("reduce_cpu_seconds", pa.float64())]
)  # fmt: skip
_loads = orjson.loads
LOCK_WAIT = 300.0  # seconds a task waits for a shard's writer lock held by a dying attempt

Batches = Iterator[pa.RecordBatch]


def routing_values(spark: Any, shards: int) -> list[int]:
    """For each shard i, an int whose Spark hash partitioning (``pmod(hash(v), shards)``, the
    function ``repartition(shards, col)`` uses) is i."""
    found: dict[int, int] = {}
    span = 16 * shards
    while len(found) < shards:
        frame = spark.range(span).selectExpr(
            "cast(id as int) as v", f"pmod(hash(cast(id as int)), {shards}) as p"
        )
        for row in frame.collect():
            found.setdefault(int(row["p"]), int(row["v"]))
        span *= 4
    return [found[i] for i in range(shards)]


def plan(changes: Any, shards: int, routes: Sequence[int], write: Callable[[Batches], Batches]) -> Any:
    """The batch's compact rows (the source's ``rows=latest``) tagged with their shard, shuffled so
    that shard ``i``'s rows are Spark partition ``i``, written by ``write``: a DataFrame of the
    shard tasks' summaries. Tagging is Spark SQL (no Python stage before the shuffle): the shard of
    a row change is its key part's hash modulo N (the hash is unsigned, Spark's long signed: the
    bits are the same, so a negative one adds 2^64 mod N); a DDL row goes to every shard."""
    from pyspark.sql import functions as F

    wrap = (1 << 64) % shards
    hashed = F.col("doc_hash")
    unsigned_mod = F.pmod(
        F.pmod(hashed, F.lit(shards)) + F.when(hashed < 0, F.lit(wrap)).otherwise(0), F.lit(shards)
    )
    every = F.sequence(F.lit(0), F.lit(shards - 1))
    shard = F.explode(F.when(F.col("doc").isNull(), every).otherwise(F.array(unsigned_mod.cast("int"))))
    tagged = changes.select(*COLUMNS, shard.alias("_shard"))  # only what the shard tasks read is shuffled
    route = F.element_at(F.array(*[F.lit(r) for r in routes]), F.col("_shard") + 1)
    return tagged.repartition(shards, route).mapInArrow(write, SUMMARY_SCHEMA)


Decoders = Callable[[str], ChangeDecoder]


def shard_writer(
    paths: Sequence[str], text_fields: Mapping[str, Sequence[str]], options: SourceOptions
) -> Callable[[Batches], Batches]:
    """The ``mapInArrow`` function of the shard tasks: apply, commit, one summary row per shard.
    Each task finds its rows' column kinds with its Python worker's decoder for the topic."""

    def write(batches: Batches) -> Batches:
        from spark_consumers.source.clients import _clients

        by_shard: dict[int, list[pa.RecordBatch]] = {}
        for batch in batches:
            for shard in set(batch.column("_shard").to_pylist()):
                mine = batch.filter(pa.compute.equal(batch.column("_shard"), shard))
                by_shard.setdefault(shard, []).append(mine)
        for shard, parts in sorted(by_shard.items()):
            rows = pa.Table.from_batches(parts).select(COLUMNS).to_pylist()
            summary = apply_shard(paths, shard, rows, text_fields, lambda t: _clients(options, t).decoder)
            yield pa.RecordBatch.from_pylist([summary], schema=SUMMARY_ARROW)

    return write


def reduce_rows(rows: list[dict[str, Any]], decoder_for: Decoders) -> BatchChanges:
    """Compact rows -> the latest action per document and the floors, by the same rules as
    :func:`~spark_consumers.latest.latest_per_document` over the full rows (a surviving row's image
    parsed once, here; its column kinds by its schema header)."""
    out = BatchChanges({}, [])
    for row in rows:
        out.rows += 1
        version = (int(row["commit_ts"]), int(row["position"]))
        out.max_commit_ts = max(out.max_commit_ts, version[0])
        op, db, table, doc = row["op"], row["db"], row["table"], row["doc"]
        if doc is None:
            floor = ddl_floor(db, table, op, row["before"], version)
            if floor is not None:
                out.floors.append(floor)
            continue
        doc_id = f"{db}/{table}/{doc}"
        held = out.actions.get(doc_id)
        if held is not None and held.version >= version:
            continue
        image = None if row["image"] is None else _loads(row["image"])
        types = decoder_for(row["topic"]).types_of(row["schema"])
        keep_latest(out.actions, [Action(doc_id, db, table, doc, version, image, types)])
    return apply_floors(out)


def apply_shard(
    paths: Sequence[str],
    shard: int,
    rows: list[dict[str, Any]],
    text_fields: Mapping[str, Sequence[str]],
    decoder_for: Decoders,
    placed_by_hash: bool = True,
) -> dict[str, Any]:
    """Reduce ``rows`` (every compact row routed to ``shard``), apply the shard's actions, commit.
    ``placed_by_hash``: the index's placement is ``hash`` (the direct mode's is the Kafka partition)."""
    cpu = time.process_time()
    changes = reduce_rows(rows, decoder_for)
    if placed_by_hash:
        for doc_id in [d for d, act in changes.actions.items() if shard_of(act.key, len(paths)) != shard]:
            del changes.actions[doc_id]  # cannot happen (rows come by their key part's shard); be sure
    reduced = time.process_time()
    index = open_writer(paths[shard], text_fields)
    try:
        put, deleted = index.apply(
            changes, newest_columns(changes, ddl_columns(r for r in rows if r["doc"] is None))
        )
    finally:
        index.close()
    from pyspark import TaskContext

    context = TaskContext.get()
    done = time.process_time()
    return {
        "shard": shard,
        "rows": len(rows),
        "put": put,
        "deleted": deleted,
        "max_commit_ts": changes.max_commit_ts,
        "executor": executor_label(),
        "cpu_seconds": done - cpu,
        "attempt": context.attemptNumber() if context is not None else 0,
        "reduce_cpu_seconds": reduced - cpu,
    }


def executor_label() -> str:
    """Which executor ran a task: its host and working folder (a standalone worker runs each
    executor in ``<work dir>/<app id>/<executor id>``)."""
    return f"{socket.gethostname()}:{os.getcwd()}"


def open_writer(path: str, text_fields: Mapping[str, Sequence[str]]) -> ChangeIndex:
    from pathlib import Path

    deadline = time.monotonic() + LOCK_WAIT
    while True:
        try:
            return ChangeIndex(Path(path), text_fields)
        except ValueError as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            log.info("%s: writer lock held (an earlier attempt of this shard?); waiting", path)
            time.sleep(0.5)
