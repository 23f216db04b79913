"""CPU seconds of processes on this machine, read from ``/proc`` (Linux only).

A benchmark on a small shared machine is often bound by CPU rather than by
any one process: these helpers let it report how many CPU microseconds each
party (the process under test, the server it talks to, the helpers that
feed it) spent per row, next to the rows/s. ``None`` where ``/proc`` does
not tell (another OS, a process of another user, a server on another host).
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

__all__ = [
    "LOCAL_HOSTS",
    "Budget",
    "Counters",
    "CpuMeter",
    "broker_pid",
    "children",
    "cpu_seconds",
    "listener_pid",
    "local_listener_pid",
    "process_role",
    "scrape",
    "scraped",
    "thread_cpu_seconds",
]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_LISTEN = "0A"
_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")  # TCP state LISTEN in /proc/net/tcp


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (all its threads) so far."""
    return _stat_seconds(f"/proc/{pid}/stat")


def thread_cpu_seconds(pid: int, tid: int) -> float | None:
    """User + system CPU seconds of thread ``tid`` of process ``pid`` so far."""
    return _stat_seconds(f"/proc/{pid}/task/{tid}/stat")


def _stat_seconds(path: str) -> float | None:
    try:
        stat = Path(path).read_text()
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


# -- the budget of a whole pipeline ----------------------------------------------------------------


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (every thread's), oldest first."""
    found: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return sorted(found)


def _descendants(pid: int) -> list[int]:
    found = children(pid)
    for child in list(found):
        found += _descendants(child)
    return found


def process_role(pid: int) -> str:
    """The ``binlog-bridge`` subcommand ``pid`` runs (``pump``, ``drainer``...), else its program name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return "gone"
    for word in argv[1:]:
        if word and word[0] != "-" and word not in _LOG_LEVELS and not {"/", "."} & set(word):
            return word
    return Path(argv[0]).name if argv and argv[0] else "unknown"


def scrape(url: str, names: Iterable[str]) -> dict[str, float]:
    """Sum of each named sample (e.g. ``bridge_pump_writes_total``) at a Prometheus text endpoint;
    empty when the endpoint does not answer."""
    wanted = set(names)
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - a local status port
            text = response.read().decode()
    except OSError:
        return {}
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


Counter = Callable[[], float | None]
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def local_listener_pid(host: str, port: int) -> int | None:
    """The pid listening on ``port`` when ``host`` is this machine; None for a server elsewhere."""
    return listener_pid(port) if host in LOCAL_HOSTS else None


def broker_pid(bootstrap_servers: str) -> int | None:
    """The first bootstrap broker's pid, when it runs on this machine."""
    host, _, port = bootstrap_servers.split(",")[0].rpartition(":")
    return local_listener_pid(host, int(port))


def scraped(name: str, *urls: str) -> Counter:
    """A :data:`Counter` of the sample ``name`` summed over the Prometheus endpoints ``urls``; None
    when none of them has it (unreadable, reported as unknown)."""

    def read() -> float | None:
        found = [v for url in urls if (v := scrape(url, [name]).get(name)) is not None]
        return sum(found) if found else None

    return read


class Counters:
    """Counters read at both ends of a window (calls made, fsyncs done, requests sent: each a
    callable returning the running total), reported per second and per 1,000 rows. A counter
    that cannot be read at either end is reported as ``None``."""

    def __init__(self, counters: Mapping[str, Counter] | None = None) -> None:
        self._counters = dict(counters or {})
        self._began: dict[str, float | None] = {}
        self._started = 0.0

    def _read(self) -> dict[str, float | None]:
        values: dict[str, float | None] = {}
        for name, read in self._counters.items():
            try:
                values[name] = read()
            except Exception:  # noqa: BLE001 - a counter that cannot be read is reported as unknown
                values[name] = None
        return values

    def start(self) -> None:
        self._began = self._read()
        self._started = time.monotonic()

    def stop(self, rows: int, seconds: float | None = None) -> dict[str, dict[str, float | None]]:
        """``per_second`` and ``per_1000_rows`` of every counter since :meth:`start` (``seconds``:
        the window's length when the caller timed it, else since :meth:`start`)."""
        seconds = seconds if seconds is not None else time.monotonic() - self._started
        counts = _deltas(self._began, self._read())
        rows = max(rows, 1)
        return {
            "per_second": {n: None if c is None else round(c / seconds, 1) for n, c in counts.items()},
            "per_1000_rows": {n: None if c is None else round(c * 1000 / rows, 1) for n, c in counts.items()},
        }


class Budget:
    """CPU of every process of a pipeline per row, and counters, over one window.

    The parties: ``producer`` (this process, except the ``measuring`` threads),
    ``measuring`` (threads of this process that only watch the result: a
    consumer and its librdkafka threads), every child process of this one named
    by its role and numbered when a role repeats (``pump-1``...; a child's own
    children count with it, e.g. the drainer's worker processes), and
    ``servers`` (name -> pid, e.g. MariaDB and the broker, found by their
    listening port). ``counters`` are read at both ends of the window
    (e.g. calls made, fsyncs done) and reported per second and per 1,000 rows.
    """

    BRIDGE_ROLES = ("producer", "pump", "meta", "drainer")

    def __init__(
        self,
        servers: Mapping[str, int | None] | None = None,
        counters: Mapping[str, Counter] | None = None,
        measuring: Callable[[], Iterable[int]] | None = None,
    ) -> None:
        self._servers = dict(servers or {})
        self._counters = Counters(counters)
        self._measuring = measuring
        self._groups: dict[str, list[tuple[int, int | None]]] = {}
        self._began: dict[str, float | None] = {}
        self._started = 0.0

    def _discover(self) -> dict[str, list[tuple[int, int | None]]]:
        me = os.getpid()
        tids = {tid for tid in (self._measuring() if self._measuring else ()) if tid != me}
        tids |= {
            int(t.name)
            for t in Path(f"/proc/{me}/task").iterdir()
            if _comm(me, int(t.name)).startswith("rdk:")
        }
        groups: dict[str, list[tuple[int, int | None]]] = {"producer": [(me, None)]}
        groups["measuring"] = [(me, tid) for tid in sorted(tids)]
        roles = [(process_role(child), child) for child in children(me)]
        for role, child in roles:
            same = [pid for r, pid in roles if r == role]
            name = role if len(same) == 1 else f"{role}-{same.index(child) + 1}"
            groups[name] = [(pid, None) for pid in (child, *_descendants(child))]
        for name, pid in self._servers.items():
            groups[name] = [(pid, None)] if pid is not None else []
        return groups

    def _cpu(self) -> dict[str, float | None]:
        now: dict[str, float | None] = {}
        for name, members in self._groups.items():
            readings = [
                cpu_seconds(pid) if tid is None else thread_cpu_seconds(pid, tid) for pid, tid in members
            ]
            known = [r for r in readings if r is not None]
            now[name] = sum(known) if members and len(known) == len(readings) else None
        producer, measured = now.get("producer"), now.get("measuring")
        if producer is not None and measured is not None:
            now["producer"] = producer - measured
        return now

    def start(self) -> None:
        self._groups = self._discover()
        self._began = self._cpu()
        self._counters.start()
        self._started = time.monotonic()

    def stop(self, rows: int) -> dict[str, object]:
        """The window's report: seconds, rows, CPU µs per row and % of one core per party, the
        bridge's own processes summed, and each counter per second and per 1,000 rows."""
        seconds = time.monotonic() - self._started
        spent = _deltas(self._began, self._cpu())
        counted = self._counters.stop(rows, seconds)
        rows = max(rows, 1)
        per_row = {name: None if s is None else round(s * 1e6 / rows, 1) for name, s in spent.items()}
        bridge = [v for name, v in per_row.items() if name.split("-")[0] in self.BRIDGE_ROLES]
        known = [v for v in bridge if v is not None]
        return {
            "seconds": round(seconds, 2),
            "rows": rows,
            "cpu_us_per_row": per_row,
            "cpu_pct_core": {n: None if s is None else round(100 * s / seconds, 1) for n, s in spent.items()},
            "bridge_us_per_row": round(sum(known), 1) if len(known) == len(bridge) else None,
            **counted,
        }


def _deltas(began: Mapping[str, float | None], ended: Mapping[str, float | None]) -> dict[str, float | None]:
    deltas: dict[str, float | None] = {}
    for name, first in began.items():
        last = ended.get(name)
        deltas[name] = None if first is None or last is None else last - first
    return deltas


def _comm(pid: int, tid: int) -> str:
    try:
        return Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
    except OSError:
        return ""
