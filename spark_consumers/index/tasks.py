"""The index job's micro-batch as Spark tasks: the shards are written where the data is.

For a batch of change rows the driver plans (:func:`sharded_batch`)::

    rows --mapInArrow(route)--> rows tagged with their shard --repartition(N)-->
         --mapInArrow(write shard)--> one summary row per shard task --collect--> driver

``route`` tags a row change with the shard of each document it touches (by the
key part of its id; an update that changes the key touches two, possibly in two
shards: the row goes to both) and a DDL row with every shard, so every shard task sees every floor and
schema change of the batch. Rows are shuffled by a routing value chosen so that
Spark's hash partitioning sends shard ``i`` to partition ``i``.

A shard task reduces its rows to the latest change per document
(:mod:`spark_consumers.latest`), keeps the actions of its own shard, applies
them to its shard folder with :class:`~spark_consumers.index.store.ChangeIndex`
(newer versions only, tombstones, floors) and commits before it returns its
summary. Spark records the batch's offsets only after every task succeeded; a
retried or speculative task re-applies harmlessly (versions), after waiting for
the shard's writer lock if a dying attempt still holds it.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from spark_consumers.index.shards import shard_of
from spark_consumers.index.store import ChangeIndex
from spark_consumers.latest import ROW_OPS, ddl_columns, document_keys, latest_per_document, newest_columns

log = logging.getLogger(__name__)

COLUMNS = ["db", "table", "op", "key", "before", "after", "types", "commit_ts", "position"]
SUMMARY_SCHEMA = (
    "shard int, rows long, put long, deleted long, max_commit_ts long, executor string, "
    "cpu_seconds double, attempt int"
)
SUMMARY_ARROW = pa.schema(
    [("shard", pa.int32()), ("rows", pa.int64()), ("put", pa.int64()), ("deleted", pa.int64()),
     ("max_commit_ts", pa.int64()), ("executor", pa.string()), ("cpu_seconds", pa.float64()),
     ("attempt", pa.int32())]
)  # fmt: skip
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


def router(shards: int, routes: Sequence[int]) -> Callable[[Batches], Batches]:
    """The ``mapInArrow`` function tagging change rows with ``_shard`` and ``_route``."""

    def route(batches: Batches) -> Batches:
        for batch in batches:
            ops, keys, befores, afters = (
                batch.column(c).to_pylist() for c in ("op", "key", "before", "after")
            )
            take: list[int] = []
            tags: list[int] = []
            for at, op in enumerate(ops):
                if op not in ROW_OPS:
                    targets: Sequence[int] = range(shards)
                else:
                    parts = document_keys(op, keys[at], befores[at], afters[at])
                    targets = sorted({shard_of(part, shards) for part in parts})
                take.extend([at] * len(targets))
                tags.extend(targets)
            out = batch.take(pa.array(take, pa.int32()))
            out = out.append_column("_shard", pa.array(tags, pa.int32()))
            yield out.append_column("_route", pa.array([routes[t] for t in tags], pa.int32()))

    return route


def shard_writer(
    paths: Sequence[str], text_fields: Mapping[str, Sequence[str]]
) -> Callable[[Batches], Batches]:
    """The ``mapInArrow`` function of the shard tasks: apply, commit, one summary row per shard."""

    def write(batches: Batches) -> Batches:
        by_shard: dict[int, list[pa.RecordBatch]] = {}
        for batch in batches:
            for shard in set(batch.column("_shard").to_pylist()):
                mine = batch.filter(pa.compute.equal(batch.column("_shard"), shard))
                by_shard.setdefault(shard, []).append(mine)
        for shard, parts in sorted(by_shard.items()):
            rows = pa.Table.from_batches(parts).select(COLUMNS).to_pylist()
            summary = apply_shard(paths, shard, rows, text_fields)
            yield pa.RecordBatch.from_pylist([summary], schema=SUMMARY_ARROW)

    return write


def apply_shard(
    paths: Sequence[str], shard: int, rows: list[dict[str, Any]], text_fields: Mapping[str, Sequence[str]]
) -> dict[str, Any]:
    """Reduce ``rows`` (every row routed to ``shard``), apply the shard's actions and commit."""
    cpu = time.process_time()
    changes = latest_per_document(rows)
    for doc_id in [d for d, act in changes.actions.items() if shard_of(act.key, len(paths)) != shard]:
        del changes.actions[doc_id]  # the other key of a key-changing update: another shard's
    index = _open_writer(paths[shard], text_fields)
    try:
        put, deleted = index.apply(changes, newest_columns(changes, ddl_columns(rows)))
    finally:
        index.close()
    from pyspark import TaskContext

    context = TaskContext.get()
    return {
        "shard": shard,
        "rows": len(rows),
        "put": put,
        "deleted": deleted,
        "max_commit_ts": changes.max_commit_ts,
        "executor": executor_label(),
        "cpu_seconds": time.process_time() - cpu,
        "attempt": context.attemptNumber() if context is not None else 0,
    }


def executor_label() -> str:
    """Which executor ran a task: its host and working folder (a standalone worker runs each
    executor in ``<work dir>/<app id>/<executor id>``)."""
    return f"{socket.gethostname()}:{os.getcwd()}"


def _open_writer(path: str, text_fields: Mapping[str, Sequence[str]]) -> ChangeIndex:
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
