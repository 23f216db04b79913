"""MetaConfig: defaults, overrides, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.apps.meta.config import MetaConfig
from bridge.config import load
from bridge.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "meta.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_local_backend_on_loopback() -> None:
    config = load(MetaConfig, None)
    assert config.addr == "127.0.0.1:8248"
    assert config.backend == "local"
    assert config.advertise() == "127.0.0.1:8248"
    assert config.member_name() == "meta-127.0.0.1:8248"
    assert config.tso.save_interval == 3.0
    assert config.election_ttl == 3.0
    assert config.etcd_prefix == "/binlog-bridge/v1"


def test_file_values_and_flag_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'addr = "127.0.0.1:9000"\netcd = "http://127.0.0.1:2379, 10.0.0.2:2379"\n'
        'election-ttl = "5s"\n[tso]\nsave-interval = "500ms"\n',
    )
    config = load(MetaConfig, path, {"addr": "127.0.0.1:9100", "name": "m1", "data-dir": None})
    assert config.addr == "127.0.0.1:9100"
    assert config.member_name() == "m1"
    assert config.backend == "etcd"
    assert config.etcd_urls() == [("127.0.0.1", 2379), ("10.0.0.2", 2379)]
    assert config.election_ttl == 5.0
    assert config.tso.save_interval == 0.5


def test_port_zero_advertises_the_bound_port() -> None:
    config = load(MetaConfig, None, {"addr": "127.0.0.1:0"})
    assert config.advertise(bound_port=41000) == "127.0.0.1:41000"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("9100", ("127.0.0.1", 9100)), (":9100", ("127.0.0.1", 9100)), ("0.0.0.0:9100", ("0.0.0.0", 9100))],
)
def test_status_addr_defaults_to_loopback(value: str, expected: tuple[str, int]) -> None:
    assert load(MetaConfig, None, {"status-addr": value}).status_listen() == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('adr = "127.0.0.1:1"', "adr: unknown key (did you mean 'addr'?)"),
        ("[tso]\nsave-intervall = 1", "tso.save-intervall: unknown key (did you mean 'tso.save-interval'?)"),
        ('addr = "localhost"', "addr: expected host:port"),
        ('advertise-addr = "0.0.0.0:8248"', "advertise-addr: must name a reachable host"),
        ('addr = "0.0.0.0:8248"\netcd = "http://127.0.0.1:2379"', "advertise-addr: required with etcd"),
        ('etcd = "ftp://127.0.0.1:2379"', "etcd: expected http:// or https:// URLs"),
        ('etcd = "http://127.0.0.1"', "etcd: expected URLs like"),
        ('etcd-prefix = "binlog/"', "etcd-prefix: expected a path"),
        ('election-ttl = "500ms"', "election-ttl: expected 1s..10m"),
        ('election-ttl = "soon"', 'election-ttl: expected a duration such as "3s"'),
        ("[tso]\nsave-interval = 0", "tso.save-interval: expected 50ms..1h"),
        ('status-addr = "nowhere"', "status-addr: expected host:port"),
        ("addr = 8248", "addr: expected a string"),
        ('tso = "fast"', "tso: expected a table [tso]"),
        ('[security]\nssl-ca = "/no/such/ca.pem"', "security.ssl-ca: no such file"),
        ("addr = ", "invalid TOML"),
    ],
)
def test_bad_input_names_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text + "\n")
    with pytest.raises(ConfigError) as info:
        load(MetaConfig, path)
    assert message in str(info.value)
    assert str(path) in str(info.value)
