"""CPU seconds of processes on this machine, read from ``/proc`` (Linux only).

A benchmark on a small shared machine is often bound by CPU rather than by
any one process: these helpers let it report how many CPU microseconds each
party (the process under test, the server it talks to, the helpers that
feed it) spent per row, next to the rows/s. ``None`` where ``/proc`` does
not tell (another OS, a process of another user, a server on another host).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["CpuMeter", "cpu_seconds", "listener_pid"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads) so far."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces; utime and stime are fields 14 and 15
    fields = stat.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[3] == _LISTEN and int(parts[1].rpartition(":")[2], 16) == port:
                inodes.add(parts[9])
    return inodes


def listener_pid(port: int) -> int | None:
    """The pid of the local process listening on TCP ``port``, if this user can see it."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not inodes:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    return int(entry.name)
        except OSError:
            continue
    return None


class CpuMeter:
    """CPU seconds spent by named processes between :meth:`start` and :meth:`stop`."""

    def __init__(self, pids: Mapping[str, Iterable[int | None]]) -> None:
        self._pids = {name: [pid for pid in group if pid is not None] for name, group in pids.items()}
        self._began: dict[str, float | None] = {}
        self.spent: dict[str, float | None] = {}

    def _now(self) -> dict[str, float | None]:
        now: dict[str, float | None] = {}
        for name, pids in self._pids.items():
            readings = [cpu_seconds(pid) for pid in pids]
            now[name] = None if not pids or None in readings else sum(r for r in readings if r is not None)
        return now

    def start(self) -> None:
        self._began = self._now()

    def stop(self) -> dict[str, float | None]:
        end = self._now()
        self.spent = {}
        for name, began in self._began.items():
            ended = end[name]
            self.spent[name] = None if began is None or ended is None else round(ended - began, 3)
        return self.spent

    def per_row_us(self, rows: int) -> dict[str, float | None]:
        """Microseconds of CPU per row for each name (``None`` where unknown)."""
        return {name: None if s is None else round(s * 1e6 / rows, 1) for name, s in self.spent.items()}
