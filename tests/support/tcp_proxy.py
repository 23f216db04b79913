"""A fault proxy: a TCP forwarder on 127.0.0.1 between two components that a test drives.

The real service behind it stays up (and may be shared); only the link through the proxy
suffers. Faults, each until :meth:`TcpProxy.heal`:

- ``latency(fixed, jitter)``: every chunk is delivered ``fixed`` + uniform(0, ``jitter``)
  seconds after it was read, in order (a later chunk never overtakes an earlier one);
- ``throttle(bytes_per_second)``: each direction of each connection at most that rate;
- ``drop_new()``: new connections are reset as soon as they are accepted, established ones
  go on (a peer that refuses new work);
- ``blackhole()``: established and new connections stay open and their bytes are accepted,
  but nothing is forwarded either way and nobody is told: a half-open link, noticed only
  through a read timeout or a keepalive. :meth:`heal` resets the connections that lost bytes
  (their streams cannot be resumed), new ones pass again;
- ``reset_all()``: an immediate RST on every connection (one event; call it in a loop for a
  reset storm);
- ``unplug()`` / ``plug()``: stop and start listening (refused connections; as before).

``clients``: a fault may apply to the connections of some processes only (their pids,
e.g. :func:`process_group` of a drainer), so that one pump is cut from the drainer while
producers still reach it through the same proxy. A connection's process is found by its
socket's inode (``/proc/net/tcp`` and ``/proc/<pid>/fd``).

Healthy, the proxy copies bytes unchanged: gRPC, MySQL, Redis and Kafka work through it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import random
import socket
import struct
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.support.faults import skip_heal
from tests.support.process import free_port

CHUNK = 65536


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with an RST (linger 0) rather than a FIN. SHUT_RD wakes a thread blocked
    in recv() on it without sending anything; the kernel drops the socket, and sends the RST,
    once that call has returned."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


def _socket_inode(local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """The inode of the socket bound to ``local`` and connected to ``remote`` (IPv4 addresses):
    in /proc/net/tcp, or in tcp6 as an IPv4-mapped address (gRPC opens dual-stack sockets)."""

    def hexaddr(addr: tuple[str, int]) -> str:
        return f"{struct.unpack('<I', socket.inet_aton(addr[0]))[0]:08X}:{addr[1]:04X}"

    want = (hexaddr(local), hexaddr(remote))
    for table_path in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table_path, encoding="ascii") as table:
            for line in table.readlines()[1:]:
                cols = line.split()
                if (cols[1][-13:], cols[2][-13:]) == want:  # the last 8 hex digits hold the IPv4 address
                    return int(cols[9])
    return None


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    fd_dir = f"/proc/{pid}/fd"
    with contextlib.suppress(OSError):
        for fd in os.listdir(fd_dir):
            with contextlib.suppress(OSError):
                target = os.readlink(f"{fd_dir}/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def process_group(pgid: int) -> set[int]:
    """The pids of process group ``pgid`` (a cluster member and its worker processes)."""
    pids: set[int] = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                    fields = stat.read().rpartition(")")[2].split()
                if int(fields[2]) == pgid:
                    pids.add(int(entry))
    return pids


@dataclass
class _Link:
    """One proxied connection: the client's socket, the upstream's (None while blackholed
    from its start) and whether it lost bytes to a blackhole."""

    client: socket.socket
    upstream: socket.socket | None
    inode: int | None
    lost_bytes: bool = False
    closed: bool = False
    queues: list[queue.Queue[tuple[float, bytes] | None]] = field(default_factory=list)

    def close(self, rst: bool = False) -> None:
        self.closed = True
        for q in self.queues:
            q.put(None)
        for sock in (self.client, self.upstream):
            if sock is None:
                continue
            if rst:
                _reset(sock)
            else:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to ``target`` (host, port) while plugged; see the module doc."""

    def __init__(self, target: tuple[str, int], port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._latency = (0.0, 0.0)
        self._rate: float | None = None
        self._mode = "pass"  # "pass", "drop-new" or "blackhole"
        self._clients: set[int] | None = None
        self.accepted = 0
        self.resets = 0
        self.blackholed = 0  # connections a blackhole swallowed bytes of (established or new)

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> TcpProxy:
        self.plug()
        return self

    def __exit__(self, *exc: object) -> None:
        self.unplug()

    # ---------------------------------------------------------------- faults

    def latency(self, fixed: float, jitter: float = 0.0) -> None:
        self._latency = (fixed, jitter)

    def throttle(self, bytes_per_second: float) -> None:
        self._rate = bytes_per_second

    def drop_new(self, clients: Iterable[int] | None = None) -> None:
        self._set_mode("drop-new", clients)

    def blackhole(self, clients: Iterable[int] | None = None) -> None:
        """Stop forwarding on every connection of ``clients`` (all when None), new ones too."""
        self._set_mode("blackhole", clients)
        with self._lock:
            links = list(self._links)
        for link in links:
            if self._in_scope(link):
                link.lost_bytes = True
                self.blackholed += 1

    def reset_all(self, clients: Iterable[int] | None = None) -> int:
        """RST every open connection of ``clients`` (all when None); returns how many."""
        scope = None if clients is None else set(clients)
        with self._lock:
            links = [link for link in self._links if self._in_scope(link, scope)]
            self._links = [link for link in self._links if link not in links]
        for link in links:
            link.close(rst=True)
        self.resets += len(links)
        return len(links)

    def heal(self) -> None:
        """Back to a healthy link: no latency, no throttle, new connections pass; the
        connections a blackhole made lose bytes are reset (their peers reconnect). Under
        ``BRIDGE_FAULT_SKIP_HEAL=1`` (tests/support/faults.py) it does nothing."""
        if skip_heal():
            return
        self._latency, self._rate = (0.0, 0.0), None
        self._mode, self._clients = "pass", None
        with self._lock:
            lost = [link for link in self._links if link.lost_bytes]
            self._links = [link for link in self._links if not link.lost_bytes]
        for link in lost:
            link.close(rst=True)

    def _set_mode(self, mode: str, clients: Iterable[int] | None) -> None:
        self._clients = None if clients is None else set(clients)
        self._mode = mode

    def _in_scope(self, link: _Link, scope: set[int] | str | None = "current") -> bool:
        pids = self._clients if isinstance(scope, str) else scope
        if pids is None:
            return True
        if link.inode is None:
            return False
        return any(link.inode in _socket_inodes(pid) for pid in pids)

    @property
    def plugged(self) -> bool:
        return self._listener is not None

    # ---------------------------------------------------------------- listening

    def plug(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        self._thread = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._thread.start()

    def unplug(self) -> None:
        """Stop listening and close every connection (refused from now on)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, peer = listener.accept()
            except OSError:  # closed by unplug()
                return
            self.accepted += 1
            link = _Link(client, None, _socket_inode(peer, ("127.0.0.1", self.port)))
            if self._mode == "drop-new" and self._in_scope(link):
                _reset(client)
                continue
            if self._mode == "blackhole" and self._in_scope(link):
                link.lost_bytes = True
                self.blackholed += 1
            else:
                try:
                    link.upstream = socket.create_connection(self.target, timeout=5)
                except OSError:
                    _reset(client)
                    continue
                link.upstream.settimeout(None)
            with self._lock:
                self._links.append(link)
            self._start_copies(link)

    def _start_copies(self, link: _Link) -> None:
        if link.upstream is None:  # blackholed from its start: swallow what the client sends
            threading.Thread(target=self._swallow, args=(link,), daemon=True).start()
            return
        for src, dst in ((link.client, link.upstream), (link.upstream, link.client)):
            q: queue.Queue[tuple[float, bytes] | None] = queue.Queue()
            link.queues.append(q)
            threading.Thread(target=self._read, args=(link, src, q), daemon=True).start()
            threading.Thread(target=self._write, args=(link, dst, q), daemon=True).start()

    def _swallow(self, link: _Link) -> None:
        with contextlib.suppress(OSError):
            while link.client.recv(CHUNK):
                pass
        self._drop(link)

    def _read(self, link: _Link, src: socket.socket, q: queue.Queue[tuple[float, bytes] | None]) -> None:
        due = 0.0
        try:
            while data := src.recv(CHUNK):
                if link.lost_bytes:
                    continue  # accepted and dropped: the sender never learns
                fixed, jitter = self._latency
                due = max(due, time.monotonic() + fixed + random.uniform(0.0, jitter))
                q.put((due, data))
        except OSError:
            pass
        q.put(None)

    def _write(self, link: _Link, dst: socket.socket, q: queue.Queue[tuple[float, bytes] | None]) -> None:
        try:
            while (item := q.get()) is not None:
                due, data = item
                if link.lost_bytes:
                    continue
                time.sleep(max(0.0, due - time.monotonic()))
                rate = self._rate
                step = len(data) if rate is None else max(1, int(rate / 20))  # 50 ms slices
                for start in range(0, len(data), step):
                    piece = data[start : start + step]
                    dst.sendall(piece)
                    if rate is not None:
                        time.sleep(len(piece) / rate)
        except OSError:
            pass
        if not link.lost_bytes:  # a blackholed link stays open: the peer must notice by itself
            self._drop(link)

    def _drop(self, link: _Link) -> None:
        with self._lock:
            if link in self._links:
                self._links.remove(link)
        if not link.closed:
            link.close()
