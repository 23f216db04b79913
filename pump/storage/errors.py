"""Errors of the pump's storage engine, below :class:`bridge.errors.BridgeError`.

::

    BridgeError
    ├── ProtocolError            (bridge.errors) a binlog the storage cannot accept
    └── StorageError             the storage engine failed
        ├── CorruptLog           a value-log record fails its magic or CRC check;
        │                        names the file and the offset
        ├── StorageFailed        an earlier write or fsync failed: the storage
        │                        refuses writes until it is reopened
        ├── StorageFull          a write found no space (ENOSPC/EDQUOT) and was cut
        │                        back whole: retriable, writes resume once space returns
        ├── StorageClosed        the storage was closed
        ├── RecordGone           a pointer into a segment GC removed
        └── DataDirLocked        another process has the data dir open
"""

from __future__ import annotations

from pathlib import Path

from bridge.errors import BridgeError, UserError


class StorageError(BridgeError):
    """The pump's storage engine could not do what was asked."""


class CorruptLog(StorageError):
    """A record inside the value log is damaged.

    The storage never skips a damaged record: an operator decides whether to
    truncate the segment at ``offset`` (losing what follows) or restore it.
    """

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt record at offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class StorageFailed(StorageError):
    """A write or fsync of the value log failed.

    After a failed fsync the kernel may have dropped the dirty pages, so what
    is on disk is unknown: the storage refuses every later write until it is
    reopened, which re-reads the log from disk.
    """


class StorageFull(StorageError):
    """The disk had no room for a write (ENOSPC or EDQUOT).

    The write was cut back whole, so the log is exactly as before the call and
    nothing of it is acknowledged; unlike :class:`StorageFailed` the storage
    keeps accepting writes, which succeed again once space returns.
    """

    retriable = True


class StorageClosed(StorageError):
    """The storage was closed while the call was waiting."""


class RecordGone(StorageError):
    """A pointer names a value-log segment that GC has removed."""


class DataDirLocked(StorageError, UserError):
    """Another process holds the data dir's lock."""
