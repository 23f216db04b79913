"""A whole cluster as child processes: a meta service, pumps and one drainer, on loopback.

The demo runs one; the end-to-end tests run one each, kill and restart its
members. Layout of ``data_dir`` (every path absolute in the configs, so each
child can be started again by hand)::

    meta.toml  pump-1.toml ... pump-N.toml  drainer.toml     the children's configs
    meta/  pump-1/ ... pump-N/  drainer/                     their data dirs
    drainer/sqlite/<db>.db   drainer/binlog-files/           the sinks' output
    logs/<name>.log                                          each child's stdout and stderr

Ports are picked free once, when the cluster is built, and kept across
restarts. Members start in order and each must print its ready line:
meta, then every pump, then the drainer (pumps find no drainer to notify,
so they go online at once; the drainer then reads them from the registry).
:meth:`Cluster.stop` stops them in reverse, politely, then by SIGKILL, and
never raises, so it belongs in a ``finally``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import socket
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bridge.apps.demo import tomlfile
from bridge.apps.demo.errors import CatchUpTimeout, DemoError
from bridge.apps.demo.process import ServiceProcess
from bridge.dsn import parse_dsn
from bridge.meta.client import MetaClient

log = logging.getLogger(__name__)

READY_LINES = {
    "meta": r"meta ready: ",
    "pump": r"pump ready: node_id=",
    "drainer": r"drainer ready: node_id=",
}
MIB = 1 << 20
DRAINER = "drainer"
STATUS_TIMEOUT = 5.0
POLL_INTERVAL = 0.2


_ports_handed_out: set[int] = set()
_ports_lock = threading.Lock()


PORT_RANGE_ENV = "BRIDGE_PORT_RANGE"


def port_range() -> range | None:
    """``$BRIDGE_PORT_RANGE`` (``low-high``): the ports :func:`free_port` picks from, so process
    trees on one host given disjoint ranges (parallel test runs: tests/support/ports.py) never
    pick the same port; only even ones, as the kernel's own bind to port 0 (``connect()`` takes
    its local ports from the odd ones, so an odd pick could be taken by a client before the
    server binds). None when unset: the kernel picks."""
    text = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not text:
        return None
    low_text, _, high_text = text.partition("-")
    try:
        low, high = int(low_text), int(high_text)
    except ValueError:
        raise ValueError(f"{PORT_RANGE_ENV}={text!r}: expected low-high, e.g. 40000-40999") from None
    if not 1024 <= low < high <= 65535:
        raise ValueError(f"{PORT_RANGE_ENV}={text!r}: expected 1024 <= low < high <= 65535")
    return range(low + low % 2, high + 1, 2)


def _unused_port(ports: range | None) -> int | None:
    """A port nothing listens on now: the kernel's pick, or one of ``ports`` (None if taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", 0 if ports is None else random.choice(ports)))  # noqa: S311 - spreads, secures nothing
        except OSError:
            return None
        return int(sock.getsockname()[1])


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now and that this process has not
    handed out before: the kernel may give two calls in a row the same port while the first
    caller's server is not listening yet (seen: two pumps of one cluster given one port).
    Under ``$BRIDGE_PORT_RANGE``, only a port of that range (:func:`port_range`)."""
    ports = port_range()
    with _ports_lock:
        for _ in range(1000):
            port = _unused_port(ports)
            if port is not None and port not in _ports_handed_out:
                _ports_handed_out.add(port)
                return port
    raise OSError(
        f"no free port on 127.0.0.1 that this process has not handed out ({len(_ports_handed_out)} so far)"
    )


def cli_argv(*args: str) -> list[str]:
    """argv of ``binlog-bridge ARGS`` run by this interpreter (no PATH lookup, same venv)."""
    return [sys.executable, "-m", "bridge.cli", *args]


def resolver_for(upstream: str) -> dict[str, Any]:
    """The pumps' ``[resolver]`` for ``upstream``: its status table settles lost commits."""
    kind = "mysql" if parse_dsn(upstream, key="--upstream").is_mysql else "sqlite"
    return {"type": kind, "dsn": upstream}


@dataclass
class ClusterSpec:
    """What to start. ``*_settings`` add or override top-level keys and tables of the configs."""

    data_dir: Path
    pumps: int = 3
    sinks: tuple[str, ...] = ("sqlite", "file")
    resolver: Mapping[str, Any] = field(default_factory=lambda: {"type": "none"})
    pump_settings: Mapping[str, Any] = field(default_factory=dict)
    drainer_settings: Mapping[str, Any] = field(default_factory=dict)
    cluster_token: str = ""  # "" = none; else written into every config (bridge.auth)
    ready_timeout: float = 90.0
    stop_timeout: float = 30.0


@dataclass
class Member:
    """One child of the cluster: its kind, ports and process."""

    name: str
    kind: str
    port: int
    status_port: int
    process: ServiceProcess
    expected_up: bool = False  # False once killed or stopped on purpose


class Cluster:
    """Builds the configs of ``spec`` and runs its members; see the module docstring."""

    def __init__(self, spec: ClusterSpec, ports: Mapping[str, tuple[int, int]] | None = None) -> None:
        """``ports``: (port, status port) by member name; free ones are picked for the others."""
        self.spec = spec
        self.data_dir = spec.data_dir.resolve()
        self.members: dict[str, Member] = {}
        self.configs_written = False
        self._add("meta", "meta", ports)
        for i in range(1, spec.pumps + 1):
            self._add(f"pump-{i}", "pump", ports)
        self._add(DRAINER, DRAINER, ports)

    @classmethod
    def from_data_dir(cls, data_dir: Path) -> Cluster:
        """The cluster whose configs an earlier run wrote into ``data_dir``, to start it again.

        The configs are used as they are (:meth:`start` does not rewrite them).
        """
        ports: dict[str, tuple[int, int]] = {}
        for path in sorted(data_dir.glob("*.toml")):
            table = tomllib.loads(path.read_text(encoding="utf-8"))
            status = str(table.get("status-addr", ":0"))
            ports[path.stem] = (_port_of(str(table["addr"])), _port_of(status))
        pumps = sum(name.startswith("pump-") for name in ports)
        if "meta" not in ports or DRAINER not in ports or not pumps:
            raise DemoError(f"{data_dir}: no meta.toml, pump-N.toml and drainer.toml written by a demo")
        meta = tomllib.loads((data_dir / "meta.toml").read_text(encoding="utf-8"))
        token = str(meta.get("cluster-token", ""))
        cluster = cls(ClusterSpec(data_dir, pumps=pumps, cluster_token=token), ports)
        cluster.configs_written = True
        return cluster

    def _add(self, name: str, kind: str, ports: Mapping[str, tuple[int, int]] | None) -> None:
        config = self.config_path(name)
        argv = cli_argv(kind, "--config", str(config))
        process = ServiceProcess(name, argv, self.log_path(name))
        port, status_port = ports[name] if ports and name in ports else (free_port(), free_port())
        self.members[name] = Member(name, kind, port, status_port, process)

    # ---------------------------------------------------------------- where things are

    def config_path(self, name: str) -> Path:
        return self.data_dir / f"{name}.toml"

    def log_path(self, name: str) -> Path:
        return self.data_dir / "logs" / f"{name}.log"

    @property
    def meta_addr(self) -> str:
        return f"127.0.0.1:{self.members['meta'].port}"

    @property
    def pump_names(self) -> list[str]:
        return [m.name for m in self.members.values() if m.kind == "pump"]

    @property
    def drainer_dir(self) -> Path:
        return self.data_dir / DRAINER

    @property
    def sqlite_dir(self) -> Path:
        """The sqlite sink's directory: one ``<db>.db`` per upstream database."""
        return self.drainer_dir / "sqlite"

    @property
    def downstream_dsn(self) -> str:
        return f"sqlite://{self.sqlite_dir}"

    # ---------------------------------------------------------------- configs

    def configs(self) -> dict[str, str]:
        """Each member's config as TOML text."""
        out: dict[str, str] = {}
        for name, member in self.members.items():
            builder = {"meta": self._meta_config, "pump": self._pump_config, DRAINER: self._drainer_config}
            table = builder[member.kind](member)
            if self.spec.cluster_token:
                table = {"cluster-token": self.spec.cluster_token, **table}
            command = f"binlog-bridge {member.kind} --config {self.config_path(name)}"
            out[name] = tomlfile.dumps(table, f"{name} of the demo cluster; run by hand with:\n  {command}")
        return out

    def write_configs(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        for name, text in self.configs().items():
            path = self.config_path(name)
            if self.spec.cluster_token:  # it holds the cluster's secret: owner only, before it is written
                path.touch(mode=0o600)
                path.chmod(0o600)
            path.write_text(text, encoding="utf-8")
        self.configs_written = True

    def _meta_config(self, member: Member) -> dict[str, Any]:
        return {"addr": f"127.0.0.1:{member.port}", "data-dir": str(self.data_dir / member.name)}

    def _pump_config(self, member: Member) -> dict[str, Any]:
        table: dict[str, Any] = {
            "addr": f"127.0.0.1:{member.port}",
            "node-id": member.name,
            "meta": self.meta_addr,
            "data-dir": str(self.data_dir / member.name),
            "status-addr": f"127.0.0.1:{member.status_port}",
            # The default guard (10 GiB free) would refuse writes on a small laptop disk.
            "stop-write-at-available-space": 256 * MIB,
            "storage": {"segment-size": 64 * MIB},
            "resolver": dict(self.spec.resolver),
        }
        return _merged(table, self.spec.pump_settings)

    def _drainer_config(self, member: Member) -> dict[str, Any]:
        sinks: dict[str, Any] = {"type": list(self.spec.sinks)}
        if "sqlite" in self.spec.sinks:
            sinks["sqlite"] = {"path": str(self.sqlite_dir)}
        if "file" in self.spec.sinks:
            sinks["file"] = {"path": str(self.drainer_dir / "binlog-files")}
        table: dict[str, Any] = {
            "addr": f"127.0.0.1:{member.port}",
            "node-id": member.name,
            "meta": self.meta_addr,
            "data-dir": str(self.drainer_dir),
            "status-addr": f"127.0.0.1:{member.status_port}",
            "checkpoint-interval": "1s",
            "sink": sinks,
        }
        return _merged(table, self.spec.drainer_settings)

    # ---------------------------------------------------------------- life cycle

    def start(self, on_ready: Callable[[str, str], None] | None = None) -> None:
        """Write the configs (once) and start meta, the pumps (together), then the drainer.

        ``on_ready(name, ready_line)`` is called as each member becomes ready.
        """
        if not self.configs_written:
            self.write_configs()
        groups = [["meta"], self.pump_names, [DRAINER]]
        for group in groups:
            for name in group:
                self._launch(name)
            for name in group:
                line = self._await_ready(name)
                if on_ready is not None:
                    on_ready(name, line)

    def _launch(self, name: str) -> None:
        member = self.members[name]
        member.process.start()
        member.expected_up = True

    def _await_ready(self, name: str) -> str:
        member = self.members[name]
        return member.process.wait_ready(READY_LINES[member.kind], self.spec.ready_timeout)

    def restart(self, name: str) -> str:
        """Start a member that was killed or stopped again; returns its ready line."""
        self._launch(name)
        return self._await_ready(name)

    def kill(self, name: str) -> None:
        """SIGKILL one member (a fault on purpose: :meth:`check` no longer expects it)."""
        member = self.members[name]
        member.expected_up = False
        member.process.kill()
        log.info("%s killed (SIGKILL)", name)

    def stop_member(self, name: str, signalled: bool = False) -> int | None:
        """SIGTERM (unless ``signalled`` already) and wait; SIGKILL after ``stop_timeout``."""
        member = self.members[name]
        member.expected_up = False
        return member.process.stop(self.spec.stop_timeout, send=not signalled)

    def stop(self) -> dict[str, int | None]:
        """Stop every member: the drainer, then the pumps together, then meta. Never raises.

        Each gets SIGTERM and ``stop_timeout`` to exit, then SIGKILL.
        """
        statuses: dict[str, int | None] = {}
        for group in ([DRAINER], self.pump_names, ["meta"]):
            for name in group:
                self.members[name].process.send(signal.SIGTERM)
            for name in group:
                try:
                    statuses[name] = self.stop_member(name, signalled=True)
                except Exception:
                    log.exception("stopping %s failed; killing it", name)
                    self.members[name].process.kill()
                    statuses[name] = self.members[name].process.returncode
        return statuses

    def check(self) -> None:
        """Raise :class:`~bridge.apps.demo.errors.ServiceFailed` if a member that should run has exited."""
        for member in self.members.values():
            if member.expected_up:
                member.process.check()

    # ---------------------------------------------------------------- what the cluster reports

    def timestamp(self) -> int:
        """A fresh TSO timestamp: above every commit_ts handed out before the call."""

        async def fetch() -> int:
            async with MetaClient(
                self.meta_addr, timeout=10.0, token=self.spec.cluster_token or None
            ) as meta:
                return await meta.get_timestamp()

        return asyncio.run(fetch())

    def drainer_status(self) -> dict[str, Any] | None:
        """The drainer's ``/status`` JSON, or None when it does not answer right now."""
        return self.member_status(DRAINER)

    def member_status(self, name: str) -> dict[str, Any] | None:
        """A pump's or the drainer's ``/status`` JSON, or None when it does not answer right now."""
        url = f"http://127.0.0.1:{self.members[name].status_port}/status"
        try:
            with urllib.request.urlopen(url, timeout=STATUS_TIMEOUT) as reply:
                return dict(json.loads(reply.read()))
        except (OSError, urllib.error.URLError, ValueError) as exc:
            log.debug("%s status unavailable: %s", name, exc)
            return None

    def unpaired_prewrites(self) -> dict[str, int]:
        """Each answering pump's unpaired Prewrites: a Prewrite whose Commit never came (its
        producer or the pump died between the two) holds that pump's watermark, and so the
        merge, until ``max-txn-timeout`` resolves it."""
        counts: dict[str, int] = {}
        for name in self.pump_names:
            status = self.member_status(name) if self.members[name].expected_up else None
            if status is not None:
                counts[name] = int(status.get("unpaired_prewrites") or 0)
        return counts

    def wait_caught_up(
        self,
        target_ts: int,
        timeout: float,
        on_poll: Callable[[dict[str, Any] | None], None] | None = None,
    ) -> dict[str, Any]:
        """Wait until the drainer's checkpoint reaches ``target_ts``; return that status.

        Fails at once when a member dies or the drainer reports that replication
        halted; after ``timeout`` (a guard against hangs) with :class:`CatchUpTimeout`.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            status = self.drainer_status()
            if on_poll is not None:
                on_poll(status)
            if status is not None:
                halted = (status.get("errors") or {}).get("halted")
                if halted:
                    raise DemoError(f"the drainer halted replication: {halted}")
                if int(status.get("checkpoint_ts") or 0) >= target_ts:
                    return status
            if time.monotonic() >= deadline:
                held = {name: count for name, count in self.unpaired_prewrites().items() if count}
                hint = (
                    f"; unpaired Prewrites hold back {held} until the pumps' max-txn-timeout resolves them"
                    if held
                    else ""
                )
                raise CatchUpTimeout(
                    f"the drainer's checkpoint did not reach commit_ts {target_ts} "
                    f"within {timeout:g}s{hint}; last status: {json.dumps(status)[:2000]}"
                )
            time.sleep(POLL_INTERVAL)


def _port_of(addr: str) -> int:
    return int(addr.rpartition(":")[2] or 0)


def _merged(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` on top, tables merged key by key."""
    out = dict(base)
    for key, value in extra.items():
        current = out.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            out[key] = _merged(current, value)
        else:
            out[key] = value
    return out
