"""A private etcd cluster of three members, each member's client and peer traffic through a
fault proxy (tests/support/tcp_proxy.py), so a test can partition one member away and heal it.

Member ``i`` listens on its own client and peer ports and advertises its proxies' addresses:
clients (the meta service) dial the client proxies, the members dial each other through the
peer proxies. :meth:`EtcdCluster.partition` cuts one member both ways, clients included:
its client proxy and its peer proxy swallow everything (new connections too), and the other
members' peer proxies swallow what it sends them (scoped to its pid). The election timings
are etcd's defaults (100 ms heartbeat, 1 s election), not the 20/200 ms of scripts/services,
so that a loaded 2-core machine does not change leaders on its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

import aetcd

from tests.support.process import ChildProcess, free_port, wait_until
from tests.support.tcp_proxy import TcpProxy

READY = r"ready to serve client requests"


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    client_proxy: TcpProxy
    peer_proxy: TcpProxy
    data_dir: Path
    log_path: Path
    process: ChildProcess | None = None

    @property
    def client_url(self) -> str:
        """What clients dial: the client proxy."""
        return f"http://{self.client_proxy.addr}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.proc.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.proc.poll() is None


class EtcdCluster:
    """Three etcd members under ``workdir``; see the module docstring. ``close`` never raises."""

    def __init__(self, workdir: Path, members: int = 3) -> None:
        self.members: list[EtcdMember] = []
        for i in range(1, members + 1):
            client_port, peer_port = free_port(), free_port()
            self.members.append(
                EtcdMember(
                    f"etcd-{i}",
                    client_port,
                    peer_port,
                    TcpProxy(("127.0.0.1", client_port)),
                    TcpProxy(("127.0.0.1", peer_port)),
                    workdir / f"etcd-{i}",
                    workdir / f"etcd-{i}.log",
                )
            )
        self._cut: EtcdMember | None = None

    @property
    def client_urls(self) -> str:
        """The meta service's ``etcd`` key: every member's client proxy."""
        return ",".join(m.client_url for m in self.members)

    def member(self, name: str) -> EtcdMember:
        return next(m for m in self.members if m.name == name)

    def _argv(self, m: EtcdMember) -> list[str]:
        initial = ",".join(f"{o.name}=http://{o.peer_proxy.addr}" for o in self.members)
        return [
            "etcd",
            "--name", m.name,
            "--data-dir", str(m.data_dir),
            "--listen-client-urls", f"http://127.0.0.1:{m.client_port}",
            "--advertise-client-urls", m.client_url,
            "--listen-peer-urls", f"http://127.0.0.1:{m.peer_port}",
            "--initial-advertise-peer-urls", f"http://{m.peer_proxy.addr}",
            "--initial-cluster", initial,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", f"bridge-test-{self.members[0].client_port}",
            "--heartbeat-interval", "100",
            "--election-timeout", "1000",
        ]  # fmt: skip

    def start(self) -> None:
        for m in self.members:
            m.data_dir.parent.mkdir(parents=True, exist_ok=True)
            m.client_proxy.plug()
            m.peer_proxy.plug()
        for m in self.members:
            self.launch(m)
        for m in self.members:
            assert m.process is not None
            m.process.wait_for_line(READY, timeout=60)
        for m in self.members:
            self.wait_healthy(m)

    def launch(self, m: EtcdMember) -> None:
        """Start (or start again, on its data dir) member ``m``."""
        m.process = ChildProcess(self._argv(m), m.log_path)

    def kill(self, m: EtcdMember) -> None:
        """SIGKILL member ``m``."""
        assert m.process is not None
        m.process.kill()

    # ---------------------------------------------------------------- what a member says

    def ask(self, m: EtcdMember, timeout: float = 3.0) -> str:
        """The leader's name as member ``m`` sees it, after a linearizable read through it
        (which needs a quorum that ``m`` is part of); raises when ``m`` cannot serve."""

        async def main() -> str:
            async with aetcd.Client(host="127.0.0.1", port=m.client_port, timeout=timeout) as client:
                await asyncio.wait_for(client.get(b"/health-probe"), timeout)
                status = await asyncio.wait_for(client.status(), timeout)
                return str(status.leader.name) if status.leader is not None else ""

        return asyncio.run(main())

    def serves(self, m: EtcdMember) -> bool:
        try:
            return bool(self.ask(m))
        except Exception:  # any failure means: not serving now
            return False

    def wait_healthy(self, m: EtcdMember, timeout: float = 90.0) -> None:
        wait_until(lambda: self.serves(m), timeout=timeout, what=f"{m.name} serving", interval=0.3)

    def leader(self) -> EtcdMember:
        """The current leader, as a serving member names it."""

        def named() -> str:
            for m in self.members:
                if m.running and m is not self._cut:
                    with contextlib.suppress(Exception):
                        if name := self.ask(m):
                            return name
            return ""

        return self.member(wait_until(named, timeout=60, what="an etcd leader", interval=0.3))

    # ---------------------------------------------------------------- faults

    def partition(self, m: EtcdMember) -> None:
        """Cut ``m`` from its peers and its clients: a blackhole both ways, no RST."""
        self._cut = m
        m.client_proxy.blackhole()
        m.peer_proxy.blackhole()
        for other in self.members:
            if other is not m:
                other.peer_proxy.blackhole(clients={m.pid})

    def heal(self) -> None:
        for m in self.members:
            m.client_proxy.heal()
            m.peer_proxy.heal()
        self._cut = None

    def close(self) -> None:
        for m in self.members:
            if m.process is not None:
                with contextlib.suppress(Exception):
                    m.process.kill()
                with contextlib.suppress(Exception):
                    m.process.stop(timeout=5)
            for proxy in (m.client_proxy, m.peer_proxy):
                with contextlib.suppress(Exception):
                    proxy.unplug()


def etcd_available() -> bool:
    try:
        return subprocess.run(["etcd", "--version"], capture_output=True, timeout=10).returncode == 0
    except OSError:
        return False
