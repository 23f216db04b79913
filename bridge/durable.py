"""Durable file updates: after a crash a file holds its old or its new content, never a torn one.

Used for the small state files (the meta service's local store, the drainer's
file checkpoint, the relay log's metadata) and for the directories the value
log and the relay log add files to or remove them from.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["fsync_dir", "write_atomically"]


def fsync_dir(directory: Path) -> None:
    """Make the names in ``directory`` durable (files created, renamed or removed in it)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: write ``<name>.tmp``, fsync it, rename it over ``path``,
    fsync the directory. Raises ``OSError``; a ``.tmp`` left by a crash is overwritten next time."""
    tmp = path.with_name(f"{path.name}.tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
