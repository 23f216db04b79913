"""Benchmark of the embedded ordered key-value engines a pump's index could use.

Run ``python -m bench.pump_index [--count N] [--batch B]`` (or register the
module with ``binlog-bridge bench``: it has ``add_arguments`` and ``run``). For every engine
that imports here (LMDB, RocksDB via rocksdict, LevelDB via plyvel, SQLite) it
replays the pump index's workload and prints one JSON object per engine and
durability mode; the last line is the summary: ``value`` is the chosen
engine's throughput, ``ceiling`` the fastest engine's, both in transactions
per second (indexed and then scanned once).

The workload is the one ``pump.storage.index`` performs: every transaction
puts ``p`` + start_ts → 12-byte pointer when its Prewrite is indexed, and one
batch later puts ``c`` + commit_ts → 20-byte value and deletes the ``p`` key
(its Commit), in write batches of ``--batch`` transactions; then a puller scans
every ``c`` key in order, 1,000 keys per range read, each read starting after
the last key seen.

``--storage`` measures the whole storage engine instead (``pump.storage``):
concurrent clients write 1 KB Prewrites and then their Commits (commit_ts
taken after the Prewrite is acknowledged) through group commit, with fsync on
and with ``sync = false``; one JSON object per mode with binlogs/s and the
latency of a write call.

Durability modes:

- ``consistent``: a crash of the process or of the machine leaves a consistent
  index that may lack the newest batches (fine: the chaser replays them from
  the value log). LMDB needs ``metasync=False`` (one fdatasync per commit) for
  that; RocksDB and LevelDB write their WAL without fsync; SQLite uses
  WAL with ``synchronous=NORMAL``.
- ``fsync``: every batch is on disk when the write returns.
- ``nosync`` (LMDB only): no fsync at all, safe against a killed process but
  not against a machine crash.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import sqlite3
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

CHOSEN = ("lmdb", "consistent")
SCAN_PAGE = 1000
_TS = struct.Struct(">Q")


class Engine(Protocol):
    def write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None: ...

    def scan(self, after: bytes, upto: bytes, limit: int) -> list[tuple[bytes, bytes]]: ...

    def close(self) -> None: ...


class LmdbEngine:
    def __init__(self, path: Path, mode: str) -> None:
        import lmdb

        sync = mode != "nosync"
        self.env = lmdb.open(str(path), map_size=1 << 34, sync=sync, metasync=mode == "fsync")

    def write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        with self.env.begin(write=True) as txn:
            for key, value in puts:
                txn.put(key, value)
            for key in deletes:
                txn.delete(key)

    def scan(self, after: bytes, upto: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        with self.env.begin() as txn:
            cursor = txn.cursor()
            if not cursor.set_range(after):
                return out
            for key, value in cursor:
                if key == after:
                    continue
                if key > upto or len(out) >= limit:
                    break
                out.append((key, value))
        return out

    def close(self) -> None:
        self.env.close()


class RocksEngine:
    def __init__(self, path: Path, mode: str) -> None:
        import rocksdict

        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        self.rocksdict = rocksdict
        self.db = rocksdict.Rdict(str(path), options)
        write_options = rocksdict.WriteOptions()
        write_options.sync = mode == "fsync"
        self.db.set_write_options(write_options)

    def write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        batch = self.rocksdict.WriteBatch(raw_mode=True)
        for key, value in puts:
            batch.put(key, value)
        for key in deletes:
            batch.delete(key)
        self.db.write(batch)

    def scan(self, after: bytes, upto: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        it = self.db.iter()
        it.seek(after)
        while it.valid():
            key = it.key()
            if key != after:
                if key > upto or len(out) >= limit:
                    break
                out.append((key, it.value()))
            it.next()
        return out

    def close(self) -> None:
        self.db.close()


class LevelEngine:
    def __init__(self, path: Path, mode: str) -> None:
        import plyvel  # type: ignore[import-untyped]

        self.sync = mode == "fsync"
        self.db = plyvel.DB(str(path), create_if_missing=True)

    def write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        with self.db.write_batch(sync=self.sync) as batch:
            for key, value in puts:
                batch.put(key, value)
            for key in deletes:
                batch.delete(key)

    def scan(self, after: bytes, upto: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        for key, value in self.db.iterator(start=after, stop=upto, include_start=False, include_stop=True):
            if len(out) >= limit:
                break
            out.append((key, value))
        return out

    def close(self) -> None:
        self.db.close()


class SqliteEngine:
    def __init__(self, path: Path, mode: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path / "index.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={'FULL' if mode == 'fsync' else 'NORMAL'}")
        self.db.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID")

    def write(self, puts: list[tuple[bytes, bytes]], deletes: list[bytes]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", puts)
        self.db.executemany("DELETE FROM kv WHERE k = ?", [(k,) for k in deletes])
        self.db.execute("COMMIT")

    def scan(self, after: bytes, upto: bytes, limit: int) -> list[tuple[bytes, bytes]]:
        rows = self.db.execute(
            "SELECT k, v FROM kv WHERE k > ? AND k <= ? ORDER BY k LIMIT ?", (after, upto, limit)
        )
        return [(bytes(k), bytes(v)) for k, v in rows]

    def close(self) -> None:
        self.db.close()


ENGINES: dict[str, Callable[[Path, str], Engine]] = {
    "lmdb": LmdbEngine,
    "rocksdb": RocksEngine,
    "leveldb": LevelEngine,
    "sqlite": SqliteEngine,
}
MODES = {"lmdb": ("consistent", "fsync", "nosync")}


@dataclass
class Result:
    engine: str
    mode: str
    count: int
    write_s: float
    scan_s: float

    @property
    def txns_per_s(self) -> float:
        return self.count / (self.write_s + self.scan_s)

    def as_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "mode": self.mode,
            "txns": self.count,
            "write_txns_per_s": round(self.count / self.write_s),
            "scan_keys_per_s": round(self.count / self.scan_s),
            "txns_per_s": round(self.txns_per_s),
        }


def batches(count: int, batch: int) -> Iterator[tuple[list[tuple[bytes, bytes]], list[bytes]]]:
    """Index write batches: this batch's Prewrites, the previous batch's Commits."""
    pointer = struct.pack("<IQ", 1, 0)
    previous: list[int] = []
    for first in range(0, count + batch, batch):
        current = list(range(first, min(first + batch, count)))
        puts = [(b"p" + _TS.pack(2 * i + 1), pointer) for i in current]
        puts += [(b"c" + _TS.pack(2 * i + 2), _TS.pack(2 * i + 1) + pointer) for i in previous]
        deletes = [b"p" + _TS.pack(2 * i + 1) for i in previous]
        yield puts, deletes
        previous = current


def run_engine(name: str, mode: str, count: int, batch: int, root: Path) -> Result:
    path = root / f"{name}-{mode}"
    engine = ENGINES[name](path, mode)
    try:
        start = time.perf_counter()
        for puts, deletes in batches(count, batch):
            engine.write(puts, deletes)
        written = time.perf_counter()
        seen, cursor, upto = 0, b"c", b"c" + _TS.pack(2**64 - 1)
        while page := engine.scan(cursor, upto, SCAN_PAGE):
            seen += len(page)
            cursor = page[-1][0]
        scanned = time.perf_counter()
    finally:
        engine.close()
        shutil.rmtree(path, ignore_errors=True)
    if seen != count:
        raise RuntimeError(f"{name}/{mode}: scanned {seen} commit keys, wrote {count}")
    return Result(name, mode, count, written - start, scanned - written)


def available(name: str) -> bool:
    module = {"lmdb": "lmdb", "rocksdb": "rocksdict", "leveldb": "plyvel", "sqlite": "sqlite3"}[name]
    try:
        __import__(module)
    except ImportError:
        return False
    return True


async def _storage_run(
    data_dir: Path, sync: bool, index_sync: bool, binlogs: int, clients: int, per_call: int
) -> dict[str, Any]:
    from bridge.binlog import Binlog, BinlogType, commit
    from pump.storage import Storage, StorageConfig

    storage = await Storage.open(data_dir, StorageConfig(sync=sync, index_sync=index_sync))
    clock = iter(range(1000, 1 << 62))
    value = os.urandom(1000)
    latencies: list[float] = []

    async def client(rounds: int) -> None:
        for _ in range(rounds):
            prewrites = [
                Binlog(tp=BinlogType.Prewrite, start_ts=next(clock), prewrite_value=value)
                for _ in range(per_call)
            ]
            started = time.perf_counter()
            await storage.write([(b, b.SerializeToString()) for b in prewrites])
            latencies.append(time.perf_counter() - started)
            commits = [commit(p.start_ts, next(clock)) for p in prewrites]
            started = time.perf_counter()
            await storage.write([(b, b.SerializeToString()) for b in commits])
            latencies.append(time.perf_counter() - started)

    rounds = max(1, binlogs // (2 * per_call * clients))
    started = time.perf_counter()
    await asyncio.gather(*(client(rounds) for _ in range(clients)))
    elapsed = time.perf_counter() - started
    stats = storage.stats()
    await storage.close()
    return _storage_result(stats, elapsed, sorted(latencies), sync, index_sync) | {
        "clients": clients,
        "binlogs_per_call": per_call,
    }


def _storage_result(
    stats: Any, elapsed: float, latencies: list[float], sync: bool, index_sync: bool
) -> dict[str, Any]:
    return {
        "mode": ("fsync" if sync else "sync=false") + ("" if index_sync else ", index-sync=false"),
        "binlogs": stats.records,
        "binlogs_per_s": round(stats.records / elapsed),
        "call_p50_ms": round(latencies[len(latencies) // 2] * 1000, 2),
        "call_p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
        "group_commits": stats.batches,
        "binlogs_per_group_commit": round(stats.records / max(1, stats.batches), 1),
    }


def run_storage(args: argparse.Namespace) -> dict[str, Any]:
    logging.basicConfig(level=logging.ERROR)
    results = []
    for sync, index_sync in ((True, True), (False, False), (True, False)):
        root = Path(tempfile.mkdtemp(prefix="pump-storage-bench-", dir=args.dir))
        try:
            scenario = _storage_run(root, sync, index_sync, args.count, args.clients, args.per_call)
            result = asyncio.run(scenario)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        results.append(result)
        print(json.dumps(result), flush=True)
    durable, unsynced = results[0], results[1]
    return {
        "name": "pump_storage_write",
        "value": durable["binlogs_per_s"],
        "unit": "binlogs/s",
        "ceiling": unsynced["binlogs_per_s"],
        "ratio": round(durable["binlogs_per_s"] / unsynced["binlogs_per_s"], 3),
    }


def run_index(args: argparse.Namespace) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="pump-index-bench-", dir=args.dir))
    results: list[Result] = []
    try:
        for name in ENGINES:
            if not available(name):
                print(json.dumps({"engine": name, "skipped": "not installed"}), flush=True)
                continue
            for mode in MODES.get(name, ("consistent", "fsync")):
                result = run_engine(name, mode, args.count, args.batch, root)
                results.append(result)
                print(json.dumps(result.as_json()), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return summary(results)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--count", type=int, default=100_000, help="transactions (or --storage: binlogs)")
    parser.add_argument("--batch", type=int, default=256, help="transactions per index write batch")
    parser.add_argument("--dir", type=Path, default=None, help="where to put the databases")
    parser.add_argument("--storage", action="store_true", help="benchmark pump.storage writes instead")
    parser.add_argument("--clients", type=int, default=64, help="--storage: concurrent clients")
    parser.add_argument("--per-call", type=int, default=16, help="--storage: binlogs per write call")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Print one JSON object per engine (or storage mode); return the summary."""
    return run_storage(args) if args.storage else run_index(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    print(json.dumps(run(parser.parse_args(argv))), flush=True)
    return 0


def summary(results: list[Result]) -> dict[str, Any]:
    consistent = [r for r in results if r.mode == "consistent"]
    fastest = max(consistent, key=lambda r: r.txns_per_s)
    chosen = next(r for r in consistent if (r.engine, r.mode) == CHOSEN)
    return {
        "name": "pump_index",
        "value": round(chosen.txns_per_s),
        "unit": "txns/s",
        "ceiling": round(fastest.txns_per_s),
        "ratio": round(chosen.txns_per_s / fastest.txns_per_s, 3),
        "chosen": chosen.engine,
        "fastest": fastest.engine,
    }


if __name__ == "__main__":
    sys.exit(main())
