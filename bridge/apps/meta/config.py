"""Configuration of ``binlog-bridge meta``: one TOML file, flags on top.

::

    addr = "127.0.0.1:8248"          # gRPC listen address
    advertise-addr = ""              # what other members and clients dial; default = addr
    data-dir = "./var/meta"          # local backend only
    name = ""                        # member id; default "meta-<advertise-addr>"
    etcd = ""                        # "http://h:p,http://h:p" or https://; empty = local backend
    etcd-prefix = "/binlog-bridge/v1"
    election-ttl = "3s"              # leader lease; a dead leader is replaced after about this
    status-addr = ""                 # HTTP /status and /metrics; empty = off; "9100" = 127.0.0.1:9100

    [tso]
    save-interval = "3s"             # the window persisted ahead of handed-out timestamps

    [security]                       # TLS, see bridge.grpcutil.SecurityConfig

    [etcd-security]                  # TLS to etcd (https:// URLs): ssl-ca, ssl-cert, ssl-key
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

import grpc

from bridge.config import advertise_addr, check_advertise_addr, cluster_token_field, listen_addr
from bridge.errors import ConfigError
from bridge.grpcutil import KeepaliveConfig, SecurityConfig, tls_channel_credentials
from bridge.meta.client import DEFAULT_ADDR

DEFAULT_PREFIX = "/binlog-bridge/v1"


@dataclass
class TsoConfig:
    """``[tso]``."""

    save_interval: float = field(
        default=3.0,
        metadata={"duration": True, "help": "time window persisted ahead of the timestamps handed out"},
    )

    def validate(self) -> None:
        if not 0.05 <= self.save_interval <= 3600:
            raise ConfigError(f"tso.save-interval: expected 50ms..1h, got {self.save_interval:g}s")


@dataclass
class EtcdSecurityConfig(SecurityConfig):
    """``[etcd-security]``: TLS to etcd (``https://`` URLs in ``etcd``); see docs/security.md.

    ``ssl-ca`` is the CA that signed etcd's certificate (empty: the system's CA
    store); ``ssl-cert`` and ``ssl-key`` this member's client certificate, for an
    etcd started with ``--client-cert-auth``."""

    section = "etcd-security"


@dataclass
class MetaConfig:
    """The meta service: timestamp oracle and node registry."""

    addr: str = field(default=DEFAULT_ADDR, metadata={"help": "gRPC listen address host:port"})
    advertise_addr: str = field(
        default="", metadata={"help": "address clients and members dial; default addr"}
    )
    data_dir: str = field(default="./var/meta", metadata={"help": "local backend: where state is kept"})
    name: str = field(default="", metadata={"help": "member id; default meta-<advertise-addr>"})
    etcd: str = field(
        default="", metadata={"help": "etcd client URLs, comma-separated; empty = local backend"}
    )
    etcd_prefix: str = field(default=DEFAULT_PREFIX, metadata={"help": "key prefix in etcd"})
    election_ttl: float = field(
        default=3.0, metadata={"duration": True, "help": "leader lease TTL (whole seconds, at least 1s)"}
    )
    status_addr: str = field(default="", metadata={"help": "HTTP /status and /metrics address; empty = off"})
    tso: TsoConfig = field(default_factory=TsoConfig)
    cluster_token: str = cluster_token_field()
    keepalive: KeepaliveConfig = field(default_factory=KeepaliveConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    etcd_security: EtcdSecurityConfig = field(default_factory=EtcdSecurityConfig)

    def validate(self) -> None:
        check_advertise_addr(self.addr, self.advertise_addr, required=bool(self.etcd), when=" with etcd")
        if self.status_addr:
            self.status_listen()
        if not self.data_dir and not self.etcd:
            raise ConfigError("data-dir: must not be empty with the local backend")
        schemes = {scheme for scheme, _, _ in self._etcd_parsed()}
        if len(schemes) > 1:
            raise ConfigError(f"etcd: all URLs must be https:// or all http://, got {self.etcd!r}")
        if self.etcd_security.enabled and not self.etcd_tls:
            raise ConfigError("etcd-security: TLS to etcd needs https:// URLs in etcd")
        if not self.etcd_prefix.startswith("/") or self.etcd_prefix.endswith("/") or " " in self.etcd_prefix:
            raise ConfigError(
                f"etcd-prefix: expected a path like {DEFAULT_PREFIX!r}, got {self.etcd_prefix!r}"
            )
        if not 1 <= self.election_ttl <= 600:
            raise ConfigError(f"election-ttl: expected 1s..10m, got {self.election_ttl:g}s")
        if any(c.isspace() for c in self.name):
            raise ConfigError(f"name: must not contain spaces, got {self.name!r}")

    @property
    def backend(self) -> str:
        return "etcd" if self.etcd else "local"

    @property
    def etcd_tls(self) -> bool:
        """True when ``etcd`` names https:// URLs."""
        return any(scheme == "https" for scheme, _, _ in self._etcd_parsed())

    def etcd_credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials for the etcd client; None for http:// URLs."""
        if not self.etcd_tls:
            return None
        return tls_channel_credentials(self.etcd_security)

    def etcd_urls(self) -> list[tuple[str, int]]:
        """``(host, port)`` of each URL in ``etcd``; the error names the key."""
        return [(host, port) for _, host, port in self._etcd_parsed()]

    def _etcd_parsed(self) -> list[tuple[str, str, int]]:
        out: list[tuple[str, str, int]] = []
        for raw in (u.strip() for u in self.etcd.split(",")):
            if not raw:
                continue
            url = urlsplit(raw if "://" in raw else f"http://{raw}")
            if url.scheme not in ("http", "https"):
                raise ConfigError(f"etcd: expected http:// or https:// URLs, got {raw!r}")
            try:
                port = url.port
            except ValueError:
                port = None
            if not url.hostname or port is None or url.path not in ("", "/"):
                raise ConfigError(f"etcd: expected URLs like http://127.0.0.1:2379, got {raw!r}")
            out.append((url.scheme, url.hostname, port))
        if self.etcd and not out:
            raise ConfigError(f"etcd: expected URLs like http://127.0.0.1:2379, got {self.etcd!r}")
        return out

    def status_listen(self) -> tuple[str, int]:
        """Where the HTTP status endpoint listens: ``"9100"`` and ``":9100"`` mean 127.0.0.1."""
        return listen_addr(self.status_addr, "status-addr")

    def advertise(self, bound_port: int | None = None) -> str:
        """The address others dial; with ``addr`` on port 0, the port actually bound."""
        return advertise_addr(self.addr, self.advertise_addr, bound_port)

    def member_name(self, bound_port: int | None = None) -> str:
        return self.name or f"meta-{self.advertise(bound_port)}"
