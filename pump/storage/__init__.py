"""The pump's storage engine: value log, index, group commit, sorter and pull.

::

    value/NNNNNN.vlog   vlog.py, segment.py   durable, checksummed, append-only
    kv/                 index.py              LMDB: ts -> pointer, sorter state
    chaser.py           feeds the log, in order, through sorter.py into the index
    writer.py           group commit: one append + one fsync per batch
    pull.py             what a pull yields
    storage.py          the facade the server calls

See docs/pump-storage.md for the design and the numbers behind it.
"""

from pump.storage.config import StorageConfig
from pump.storage.errors import (
    CorruptLog,
    DataDirLocked,
    RecordGone,
    StorageClosed,
    StorageError,
    StorageFailed,
    StorageFull,
)
from pump.storage.pull import ChunkPart, CommittedTxn, PullItem, Watermark
from pump.storage.storage import Storage, StorageStats

__all__ = [
    "ChunkPart",
    "CommittedTxn",
    "CorruptLog",
    "DataDirLocked",
    "PullItem",
    "RecordGone",
    "Storage",
    "StorageClosed",
    "StorageConfig",
    "StorageError",
    "StorageFailed",
    "StorageFull",
    "StorageStats",
    "Watermark",
]
