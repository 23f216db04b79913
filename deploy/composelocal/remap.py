"""From the compose network to one machine: hostnames become 127.0.0.1, ports are remapped.

Every ``(service, container port)`` pair gets its own local port. In a
service's command, environment, healthcheck and mounted config text:

- ``name:port`` for a service ``name`` becomes ``127.0.0.1:<its local port>``;
- ``0.0.0.0:port``, ``127.0.0.1:port`` and ``localhost:port`` are the service
  itself, so a port it exposes becomes its own local port;
- a service's name as the value of a ``--host``-like option (``--host spark-master``)
  becomes ``127.0.0.1``, and a whole argument, environment value or quoted config
  string that is one of the service's own exposed ports (``--port 7077``,
  ``"4040"``) becomes its local port;
- a path under one of the service's mount targets becomes the local folder or
  file standing in for that volume, bind mount or config.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

# one allocator: never the same port twice in this process, and only ports of $BRIDGE_PORT_RANGE
from bridge.apps.demo.cluster import free_port

QUOTED_PORT = re.compile(r'"(\d{2,5})"')
HOST_PORT = re.compile(r"(?<![\w.-])([A-Za-z0-9][\w.-]*):(\d{2,5})(?!\d)")
SELF_HOSTS = frozenset({"0.0.0.0", "127.0.0.1", "localhost"})  # noqa: S104 - names hosts, binds nothing
LOCAL_HOST = "127.0.0.1"


@dataclass
class PortMap:
    """``(service, container port) -> local port``; services that run nowhere map nothing."""

    ports: dict[tuple[str, int], int] = field(default_factory=dict)
    services: frozenset[str] = frozenset()

    def assign(self, service: str, container_ports: Iterable[int]) -> None:
        for port in container_ports:
            self.ports.setdefault((service, port), free_port())

    def local(self, service: str, port: int) -> int | None:
        return self.ports.get((service, port))


@dataclass
class Rewriter:
    """Rewrites text and arguments as seen from one service (``own``)."""

    own: str
    ports: PortMap
    paths: Mapping[str, str]  # container path -> local path, longest first when applied

    def text(self, value: str) -> str:
        value = self._paths(value)
        value = QUOTED_PORT.sub(self._quoted_port, value)
        return HOST_PORT.sub(self._host_port, value)

    def _quoted_port(self, match: re.Match[str]) -> str:
        mapped = self.ports.local(self.own, int(match.group(1)))
        return match.group(0) if mapped is None else f'"{mapped}"'

    def arg(self, value: str, option: str = "") -> str:
        if value in self.ports.services and option.endswith("host"):
            return LOCAL_HOST
        if value.isdigit():
            mapped = self.ports.local(self.own, int(value))
            if mapped is not None:
                return str(mapped)
        return self.text(value)

    def argv(self, argv: Iterable[str]) -> list[str]:
        argv = list(argv)
        return [self.arg(a, argv[i - 1] if i else "") for i, a in enumerate(argv)]

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        return {name: self.arg(value) for name, value in env.items()}

    def _host_port(self, match: re.Match[str]) -> str:
        host, port = match.group(1), int(match.group(2))
        target = self.own if host in SELF_HOSTS else host
        if target not in self.ports.services and host not in SELF_HOSTS:
            return match.group(0)
        mapped = self.ports.local(target, port)
        return match.group(0) if mapped is None else f"{LOCAL_HOST}:{mapped}"

    def _paths(self, value: str) -> str:
        for container in sorted(self.paths, key=len, reverse=True):
            pattern = re.compile(rf"(?<![\w/.-]){re.escape(container)}(?=/|\b|$)")
            value = pattern.sub(self.paths[container].replace("\\", "\\\\"), value)
        return value
