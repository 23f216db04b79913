"""The redis-py client the sink talks through, built from :class:`RedisSinkConfig`.

Standalone (``redis.Redis`` over a connection pool; ``redis://``, ``rediss://``
or ``unix://``) or ``redis.cluster.RedisCluster`` (``cluster = true``), both
with hiredis parsing when it is installed. The client does not retry on its
own: a failed pipeline fails the flush, and the drainer's sink driver retries
with backoff after logging it (one retry policy for every sink).
"""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.retry import Retry

from bridge.config import check_addr
from drainer.sinks.redis.config import PREFIX, RedisSinkConfig

Client = redis.Redis | RedisCluster


def _tls_settings(config: RedisSinkConfig) -> dict[str, Any]:
    if urlsplit(config.url).scheme != "rediss":
        return {}
    settings: dict[str, Any] = {
        "ssl": True,
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
        "ssl_check_hostname": config.tls_check_hostname,
    }
    if config.tls_ca_file:
        settings["ssl_ca_certs"] = config.tls_ca_file
    if config.tls_cert_file:
        settings["ssl_certfile"] = config.tls_cert_file
        settings["ssl_keyfile"] = config.tls_key_file
    return settings


def _common(config: RedisSinkConfig) -> dict[str, Any]:
    username, password = config.auth()
    return {
        "username": username,
        "password": password,
        "socket_timeout": config.timeout,
        "socket_connect_timeout": config.connect_timeout,
        "socket_keepalive": True,
        "health_check_interval": config.health_check_interval,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": False,
        **_tls_settings(config),
    }


def new_client(config: RedisSinkConfig) -> Client:
    """A client for ``config`` (no connection is made until the first command)."""
    parts = urlsplit(config.url)
    common = _common(config)
    if config.cluster:
        nodes = [
            ClusterNode(  # type: ignore[no-untyped-call]
                parts.hostname or "127.0.0.1", parts.port or 6379
            )
        ]
        for i, addr in enumerate(config.cluster_nodes):
            host, port = check_addr(addr, f"{PREFIX}cluster-nodes[{i}]")
            nodes.append(ClusterNode(host, port))  # type: ignore[no-untyped-call]
        return RedisCluster(
            startup_nodes=nodes,
            max_connections=config.pool_size,
            require_full_coverage=True,
            **common,
        )
    if parts.scheme == "unix":
        pool = redis.ConnectionPool(
            connection_class=redis.UnixDomainSocketConnection,
            path=parts.path,
            db=config.database(),
            max_connections=config.pool_size,
            **{k: v for k, v in common.items() if not k.startswith("ssl") and k != "socket_connect_timeout"},
        )
    else:
        pool = redis.ConnectionPool(
            connection_class=redis.SSLConnection if common.get("ssl") else redis.Connection,
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 6379,
            db=config.database(),
            max_connections=config.pool_size,
            **{k: v for k, v in common.items() if k != "ssl"},
        )
    return redis.Redis(connection_pool=pool)
