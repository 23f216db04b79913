"""The local backend: one meta process keeps its state in a data dir.

Layout::

    DATA_DIR/LOCK                    flock held while a meta process uses the dir
    DATA_DIR/cluster-id              decimal, created once
    DATA_DIR/tso-limit               decimal physical ms
    DATA_DIR/pumps/<node id>.json    one node record each (id percent-encoded)
    DATA_DIR/drainers/<node id>.json

Every file is written to a temporary name, fsync'd, renamed over the old one,
and the directory fsync'd: a crash leaves the old or the new content, never
a torn one. The process is always the leader.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import secrets
from pathlib import Path
from urllib.parse import quote, unquote

from bridge.apps.meta.store import KIND_DIRS, BadEntry, LoadedNodes, node_from_json, node_to_json
from bridge.durable import write_atomically
from bridge.errors import ProtocolError, StoreError
from bridge.proto import meta_pb2

log = logging.getLogger(__name__)


class LocalStore:
    """State in ``data_dir``, guarded by an exclusive lock on ``DATA_DIR/LOCK``."""

    backend = "local"

    def __init__(self, data_dir: str | Path, advertise_addr: str = "") -> None:
        self._dir = Path(data_dir)
        self._advertise = advertise_addr
        self._lock_fd: int | None = None
        self._closed = asyncio.Event()
        self._write_lock = asyncio.Lock()  # one writer at a time: temp names are per target

    @property
    def data_dir(self) -> Path:
        return self._dir

    async def open(self) -> int:
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            for name in KIND_DIRS.values():
                (self._dir / name).mkdir(exist_ok=True)
        except OSError as exc:
            raise StoreError(f"data-dir: cannot create {str(self._dir)!r}: {exc.strerror}") from exc
        self._lock()
        return self._cluster_id()

    def _lock(self) -> None:
        path = self._dir / "LOCK"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = path.read_text().strip() or "unknown"
            os.close(fd)
            raise StoreError(
                f"data-dir {str(self._dir)!r} is in use by another meta process (pid {holder}); "
                "stop it or use another --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _read_int(self, name: str) -> int | None:
        path = self._dir / name
        try:
            text = path.read_text().strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror}") from exc
        if not text.isdigit():
            raise StoreError(f"{path}: expected a non-negative integer, got {text[:40]!r}")
        return int(text)

    def _write(self, path: Path, data: bytes) -> None:
        try:
            write_atomically(path, data)
        except OSError as exc:
            raise StoreError(f"cannot write {path}: {exc.strerror}") from exc

    async def _write_async(self, path: Path, data: bytes) -> None:
        """Write off the event loop so an fsync does not stall the timestamp path.

        Shielded: a cancelled caller must not let a later write overtake this one.
        """
        await asyncio.shield(self._write_in_order(path, data))

    async def _write_in_order(self, path: Path, data: bytes) -> None:
        async with self._write_lock:
            await asyncio.to_thread(self._write, path, data)

    def _cluster_id(self) -> int:
        existing = self._read_int("cluster-id")
        if existing:
            return existing
        cluster_id = secrets.randbits(63) or 1
        self._write(self._dir / "cluster-id", f"{cluster_id}\n".encode())
        log.info("created cluster id %d in %s", cluster_id, self._dir)
        return cluster_id

    async def close(self) -> None:
        self._closed.set()
        async with self._write_lock:  # a write still running in its thread finishes under the lock
            pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    async def try_acquire(self) -> bool:
        return True

    async def resign(self) -> None:
        """The only member always leads: there is no one to hand over to."""

    async def leadership_lost(self) -> None:
        await self._closed.wait()

    def leader_addr(self) -> str:
        return self._advertise

    async def load_tso_limit(self) -> int:
        return self._read_int("tso-limit") or 0

    async def save_tso_limit(self, limit_ms: int) -> None:
        await self._write_async(self._dir / "tso-limit", f"{limit_ms}\n".encode())

    async def load_nodes(self) -> LoadedNodes:
        loaded = LoadedNodes()
        for kind, dirname in KIND_DIRS.items():
            for path in sorted((self._dir / dirname).glob("*.json")):
                node_id = unquote(path.stem)
                try:
                    node = node_from_json(kind, path.read_bytes())
                    if node.node_id != node_id:
                        raise ProtocolError(f"nodeId {node.node_id!r} does not match the file name")
                except (ProtocolError, OSError) as exc:
                    loaded.errors.append(BadEntry(kind, node_id, f"{path}: unreadable node record: {exc}"))
                    continue
                loaded.nodes.append(node)
        return loaded

    async def save_node(self, status: meta_pb2.NodeStatus) -> None:
        await self._write_async(self._node_path(status.kind, status.node_id), node_to_json(status))

    async def delete_node(self, kind: meta_pb2.NodeKind, node_id: str) -> None:
        await asyncio.shield(self._delete_in_order(self._node_path(kind, node_id)))

    def _node_path(self, kind: meta_pb2.NodeKind, node_id: str) -> Path:
        return self._dir / KIND_DIRS[kind] / f"{quote(node_id, safe='')}.json"

    async def _delete_in_order(self, path: Path) -> None:
        """After the writes queued before it (a record saved and then deleted stays deleted)."""
        async with self._write_lock:
            await asyncio.to_thread(self._unlink, path)

    @staticmethod
    def _unlink(path: Path) -> None:
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot delete {path}: {exc.strerror}") from exc
