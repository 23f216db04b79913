"""The index: an LMDB database mapping timestamps to value-log pointers.

Why LMDB (numbers in docs/pump-storage.md): with batched writes it indexes as
fast as RocksDB and LevelDB and faster than SQLite, and its ordered range
reads, the puller's hot path, are 2-3 times faster than the others'; it is
one small C library with no background threads, and readers never block the
single writer.

Keys (all integers big-endian, so byte order is numeric order)::

    b"c" + commit_ts u64  ->  start_ts u64 | segment u32 | offset u64   a committed transaction
    b"p" + start_ts u64   ->  segment u32 | offset u64                  an unpaired Prewrite
    b"o" + start_ts u64   ->  commit_ts u64                             an orphan Commit
    b"k" + start_ts u64 + chunk u32  ->  segment u32 | offset u64       a PrewriteChunk (part)
    b"m:applied"          ->  segment u32 | offset u64                  value-log position indexed
    b"m:watermark", b"m:max-seen", b"m:latest", b"m:gc-ts"  ->  u64

A Prewrite announces how many parts its transaction has (``chunks``): when
it is applied, ``k`` entries of its start_ts above that number (parts an
earlier, cut-short attempt of the producer left, e.g. parts 4 and 5 before a
retry wrote 1..3 and a Prewrite with ``chunks = 3``) are deleted in the same
LMDB transaction. While no ``k`` key exists this costs one lookup per
stretch, else one range seek per Prewrite. (Parts that arrive after their
Prewrite are not deleted here; the pull ignores them, GC removes them.)

Everything the chaser derives from one stretch of the log, including the
position after it, is written in one LMDB transaction, so the index is always
the sorter's state at exactly ``m:applied``; the chaser replays the log from
there on open. The environment is opened with ``metasync=False``: a machine
crash may lose the last transactions but leaves the index consistent; with
``index-sync = false`` there is no fdatasync at all (safe against a killed
process, not against a machine crash).
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Any, NamedTuple

import lmdb

from pump.storage.segment import Pointer
from pump.storage.sorter import Changes, Committed, Part, SorterState

log = logging.getLogger(__name__)

_TS = struct.Struct(">Q")
_PTR = struct.Struct(">IQ")
_COMMIT = struct.Struct(">QIQ")
_PART = struct.Struct(">QI")

COMMIT, UNPAIRED, ORPHAN, PART = b"c", b"p", b"o", b"k"
APPLIED = b"m:applied"
WATERMARK, MAX_SEEN, LATEST, GC_TS = b"m:watermark", b"m:max-seen", b"m:latest", b"m:gc-ts"
DELETE_CHUNK = 10_000


class Marks(NamedTuple):
    """The sorter's clocks, persisted with every applied stretch."""

    watermark: int
    max_seen: int
    latest_ts: int


def ts_key(prefix: bytes, ts: int) -> bytes:
    return prefix + _TS.pack(ts)


def _u64(value: bytes | None) -> int:
    return int(_TS.unpack(value)[0]) if value is not None else 0


def _pointer(value: bytes) -> Pointer:
    segment, offset = _PTR.unpack(value)
    return Pointer(segment, offset)


class Index:
    """The LMDB index; one thread writes (the chaser), any thread reads."""

    def __init__(self, path: Path, *, map_size: int, sync: bool) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._env: Any = lmdb.open(
            str(path), map_size=map_size, sync=sync, metasync=False, readahead=False, max_dbs=0
        )

    def load(self) -> tuple[Pointer | None, int, SorterState]:
        """(applied position or None for a new index, gc ts, sorter state)."""
        with self._env.begin() as txn:
            applied_raw = txn.get(APPLIED)
            state = SorterState(
                watermark=_u64(txn.get(WATERMARK)),
                max_seen=_u64(txn.get(MAX_SEEN)),
                latest_ts=_u64(txn.get(LATEST)),
                unpaired={int(_TS.unpack(k[1:])[0]): _pointer(v) for k, v in _prefixed(txn, UNPAIRED)},
                orphans={int(_TS.unpack(k[1:])[0]): _u64(v) for k, v in _prefixed(txn, ORPHAN)},
            )
            gc_ts = _u64(txn.get(GC_TS))
        applied = _pointer(applied_raw) if applied_raw is not None else None
        return applied, gc_ts, state

    def apply(self, changes: Changes, marks: Marks, applied: Pointer) -> None:
        """Persist one stretch of sorter output and the position after it, atomically."""
        with self._env.begin(write=True) as txn:
            for commit_ts, start_ts, pointer in changes.committed:
                txn.put(ts_key(COMMIT, commit_ts), _COMMIT.pack(start_ts, pointer.segment, pointer.offset))
            for start_ts, unpaired in changes.unpaired.items():
                key = ts_key(UNPAIRED, start_ts)
                if unpaired is None:
                    txn.delete(key)
                else:
                    txn.put(key, _PTR.pack(*unpaired))
            for start_ts, orphan_commit_ts in changes.orphans.items():
                key = ts_key(ORPHAN, start_ts)
                if orphan_commit_ts is None:
                    txn.delete(key)
                else:
                    txn.put(key, _TS.pack(orphan_commit_ts))
            for start_ts, chunk, pointer in changes.parts:  # a second copy replaces the first
                txn.put(PART + _PART.pack(start_ts, chunk), _PTR.pack(*pointer))
            if changes.announced and _holds_parts(txn):
                for start_ts, chunks in changes.announced:
                    _delete_stale_parts(txn, start_ts, chunks)
            txn.put(WATERMARK, _TS.pack(marks.watermark))
            txn.put(MAX_SEEN, _TS.pack(marks.max_seen))
            txn.put(LATEST, _TS.pack(marks.latest_ts))
            txn.put(APPLIED, _PTR.pack(*applied))

    def has_commit(self, commit_ts: int) -> bool:
        with self._env.begin() as txn:
            return txn.get(ts_key(COMMIT, commit_ts)) is not None

    def commits(self, after: int, upto: int, limit: int) -> list[Committed]:
        """Committed transactions with after < commit_ts <= upto, in order, at most ``limit``."""
        out: list[Committed] = []
        if after >= upto:
            return out
        stop = ts_key(COMMIT, upto)
        with self._env.begin() as txn:
            cursor = txn.cursor()
            if not cursor.set_range(ts_key(COMMIT, after + 1)):
                return out
            for key, value in cursor:
                if key > stop or len(out) >= limit:
                    break
                start_ts, segment, offset = _COMMIT.unpack(value)
                out.append(Committed(_u64(key[1:]), start_ts, Pointer(segment, offset)))
        return out

    def has_parts(self) -> bool:
        """True when any part is indexed (a pull skips the per-commit lookup otherwise)."""
        with self._env.begin() as txn:
            return _holds_parts(txn)

    def parts(self, start_ts: int) -> list[Part]:
        """The indexed parts of the transaction ``start_ts``, in chunk order."""
        return self.parts_of([start_ts]).get(start_ts, [])

    def parts_of(self, start_ts: list[int]) -> dict[int, list[Part]]:
        """The indexed parts of the transactions ``start_ts`` that have any, in chunk order:
        one range scan over the part keys between the lowest and highest start_ts."""
        out: dict[int, list[Part]] = {}
        if not start_ts:
            return out
        wanted = set(start_ts)
        stop = ts_key(PART, max(wanted) + 1)
        with self._env.begin() as txn:
            cursor = txn.cursor()
            if not cursor.set_range(ts_key(PART, min(wanted))):
                return out
            for key, value in cursor:
                if key >= stop:
                    break
                ts, chunk = _PART.unpack(key[1:])
                if ts in wanted:
                    out.setdefault(ts, []).append(Part(ts, chunk, _pointer(value)))
        return out

    def delete_commits_before(self, ts: int) -> int:
        """GC: delete commits with commit_ts < ``ts``, in transactions of bounded size."""
        return self._delete_range(COMMIT, ts_key(COMMIT, ts))

    def delete_parts_before(self, ts: int) -> int:
        """GC: delete the parts of transactions with start_ts < ``ts`` (committed ones are
        below the GC ts too; the others were rolled back or never committed)."""
        return self._delete_range(PART, ts_key(PART, ts))

    def _delete_range(self, prefix: bytes, stop: bytes) -> int:
        deleted = 0
        while True:
            with self._env.begin(write=True) as txn:
                cursor = txn.cursor()
                count = 0
                if cursor.set_range(prefix):
                    while count < DELETE_CHUNK and cursor.key()[:1] == prefix and cursor.key() < stop:
                        cursor.delete()
                        count += 1
            deleted += count
            if count < DELETE_CHUNK:
                return deleted

    def set_gc_ts(self, ts: int) -> None:
        with self._env.begin(write=True) as txn:
            txn.put(GC_TS, _TS.pack(ts))

    def reset(self) -> None:
        """Forget every entry, the applied position and the watermark, keeping the
        GC ts, so the chaser rebuilds the index from the start of the log."""
        with self._env.begin(write=True) as txn:
            gc_ts = txn.get(GC_TS)
            txn.drop(self._env.open_db(txn=txn), delete=False)
            if gc_ts is not None:
                txn.put(GC_TS, gc_ts)

    def close(self) -> None:
        self._env.sync(True)
        self._env.close()


def _holds_parts(txn: Any) -> bool:
    cursor = txn.cursor()
    return bool(cursor.set_range(PART)) and bytes(cursor.key()[:1]) == PART


def _delete_stale_parts(txn: Any, start_ts: int, chunks: int) -> None:
    """Delete the parts of ``start_ts`` above ``chunks``, the number its Prewrite announces."""
    stop = PART + _PART.pack(start_ts + 1, 0)
    cursor = txn.cursor()
    stale: list[int] = []
    key = cursor.key() if cursor.set_range(PART + _PART.pack(start_ts, chunks + 1)) else b""
    while key and key < stop:  # b"": past the last key
        stale.append(_PART.unpack(key[1:])[1])
        cursor.delete()  # and on to the next key
        key = cursor.key()
    if stale:
        log.warning(
            "start_ts %d: its Prewrite announces %d parts; removed %d stale parts above them (%s), "
            "left by an earlier attempt of the producer",
            start_ts,
            chunks,
            len(stale),
            stale if len(stale) <= 10 else f"{stale[:10]}...",
        )


def _prefixed(txn: Any, prefix: bytes) -> list[tuple[bytes, bytes]]:
    cursor = txn.cursor()
    out: list[tuple[bytes, bytes]] = []
    if cursor.set_range(prefix):
        for key, value in cursor:
            if not key.startswith(prefix):
                break
            out.append((bytes(key), bytes(value)))
    return out
