"""gRPC servers and channels built the same way everywhere: TLS when the
``[security]`` section names certificates, the configured message size, and
loopback-only listeners unless an address says otherwise."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from bridge.auth import client_interceptors
from bridge.errors import ConfigError
from bridge.tls import RoleInterceptor

DEFAULT_MAX_MESSAGE_BYTES = 128 * 1024 * 1024  # a 100 MB binlog must fit


@dataclass
class SecurityConfig:
    """``[security]``: TLS for gRPC and HTTP endpoints. All empty = plaintext.

    ``ssl-ca`` on a server turns on mutual TLS: clients must present a
    certificate the CA signed, and :mod:`bridge.tls` checks its role name.
    """

    section = "security"  # the TOML table errors name (a class attribute, not a key)

    ssl_ca: str = field(default="", metadata={"help": "CA bundle that signed the peers' certificates"})
    ssl_cert: str = field(default="", metadata={"help": "this process's certificate (PEM)"})
    ssl_key: str = field(default="", metadata={"help": "this process's private key (PEM)", "secret": True})

    @property
    def enabled(self) -> bool:
        return bool(self.ssl_ca or self.ssl_cert or self.ssl_key)

    def validate(self) -> None:
        if bool(self.ssl_cert) != bool(self.ssl_key):
            raise ConfigError(f"{self.section}.ssl-cert and {self.section}.ssl-key must be set together")
        for f in dataclasses.fields(self):
            path = getattr(self, f.name)
            if path and not Path(path).is_file():
                raise ConfigError(f"{self.section}.{f.name.replace('_', '-')}: no such file {path!r}")


def _read(path: str) -> bytes | None:
    return Path(path).read_bytes() if path else None


KEEPALIVE_TIME_MS = 10_000
KEEPALIVE_TIMEOUT_MS = 5_000
KEEPALIVE_TIME_RANGE = (1.0, 7200.0)  # seconds
KEEPALIVE_TIMEOUT_RANGE = (0.1, 600.0)


@dataclass
class KeepaliveConfig:
    """HTTP/2 keepalive pings on every gRPC connection: a half-open link fails its calls.

    Each connection this process opens or accepts is pinged every ``time``; a peer gone
    without a FIN or RST, or a middlebox that drops packets, is noticed when a ping is not
    answered within ``timeout``, and the calls on that connection fail with UNAVAILABLE
    instead of hanging."""

    section = "keepalive"

    time: float = field(
        default=KEEPALIVE_TIME_MS / 1000,
        metadata={
            "duration": True,
            "help": "a ping every this long on each connection, idle or busy (1s..2h)",
        },
    )
    timeout: float = field(
        default=KEEPALIVE_TIMEOUT_MS / 1000,
        metadata={
            "duration": True,
            "help": "the connection is dropped when a ping is not answered within this (100ms..10m); "
            "a blackholed peer is noticed after at most time + timeout",
        },
    )

    def validate(self) -> None:
        for key, value, (low, high) in (
            ("time", self.time, KEEPALIVE_TIME_RANGE),
            ("timeout", self.timeout, KEEPALIVE_TIMEOUT_RANGE),
        ):
            if not low <= value <= high:
                raise ConfigError(
                    f"{self.section}.{key}: expected {_seconds(low)}..{_seconds(high)}, got {_seconds(value)}"
                )

    @property
    def time_ms(self) -> int:
        return round(self.time * 1000)

    @property
    def timeout_ms(self) -> int:
        return round(self.timeout * 1000)


def _seconds(value: float) -> str:
    return f"{value * 1000:g}ms" if value < 1 else f"{value:g}s"


_process_keepalive = KeepaliveConfig()


def use_keepalive(config: KeepaliveConfig) -> None:
    """Make ``config`` the keepalive of every channel and server this process builds without
    naming one (a service calls this once at start with its ``[keepalive]``)."""
    global _process_keepalive
    config.validate()
    _process_keepalive = config


def process_keepalive() -> KeepaliveConfig:
    return _process_keepalive


def channel_options(
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, keepalive: KeepaliveConfig | None = None
) -> list[tuple[str, Any]]:
    """Options of a channel or a server; ``keepalive`` None = :func:`process_keepalive`."""
    ka = keepalive if keepalive is not None else _process_keepalive
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        # Reconnect quickly after a peer restarts; the default backoff reaches
        # minutes and would keep a restarted pump out of rotation.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        ("grpc.enable_retries", 0),
        # Bounded waits on a half-open link (a peer gone without a FIN or RST, a blackholing
        # middlebox): each side pings every keepalive time while the connection is idle or
        # busy, and drops it when a ping is not answered within the keepalive timeout; the
        # calls on it fail with UNAVAILABLE. Servers accept pings at any cadence (no ping
        # strikes), so a client configured to ping more often than its server is not cut off.
        ("grpc.keepalive_time_ms", ka.time_ms),
        ("grpc.keepalive_timeout_ms", ka.timeout_ms),
        ("grpc.http2.ping_timeout_ms", ka.timeout_ms),  # grpc-core's own ping timeout: 60 s
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", ka.time_ms // 2),
        ("grpc.http2.max_ping_strikes", 0),
    ]


def server_credentials(security: SecurityConfig) -> grpc.ServerCredentials | None:
    if not security.enabled:
        return None
    key, cert = _read(security.ssl_key), _read(security.ssl_cert)
    if key is None or cert is None:
        raise ConfigError("security: a TLS server needs ssl-cert and ssl-key")
    ca = _read(security.ssl_ca)
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


def server_interceptors(security: SecurityConfig | None) -> list[grpc.aio.ServerInterceptor]:
    """What a gRPC server built with ``security`` runs before its handlers:
    the role check of :mod:`bridge.tls` under mutual TLS (``ssl-ca`` with a certificate)."""
    if security is None or not (security.ssl_ca and security.ssl_cert):
        return []
    return [RoleInterceptor()]


def channel_credentials(security: SecurityConfig) -> grpc.ChannelCredentials | None:
    if not security.enabled:
        return None
    return tls_channel_credentials(security)


def tls_channel_credentials(security: SecurityConfig) -> grpc.ChannelCredentials:
    """TLS for a client channel: ``ssl-ca`` (empty = the system's CA store) and the client certificate."""
    return grpc.ssl_channel_credentials(
        root_certificates=_read(security.ssl_ca),
        private_key=_read(security.ssl_key),
        certificate_chain=_read(security.ssl_cert),
    )


def aio_channel(
    addr: str,
    security: SecurityConfig | None = None,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    token: str | None = None,
    keepalive: KeepaliveConfig | None = None,
) -> grpc.aio.Channel:
    """An asyncio channel to ``addr`` (host:port), TLS when configured; it presents ``token``
    (default: the cluster token of this process, if any) and pings with ``keepalive``
    (default: :func:`process_keepalive`)."""
    options = channel_options(max_message_bytes, keepalive)
    creds = channel_credentials(security) if security else None
    interceptors = client_interceptors(token) or None
    if creds is None:
        return grpc.aio.insecure_channel(addr, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(addr, creds, options=options, interceptors=interceptors)


def add_port(
    server: grpc.aio.Server, addr: str, security: SecurityConfig | None = None, key: str = "addr"
) -> int:
    """Bind ``addr``; returns the port actually bound (for port 0). A failed
    bind is a :class:`ConfigError` naming the config ``key``."""
    creds = server_credentials(security) if security else None
    try:
        port: int = server.add_insecure_port(addr) if creds is None else server.add_secure_port(addr, creds)
    except RuntimeError as exc:  # grpc reports a failed bind this way
        raise ConfigError(f"{key}: cannot listen on {addr}: address in use or not available") from exc
    if port == 0:
        raise ConfigError(f"{key}: cannot listen on {addr}: address in use or not available")
    return port
