"""Keys per second invalidated by the redis sink, against a bare redis-py client deleting the same keys.

Data: the 8-column ``bench.orders`` table of ``bench drainer`` (primary key
``id``), ``--rows`` rows updated (a non-key column changes) in transactions
of ``--rows-per-txn``, built before anything is timed as the drainer's own
events (:class:`~bridge.sink.events.TxnEvent`\\ s whose rows are already
decoded, as the syncer hands them over). One rule, the default template
``{db}:{table}:{pk}`` under a prefix of the run's own: one key per row.

``value``: before each run every key is written (``SET``, not timed); then a
:class:`drainer.sinks.redis.RedisSink` with its default delivery settings
(UNLINK, ``batch-commands``, ``del-batch-keys``) gets every transaction in
``write`` calls of ``--events-per-write`` events, then ``flush``: keys/s from
the first write to the flush that returns the last commit_ts (template
rendering from the before and after images, merging, pipelining, the
replies checked), and every key must be gone.

``ceiling``: in the same run, the same keys (rendered beforehand, not timed)
written again and deleted by a bare ``redis.Redis`` client: a non-transactional
pipeline of UNLINK commands of ``del-batch-keys`` keys each, executed every
``batch-commands`` keys — the sink's own batching, without the sink. ``ratio``
= value / ceiling. Each side runs ``--repeat`` times, alternating; the best
run of each is reported. ``per_key_pipeline`` is a third, informational
figure: the same client sending one ``DEL`` per key, ``batch-commands``
commands per pipeline (what "pipelined DEL" usually means); the sink merges
keys, so it is not the bound. ``cpu_us_per_key``: this process's CPU
(``time.process_time``) per key in each run's timed window, by side — the
sink's includes redis-py under it; Redis's own CPU is in neither.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import redis

from bench.drainer import row_values, table_schema
from bench.result import best_of
from bridge.rowcodec import RowCodec
from bridge.sink.contract import SinkContext
from bridge.sink.events import Event, RowChange, TxnEvent
from bridge.tso import compose
from drainer.sinks.redis.config import RedisSinkConfig, load_config, safe_url

DEFAULT_URL = os.environ.get("BRIDGE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=DEFAULT_URL, help=f"Redis (default {DEFAULT_URL})")
    parser.add_argument("--rows", type=int, default=200_000, help="rows updated (default 200000)")
    parser.add_argument("--rows-per-txn", type=int, default=10, help="rows per transaction (default 10)")
    parser.add_argument(
        "--events-per-write", type=int, default=256, help="events per sink.write call (default 256)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side, best kept (default 3)")
    parser.add_argument("--timeout", type=float, default=600.0, help="time limit of one run (default 600 s)")


def progress(message: str) -> None:
    print(f"bench redis: {message}", file=sys.stderr, flush=True)


def build_events(args: argparse.Namespace) -> list[TxnEvent]:
    """Every transaction: updates of ``bench.orders`` rows, decoded exactly as the syncer hands them over."""
    schema = table_schema()
    codec = RowCodec(schema)
    base = compose(int(time.time() * 1000), 0)
    txns: list[TxnEvent] = []
    for n, first in enumerate(range(0, args.rows, args.rows_per_txn)):
        rows = []
        for i in range(first, min(first + args.rows_per_txn, args.rows)):
            before = row_values(i)
            after = (*before[:7], f"note {i} revised")
            rows.append(
                RowChange(
                    "update", schema, codec.decode(codec.encode(before)), codec.decode(codec.encode(after))
                )
            )
        commit_ts = base + 10 + 2 * n
        txns.append(TxnEvent(commit_ts - 1, commit_ts, b"", decode=_replay(rows), row_count=len(rows)))
    return txns


def _replay(rows: list[RowChange]) -> Callable[[], Iterator[RowChange]]:
    return lambda: iter(rows)


def fill(client: redis.Redis, keys: Sequence[str]) -> None:
    """Write every key (what the application cached), not timed."""
    for start in range(0, len(keys), 10_000):
        client.mset(dict.fromkeys(keys[start : start + 10_000], b"cached"))


def left(client: redis.Redis, prefix: str) -> int:
    return sum(1 for _ in client.scan_iter(match=f"{prefix}*", count=10_000))


def measure_sink(args: argparse.Namespace, txns: Sequence[TxnEvent], prefix: str, keys: Sequence[str],
                 client: redis.Redis, data_dir: Path) -> tuple[float, float]:  # fmt: skip
    """Keys/s of the redis sink from the first write to the flush that returns the last commit_ts, and
    the CPU µs per key this process spent meanwhile (the sink and redis-py under it)."""
    from drainer.sinks.redis import RedisSink

    sink = RedisSink({"url": args.url, "rules": [{"keys": [f"{prefix}{{db}}:{{table}}:{{pk}}"]}]}, data_dir)
    sink.open(SinkContext(resume_ts=txns[0].commit_ts - 5, cluster_id=1, tables=(table_schema(),)))
    fill(client, keys)
    try:
        last = txns[-1].commit_ts
        step = args.events_per_write
        began, cpu = time.perf_counter(), time.process_time()
        for i in range(0, len(txns), step):
            events: list[Event] = list(txns[i : i + step])
            sink.write(events)
        position = sink.flush()
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    finally:
        sink.close()
    if position != last:
        raise RuntimeError(f"redis sink: flushed to commit_ts {position}, not {last}")
    if left(client, prefix):
        raise RuntimeError("redis sink: keys survived the invalidation")
    rate = len(keys) / elapsed
    progress(f"redis sink: {len(keys):,} keys in {elapsed:.2f}s = {rate:,.0f} keys/s")
    return rate, cpu * 1e6 / len(keys)


def measure_bare(
    keys: Sequence[str],
    prefix: str,
    client: redis.Redis,
    what: str,
    queue: Callable[[Any, Sequence[str]], None],
    batch_commands: int,
) -> tuple[float, float]:
    """Keys/s of a bare client deleting ``keys``: ``queue(pipeline, batch)`` puts the commands of each
    ``batch_commands`` keys in a non-transactional pipeline, executed once per batch; and the CPU µs
    per key this process spent meanwhile."""
    fill(client, keys)
    began, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(keys), batch_commands):
        pipe = client.pipeline(transaction=False)
        queue(pipe, keys[start : start + batch_commands])
        pipe.execute()
    elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
    if left(client, prefix):
        raise RuntimeError(f"{what}: keys survived")
    rate = len(keys) / elapsed
    progress(f"{what}: {len(keys):,} keys in {elapsed:.2f}s = {rate:,.0f} keys/s")
    return rate, cpu * 1e6 / len(keys)


def unlink_in_chunks(chunk: int) -> Callable[[Any, Sequence[str]], None]:
    """The ceiling's commands: UNLINK of ``chunk`` keys at a time (the sink's del-batch-keys)."""

    def queue(pipe: Any, batch: Sequence[str]) -> None:
        for start in range(0, len(batch), chunk):
            pipe.execute_command("UNLINK", *batch[start : start + chunk])

    return queue


def del_each(pipe: Any, batch: Sequence[str]) -> None:
    """One DEL per key (informational: not what the sink does)."""
    for key in batch:
        pipe.delete(key)


def run(args: argparse.Namespace) -> dict[str, Any]:
    if (
        args.rows < 1
        or not 1 <= args.rows_per_txn <= args.rows
        or args.events_per_write < 1
        or args.repeat < 1
    ):
        raise SystemExit(
            "bench redis: --rows >= 1, --rows-per-txn 1..rows, --events-per-write >= 1, --repeat >= 1"
        )
    defaults = load_config({})
    txns = build_events(args)
    prefix = f"bench-redis-{uuid.uuid4().hex[:8]}:"
    keys = [f"{prefix}bench:orders:{i}" for i in range(args.rows)]
    progress(f"{len(txns):,} transactions, {len(keys):,} keys pre-built; Redis {safe_url(args.url)}")
    client = redis.Redis.from_url(args.url)
    unlink, batch = unlink_in_chunks(defaults.del_batch_keys), defaults.batch_commands
    values, ceilings = [], []
    cpu: dict[str, list[float]] = {"sink": [], "bare_client": []}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-redis-") as name:
            for _ in range(args.repeat):
                rate, used = measure_bare(keys, prefix, client, "bare client", unlink, batch)
                ceilings.append(rate)
                cpu["bare_client"].append(round(used, 3))
                rate, used = measure_sink(args, txns, prefix, keys, client, Path(name))
                values.append(rate)
                cpu["sink"].append(round(used, 3))
            per_key, _ = measure_bare(keys, prefix, client, "bare client, one DEL per key", del_each, batch)
    finally:
        client.close()
    return {**result(args, values, ceilings, per_key, defaults), "cpu_us_per_key": cpu}


def result(
    args: argparse.Namespace,
    values: list[float],
    ceilings: list[float],
    per_key: float,
    sink: RedisSinkConfig,
) -> dict[str, Any]:
    """The JSON object of the run: the best of each side."""
    return {
        **best_of("redis", "keys/s", values, ceilings, "bare_client"),
        "per_key_pipeline": round(per_key, 1),
        "params": {
            "rows": args.rows,
            "rows_per_txn": args.rows_per_txn,
            "events_per_write": args.events_per_write,
            "columns": len(table_schema().columns),
            "batch_commands": sink.batch_commands,
            "del_batch_keys": sink.del_batch_keys,
            "unlink": sink.unlink,
        },
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "ceiling_is": "the same keys deleted by a bare redis-py client: a non-transactional pipeline of "
        "UNLINK commands of del-batch-keys keys, executed every batch-commands keys (the sink's batching)",
    }
