"""PumpConfig: defaults, validation messages naming the key, secrets, DSNs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bridge.config import build, describe, load
from bridge.dsn import Dsn, parse_mysql_dsn
from bridge.errors import ConfigError
from pump.config import GIB, PASSWORD_ENV, PumpConfig, ResolverConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "pump.toml"


def test_defaults() -> None:
    cfg = build(PumpConfig, {})
    assert cfg.addr == "127.0.0.1:8250"
    assert cfg.heartbeat_interval == 2.0
    assert cfg.heartbeat_ttl_ms == 6000
    assert cfg.max_txn_timeout == 600.0
    assert cfg.fake_binlog_interval == 0.2
    assert cfg.gc == 7 * 86400
    assert cfg.stop_write_at_available_space == 10 * GIB
    assert cfg.status_listen() == ("127.0.0.1", 8251)
    assert cfg.resolver.type == "none"
    assert cfg.node_name() == "pump-127.0.0.1:8250"


def test_example_loads() -> None:
    cfg = load(PumpConfig, EXAMPLE)
    assert cfg.node_id == "pump-1"
    assert (cfg.resolver.type, cfg.resolver.dsn) == ("sqlite", "sqlite:var/upstream.db")  # the README's tour
    assert cfg.max_txn_timeout == 600
    assert cfg.gc == 7 * 86400


def test_durations_and_overrides() -> None:
    cfg = build(PumpConfig, {"heartbeat-interval": "500ms", "max-txn-timeout": "2s", "gc": "36h"})
    assert (cfg.heartbeat_interval, cfg.heartbeat_ttl_ms, cfg.max_txn_timeout, cfg.gc) == (
        0.5,
        1500,
        2.0,
        129600,
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"addr": "nowhere"}, "addr: expected host:port"),
        ({"addr": "0.0.0.0:8250"}, "advertise-addr: required when addr listens on 0.0.0.0"),
        ({"advertise-addr": "0.0.0.0:1"}, "advertise-addr: must name a reachable host"),
        ({"node-id": "a/b"}, "node-id: expected 1..128 printable characters"),
        ({"node-id": "a b"}, "node-id:"),
        ({"meta": ""}, "meta: expected host:port"),
        ({"meta": "127.0.0.1:1,bad"}, "meta: expected host:port"),
        ({"data-dir": ""}, "data-dir: must not be empty"),
        ({"heartbeat-interval": "2h"}, "heartbeat-interval: expected 50ms..1m"),
        ({"fake-binlog-interval": "1ms"}, "fake-binlog-interval: expected 10ms..1m"),
        ({"max-txn-timeout": "soon"}, "max-txn-timeout: expected a duration"),
        ({"gc": "10s"}, "gc: expected 0 (keep forever) or at least 1m"),
        ({"stop-write-at-available-space": -1}, "stop-write-at-available-space: expected bytes >= 0"),
        ({"stop-write-at-available-space": "10GiB"}, "stop-write-at-available-space: expected an integer"),
        ({"status-addr": "x"}, "status-addr: expected host:port"),
        ({"max-txn-timout": "1s"}, "did you mean 'max-txn-timeout'"),
        ({"resolver": {"type": "tikv"}}, "resolver.type: expected one of 'none', 'mysql'"),
        ({"resolver": {"type": "mysql"}}, "resolver.dsn: required"),
        ({"resolver": {"dsn": "postgres://h/db"}}, "resolver.dsn: expected mysql://"),
        ({"resolver": {"dsn": "mysql://h/db?sslmode=x"}}, "resolver.dsn: unknown parameter 'sslmode'"),
        ({"resolver": {"table": "x; DROP TABLE y"}}, "resolver.table: expected a plain table name"),
        ({"resolver": {"interval": "10ms"}}, "resolver.interval: expected 50ms..1h"),
    ],
)
def test_invalid_values_name_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build(PumpConfig, data)


def test_status_addr_shorthands_and_advertise() -> None:
    assert build(PumpConfig, {"status-addr": "9100"}).status_listen() == ("127.0.0.1", 9100)
    assert build(PumpConfig, {"status-addr": ":9100"}).status_listen() == ("127.0.0.1", 9100)
    cfg = build(PumpConfig, {"addr": "127.0.0.1:0"})
    assert cfg.advertise(bound_port=4321) == "127.0.0.1:4321"
    assert cfg.node_name(bound_port=4321) == "pump-127.0.0.1:4321"
    cfg = build(PumpConfig, {"addr": "0.0.0.0:8250", "advertise-addr": "10.1.2.3:8250", "node-id": "p9"})
    assert (cfg.advertise(), cfg.node_name()) == ("10.1.2.3:8250", "p9")


def test_secrets_are_never_described() -> None:
    cfg = build(
        PumpConfig, {"resolver": {"type": "mysql", "dsn": "mysql://u:hunter2@db:3306/shop", "password": "pw"}}
    )
    text = "\n".join(describe(cfg))
    assert "hunter2" not in text
    assert "resolver.dsn = <redacted>" in text
    assert "resolver.password = <redacted>" in text


def test_dsn_error_does_not_echo_the_password() -> None:
    with pytest.raises(ConfigError) as failure:
        build(PumpConfig, {"resolver": {"dsn": "mysql://u:hunter2@db:notaport/shop"}})
    assert "hunter2" not in str(failure.value)


def test_password_precedence() -> None:
    assert ResolverConfig(password="file").effective_password({PASSWORD_ENV: "env"}) == "file"
    assert ResolverConfig().effective_password({PASSWORD_ENV: "env"}) == "env"
    assert ResolverConfig().effective_password({}) is None


def test_parse_dsn_and_redaction(caplog: pytest.LogCaptureFixture) -> None:
    dsn = parse_mysql_dsn("mysql://bin%40log:p%3Ass@db.example:3307/shop?connect_timeout=3")
    assert dsn == Dsn(
        "mysql", "db.example", 3307, "bin@log", "p:ss", "shop", params=(("connect_timeout", "3"),)
    )
    assert dsn.redacted() == "mysql://bin%40log:***@db.example:3307/shop?connect_timeout=3"
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("dsn %s %r", dsn, dsn)
    assert "p:ss" not in caplog.text
    assert parse_mysql_dsn("mysql://root@127.0.0.1/") == Dsn("mysql", "127.0.0.1", 3306, "root", "", "")
    assert parse_mysql_dsn("mysql://h").with_database("x").database == "x"
