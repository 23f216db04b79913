"""A child process that writes transactions into a pump storage until it is killed.

    python -m tests.support.storage_writer DATA_DIR BASE_TS [WRITERS]

Prints ``READY`` once the storage is open, then one line per acknowledged
write call, after ``await storage.write`` returned::

    ACK P <start_ts> [<start_ts> ...]           Prewrites
    ACK C <start_ts>:<commit_ts> [...]          Commits
    ACK R <start_ts> [...]                      Rollbacks

Timestamps come from a counter starting at BASE_TS; a Commit's commit_ts is
taken after its Prewrite was acknowledged, as two-phase commit does. The
Prewrite payload of a transaction is :func:`prewrite_payload` of its start_ts,
so the parent can check what it pulls.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bridge.binlog import Binlog, BinlogType, commit, rollback
from pump.storage import Storage, StorageConfig

CONFIG = StorageConfig(segment_size=256 * 1024)


_ACK = re.compile(r"^ACK ([PCR]) (.*)$")


@dataclass
class Acked:
    """What the child's ACK lines say was acknowledged."""

    prewrites: set[int] = field(default_factory=set)
    commits: dict[int, int] = field(default_factory=dict)
    rollbacks: set[int] = field(default_factory=set)

    def add_output(self, output: str) -> None:
        for line in output.splitlines():
            if not (m := _ACK.match(line)):
                continue
            kind, values = m.group(1), m.group(2).split()
            if kind == "P":
                self.prewrites.update(map(int, values))
            elif kind == "R":
                self.rollbacks.update(map(int, values))
            else:
                for pair in values:
                    start_ts, commit_ts = pair.split(":")
                    self.commits[int(start_ts)] = int(commit_ts)


def prewrite_value(start_ts: int) -> bytes:
    seed = hashlib.sha256(start_ts.to_bytes(8, "big")).digest()
    return seed * (1 + start_ts % 40)


def prewrite_binlog(start_ts: int) -> Binlog:
    return Binlog(
        tp=BinlogType.Prewrite,
        start_ts=start_ts,
        prewrite_key=b"k%d" % start_ts,
        prewrite_value=prewrite_value(start_ts),
    )


def prewrite_payload(start_ts: int) -> bytes:
    return prewrite_binlog(start_ts).SerializeToString()


async def writer(storage: Storage, clock: itertools.count[int], rng: random.Random) -> None:
    while True:
        starts = [next(clock) for _ in range(rng.randint(1, 6))]
        await storage.write([(b, b.SerializeToString()) for b in map(prewrite_binlog, starts)])
        print("ACK P", *starts, flush=True)
        rng.shuffle(starts)
        cut = rng.randint(0, len(starts))
        committed = [(s, next(clock)) for s in starts[:cut]]
        rolled_back = starts[cut:]
        if committed:
            commits = [commit(s, c) for s, c in committed]
            await storage.write([(b, b.SerializeToString()) for b in commits])
            print("ACK C", *(f"{s}:{c}" for s, c in committed), flush=True)
        if rolled_back:
            rollbacks = [rollback(s) for s in rolled_back]
            await storage.write([(b, b.SerializeToString()) for b in rollbacks])
            print("ACK R", *rolled_back, flush=True)


async def main(data_dir: Path, base_ts: int, writers: int) -> None:
    storage = await Storage.open(data_dir, CONFIG)
    print("READY", flush=True)
    clock = itertools.count(base_ts)
    rng = random.Random(base_ts)
    await asyncio.gather(*(writer(storage, clock, random.Random(rng.random())) for _ in range(writers)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 8))
