"""What the configs of a pump and a drainer share: where the node listens,
what it advertises, where its meta service and HTTP endpoint are.

:class:`NodeAddressing` is a plain mixin (not a dataclass, so it adds no
fields): a service's config dataclass declares ``addr``, ``advertise_addr``,
``node_id``, ``meta``, ``status_addr`` and ``heartbeat_interval`` itself, with
its own defaults and help, and inherits these checks and derived values.
"""

from __future__ import annotations

from bridge.config import (
    WILDCARD_HOSTS,
    advertise_addr,
    check_addr,
    check_advertise_addr,
    join_host_port,
    listen_addr,
)
from bridge.errors import ConfigError
from bridge.meta.client import split_addrs


class NodeAddressing:
    addr: str
    advertise_addr: str
    node_id: str
    meta: str
    status_addr: str
    heartbeat_interval: float
    # The node kind's word in default ids: "pump-127.0.0.1:8250".
    NODE_KIND = "node"

    def validate_addressing(self) -> None:
        """``addr``, ``advertise-addr``, ``meta`` and ``status-addr``, errors naming the key."""
        check_advertise_addr(self.addr, self.advertise_addr)
        if not split_addrs(self.meta):
            raise ConfigError("meta: expected host:port[,host:port...], got an empty value")
        for member in split_addrs(self.meta):
            check_addr(member, "meta")
        self.status_listen()

    @property
    def heartbeat_ttl_ms(self) -> int:
        """How long one heartbeat keeps the node alive in the registry: 3 intervals."""
        return max(int(self.heartbeat_interval * 3000), 150)

    def meta_addrs(self) -> list[str]:
        return split_addrs(self.meta)

    def status_listen(self) -> tuple[str, int]:
        """Where the HTTP server listens: a bare ``"8251"`` or ``":8251"`` means 127.0.0.1."""
        return listen_addr(self.status_addr, "status-addr")

    def status_advertise(self, bound_port: int | None = None) -> str:
        """The status address others dial (registered for ``binlog-bridge ctl``)."""
        host, port = self.status_listen()
        if host in WILDCARD_HOSTS:
            host, _ = check_addr(self.advertise(), "advertise-addr")
        return advertise_addr(join_host_port(host, port), "", bound_port)

    def advertise(self, bound_port: int | None = None) -> str:
        """The address others dial; with ``addr`` on port 0, the port actually bound."""
        return advertise_addr(self.addr, self.advertise_addr, bound_port)

    def node_name(self, bound_port: int | None = None) -> str:
        """The registry id: ``node-id``, or ``<kind>-<advertise address>``."""
        return self.node_id or f"{self.NODE_KIND}-{self.advertise(bound_port)}"
