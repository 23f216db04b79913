"""A child process that writes chunked transactions into a pump storage until killed,
and the binlogs of the chunk tests.

    python -m tests.support.chunk_writer DATA_DIR BASE_TS [WRITERS]

Prints ``READY`` once the storage is open, then ``ACK <start_ts> <commit_ts> <parts>``
once a transaction's Commit was acknowledged (its parts, each acknowledged before
the next, and its Prewrite came before). The parts' contents follow from
``(start_ts, chunk)`` (:func:`part_binlog`), so the parent can check what it pulls.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import sys
from pathlib import Path

from bridge.binlog import Binlog, BinlogType, commit
from bridge.proto import binlog_pb2
from pump.storage import Storage, StorageConfig

CONFIG = StorageConfig(segment_size=256 * 1024)


def _row(start_ts: int, chunk: int) -> bytes:
    return hashlib.sha256(b"%d/%d" % (start_ts, chunk)).digest()


def part_binlog(start_ts: int, chunk: int, size: int = 200) -> Binlog:
    """Part ``chunk`` of ``start_ts``: one insert of a row of about ``size`` bytes."""
    row = _row(start_ts, chunk) * max(1, size // 32)
    value = binlog_pb2.PrewriteValue(
        schema_version=3,
        mutations=[
            binlog_pb2.TableMutation(
                table_id=7, inserted_rows=[row], sequence=[binlog_pb2.MutationType.Insert]
            )
        ],
    )
    return Binlog(
        tp=BinlogType.PrewriteChunk, start_ts=start_ts, chunk=chunk, prewrite_value=value.SerializeToString()
    )


def part_is_intact(binlog: Binlog) -> bool:
    """True when a pulled part carries what :func:`part_binlog` wrote for its (start_ts, chunk)."""
    value = binlog_pb2.PrewriteValue.FromString(binlog.prewrite_value)
    (row,) = value.mutations[0].inserted_rows
    pattern = _row(binlog.start_ts, binlog.chunk)
    return len(row) % 32 == 0 and row == pattern * (len(row) // 32)


def final_binlog(start_ts: int, chunks: int) -> Binlog:
    """The Prewrite of ``start_ts`` after ``chunks`` parts (an ordinary one when 0)."""
    value = binlog_pb2.PrewriteValue(schema_version=3)
    binlog = Binlog(
        tp=BinlogType.Prewrite,
        start_ts=start_ts,
        prewrite_key=b"k%d" % start_ts,
        prewrite_value=value.SerializeToString(),
    )
    if chunks:
        binlog.chunks = chunks
    return binlog


async def writer(storage: Storage, clock: itertools.count[int], rng: random.Random) -> None:
    while True:
        start_ts, n = next(clock), rng.randint(1, 5)
        for chunk in range(1, n + 1):
            part = part_binlog(start_ts, chunk, rng.randint(100, 30_000))
            await storage.write([(part, part.SerializeToString())])
        final = final_binlog(start_ts, n)
        await storage.write([(final, final.SerializeToString())])
        commit_ts = next(clock)
        done = commit(start_ts, commit_ts)
        await storage.write([(done, done.SerializeToString())])
        print("ACK", start_ts, commit_ts, n, flush=True)


async def main(data_dir: Path, base_ts: int, writers: int) -> None:
    storage = await Storage.open(data_dir, CONFIG)
    print("READY", flush=True)
    clock = itertools.count(base_ts)
    rng = random.Random(base_ts)
    await asyncio.gather(*(writer(storage, clock, random.Random(rng.random())) for _ in range(writers)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 4))
