"""The ``[sink.redis]`` table: connection, delivery and the ``[[sink.redis.rules]]``.

::

    [sink.redis]
    url = "redis://redis:6379/0"            # redis://, rediss:// (TLS), unix:///path/redis.sock
    password-env = "BRIDGE_REDIS_PASSWORD"  # read when `password` (and the URL's) is empty
    cluster = false
    [[sink.redis.rules]]
    db = "shop"
    table = "users"                         # or "*" or "/regex/"
    keys = ["user:{id}", "user:email:{email}"]
    modes = ["invalidate"]                  # invalidate | publish | stream | upsert, combinable

Every key is checked here, at construction; errors name the key
(``sink.redis.rules[1].modes``). The password is never logged: :func:`safe_url`
is what log lines show. The rules' templates are parsed here and checked
against tables later (:mod:`drainer.sinks.redis.rules`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from bridge.config import build, check_addr
from bridge.errors import ConfigError
from drainer.sinks.redis.render import DEFAULT_NULL_TOKEN

PREFIX = "sink.redis."
DEFAULT_KEY = "{db}:{table}:{pk}"
DEFAULT_PASSWORD_ENV = "BRIDGE_REDIS_PASSWORD"  # noqa: S105 - the variable's name
MODES = ("invalidate", "publish", "stream", "upsert")
Mode = Literal["invalidate", "publish", "stream", "upsert"]


@dataclass
class RuleConfig:
    """One ``[[sink.redis.rules]]`` entry: which tables, which keys, which modes."""

    db: str = field(default="*", metadata={"help": 'database: a name, "*" (any) or "/regex/"'})
    table: str = field(default="*", metadata={"help": 'table: a name, "*" (any) or "/regex/"'})
    keys: list[str] = field(
        default_factory=lambda: [DEFAULT_KEY],
        metadata={
            "help": "key templates: {column}, {col:name}, {db}, {table}, {pk} (the primary key, "
            "joined by key-separator); rendered from the before and the after image"
        },
    )
    modes: list[str] = field(
        default_factory=lambda: ["invalidate"],
        metadata={
            "help": "any of invalidate, publish, stream, upsert (invalidate and upsert exclude each other)"
        },
    )
    channel: str = field(
        default="bridge:{db}:{table}", metadata={"help": "publish: the channel; placeholders {db}, {table}"}
    )
    publish_per: Literal["row", "transaction"] = field(
        default="row",
        metadata={"help": "publish: a message per changed row, or per transaction and channel"},
    )
    stream: str = field(
        default="bridge:stream:{db}:{table}",
        metadata={"help": "stream: the stream's key; placeholders {db}, {table}"},
    )
    stream_maxlen: int = field(
        default=0, metadata={"help": "stream: XADD MAXLEN ~ this many entries (0: no length trimming)"}
    )
    stream_max_age: float = field(
        default=0.0,
        metadata={"duration": True, "help": "stream: XADD MINID ~ entries younger than this (0: none)"},
    )
    upsert_format: Literal["json", "hash"] = field(
        default="json",
        metadata={"help": "upsert: the after-image as one JSON string, or a hash of column -> text"},
    )
    upsert_ttl: float = field(
        default=0.0, metadata={"duration": True, "help": "upsert: expire written keys after this (0: never)"}
    )

    def check(self, where: str) -> None:
        """Checks across keys; ``where`` is ``sink.redis.rules[i]``."""
        unknown = [mode for mode in self.modes if mode not in MODES]
        if unknown or not self.modes:
            raise ConfigError(
                f"{where}.modes: expected one or more of {', '.join(MODES)}, got {self.modes!r}"
            )
        if "invalidate" in self.modes and "upsert" in self.modes:
            raise ConfigError(
                f"{where}.modes: invalidate and upsert both write the rule's keys (upsert deletes a "
                "deleted row's keys itself); keep one of them"
            )
        if not self.keys and {"invalidate", "upsert"} & set(self.modes):
            raise ConfigError(f"{where}.keys: {'/'.join(self.modes)} needs at least one key template")
        if self.stream_maxlen < 0:
            raise ConfigError(f"{where}.stream-maxlen: 0 or more, got {self.stream_maxlen}")
        if self.stream_maxlen and self.stream_max_age:
            raise ConfigError(f"{where}.stream-max-age: XADD trims by MAXLEN or by MINID, not both")


@dataclass
class RedisSinkConfig:
    """The ``[sink.redis]`` table (``rules`` are parsed into :class:`RuleConfig`\\ s)."""

    url: str = field(  # repr=False: the URL may carry the password
        default="redis://127.0.0.1:6379/0",
        repr=False,
        metadata={
            "help": "redis://[user[:password]@]host:port/db, rediss:// (TLS) or unix:///path?db=N; "
            "cluster: any one node",
            "secret": True,
        },
    )
    password: str = field(
        default="",
        repr=False,
        metadata={"help": "the password (AUTH); empty: the URL's, else password-env", "secret": True},
    )
    password_env: str = field(
        default=DEFAULT_PASSWORD_ENV,
        metadata={"help": "environment variable read when password and the URL's are empty"},
    )
    username: str = field(default="", metadata={"help": "ACL user (empty: the URL's, else default)"})
    db: int = field(default=-1, metadata={"help": "database number; -1: the URL's (/N), else 0"})
    cluster: bool = field(
        default=False, metadata={"help": "Redis Cluster: keys grouped by slot, pipelined per node"}
    )
    cluster_nodes: list[str] = field(
        default_factory=list, metadata={"help": "more host:port startup nodes of the cluster"}
    )
    pool_size: int = field(default=8, metadata={"help": "connections at most (per node in a cluster)"})
    connect_timeout: float = field(default=5.0, metadata={"duration": True, "help": "TCP connect timeout"})
    timeout: float = field(
        default=30.0, metadata={"duration": True, "help": "how long one pipeline's replies may take"}
    )
    health_check_interval: float = field(
        default=15.0,
        metadata={
            "duration": True,
            "help": "a connection idle this long is PINGed before its next use (a half-open one is "
            "replaced, not written into); TCP keepalive is on as well; 0 = no PING",
        },
    )
    tls_ca_file: str = field(default="", metadata={"help": "rediss://: CA bundle (PEM) to verify the server"})
    tls_cert_file: str = field(default="", metadata={"help": "rediss://: client certificate (PEM)"})
    tls_key_file: str = field(default="", metadata={"help": "rediss://: client key (PEM)"})
    tls_check_hostname: bool = field(
        default=True, metadata={"help": "rediss://: the certificate must name the host"}
    )
    unlink: bool = field(
        default=True,
        metadata={"help": "invalidate with UNLINK (frees memory off-thread; Redis >= 4); false: DEL"},
    )
    null_token: str = field(
        default=DEFAULT_NULL_TOKEN, metadata={"help": "what a NULL column renders as in keys and hash fields"}
    )
    key_separator: str = field(
        default=":", metadata={"help": "joins the columns of a composite primary key in {pk}"}
    )
    batch_commands: int = field(
        default=2048,
        metadata={"help": "a pipeline is sent once this many commands (or keys) wait; also at every flush"},
    )
    batch_interval: float = field(
        default=0.05,
        metadata={"duration": True, "help": "a pipeline is sent once its oldest command waited this long"},
    )
    del_batch_keys: int = field(
        default=256,
        metadata={"help": "consecutive invalidations merge into one DEL/UNLINK of at most this many keys"},
    )
    scan_on_ddl: bool = field(
        default=True,
        metadata={
            "help": "TRUNCATE/DROP/RENAME TABLE, DROP DATABASE: delete the table's keys found by SCAN "
            "MATCH on each template; false: only log that they may be stale"
        },
    )
    checkpoint_key: str = field(
        default="",
        metadata={"help": "mirror the durable position into this key (JSON) after every flush; empty: off"},
    )
    rules: list[RuleConfig] = field(
        default_factory=list, metadata={"help": "[[sink.redis.rules]]; none: one rule for every table"}
    )

    def validate(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ConfigError(
                f"{PREFIX}url: expected redis://host:port/db, rediss://... or unix:///path, got scheme "
                f"{parts.scheme!r}"
            )
        if parts.scheme == "unix" and not parts.path:
            raise ConfigError(f"{PREFIX}url: unix:// needs the socket's path, e.g. unix:///run/redis.sock")
        if parts.scheme != "unix" and not parts.hostname:
            raise ConfigError(f"{PREFIX}url: no host in the URL")
        if self.cluster and parts.scheme == "unix":
            raise ConfigError(f"{PREFIX}cluster: a cluster is reached over TCP, not a unix:// socket")
        for i, node in enumerate(self.cluster_nodes):
            check_addr(node, f"{PREFIX}cluster-nodes[{i}]")
        if self.cluster_nodes and not self.cluster:
            raise ConfigError(f"{PREFIX}cluster-nodes: only with cluster = true")
        if self.database() != 0 and self.cluster:
            raise ConfigError(f"{PREFIX}db: a Redis Cluster has database 0 only, got {self.database()}")
        if parts.scheme != "rediss" and (self.tls_ca_file or self.tls_cert_file or self.tls_key_file):
            raise ConfigError(f"{PREFIX}tls-ca-file: TLS settings need a rediss:// url")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError(f"{PREFIX}tls-key-file: tls-cert-file and tls-key-file go together")
        for key, value, low, high in (
            ("pool-size", self.pool_size, 1, 1024),
            ("batch-commands", self.batch_commands, 1, 1_000_000),
            ("del-batch-keys", self.del_batch_keys, 1, 100_000),
        ):
            if not low <= value <= high:
                raise ConfigError(f"{PREFIX}{key}: between {low} and {high}, got {value}")
        if not 0 <= self.health_check_interval <= 3600:
            raise ConfigError(
                f"{PREFIX}health-check-interval: between 0 and 1h, got {self.health_check_interval:g}s"
            )
        if self.timeout < 0.1 or self.connect_timeout < 0.1:
            raise ConfigError(f"{PREFIX}timeout: at least 100ms (connect-timeout too)")
        if self.batch_interval > 10:
            raise ConfigError(f"{PREFIX}batch-interval: at most 10s, got {self.batch_interval:g}s")
        if not self.key_separator:
            raise ConfigError(f'{PREFIX}key-separator: must not be empty (e.g. ":")')

    def database(self) -> int:
        """The database number: ``db``, else the URL's (path ``/N`` or ``?db=N``), else 0."""
        if self.db >= 0:
            return self.db
        parts = urlsplit(self.url)
        text = parts.path.strip("/") if parts.scheme != "unix" else ""
        for param in parts.query.split("&"):
            name, _, value = param.partition("=")
            if name == "db":
                text = value
        if not text:
            return 0
        if not text.isdigit():
            raise ConfigError(f"{PREFIX}url: the database must be a number, got {text!r}")
        return int(text)

    def auth(self) -> tuple[str | None, str | None]:
        """(username, password): the keys, else the URL's, else (password) ``$password-env``."""
        parts = urlsplit(self.url)
        username = self.username or unquote(parts.username or "") or None
        password = self.password or unquote(parts.password or "")
        if not password and self.password_env:
            password = os.environ.get(self.password_env, "")
        return username, password or None


def safe_url(url: str) -> str:
    """``url`` without its password: what log lines and errors show."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def load_config(table: Mapping[str, Any]) -> RedisSinkConfig:
    """:class:`RedisSinkConfig` from the ``[sink.redis]`` table; :class:`ConfigError` naming the key."""
    data = dict(table)
    raw_rules = data.pop("rules", [])
    if not isinstance(raw_rules, list):
        raise ConfigError(
            f"{PREFIX}rules: expected [[sink.redis.rules]] tables, got {type(raw_rules).__name__}"
        )
    config = build(RedisSinkConfig, data, prefix=PREFIX)
    for i, raw in enumerate(raw_rules):
        where = f"{PREFIX}rules[{i}]"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: expected a table, got {type(raw).__name__}")
        rule = build(RuleConfig, raw, prefix=f"{where}.")
        rule.check(where)
        config.rules.append(rule)
    if not config.rules:
        config.rules.append(RuleConfig())
    return config
