"""The TOML loader: keys, values and flag overrides, with errors naming the key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from bridge.config import check_addr, describe, load, parse_duration
from bridge.errors import ConfigError
from bridge.grpcutil import SecurityConfig


@dataclass
class Inner:
    save_interval: float = field(default=3.0, metadata={"duration": True})
    names: list[str] = field(default_factory=list)


@dataclass
class Sample:
    addr: str = "127.0.0.1:1"
    workers: int = 4
    ratio: float = 0.5
    enabled: bool = False
    strategy: Literal["range", "hash"] = "range"
    password: str = field(default="", metadata={"secret": True})
    inner: Inner = field(default_factory=Inner)
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def validate(self) -> None:
        if self.workers < 1:
            raise ConfigError("workers: must be at least 1")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_file_values_and_defaults(tmp_path: Path) -> None:
    cfg = load(Sample, write(tmp_path, 'workers = 8\nratio = 2\n[inner]\nsave-interval = "500ms"\n'))
    assert cfg.workers == 8
    assert cfg.ratio == 2.0
    assert cfg.inner.save_interval == 0.5
    assert cfg.addr == "127.0.0.1:1"


def test_flags_override_file(tmp_path: Path) -> None:
    path = write(tmp_path, "workers = 8\n[inner]\nnames = ['a']\n")
    cfg = load(Sample, path, {"workers": 2, "inner.names": ["b"], "addr": None})
    assert cfg.workers == 2
    assert cfg.inner.names == ["b"]
    assert cfg.addr == "127.0.0.1:1"  # None means the flag was not given


def test_unknown_key_is_named_with_a_suggestion(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"inner\.save-intervl: unknown key \(did you mean 'inner\.save-interval'\?\)"
    ):
        load(Sample, write(tmp_path, '[inner]\nsave-intervl = "1s"\n'))


def test_wrong_type_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'workers = "many"\n')
    with pytest.raises(ConfigError) as info:
        load(Sample, path)
    assert str(path) in str(info.value)
    assert "workers: expected an integer, got 'many'" in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("enabled = 1\n", "enabled: expected true or false"),
        ('strategy = "score"\n', "strategy: expected one of 'range', 'hash'"),
        ('[inner]\nsave-interval = "soon"\n', "inner.save-interval: expected a duration"),
        ("inner = 3\n", "inner: expected a table"),
        ("[inner]\nnames = [1]\n", r"inner.names\[0\]: expected a string"),
        ("workers = 0\n", "workers: must be at least 1"),
        (
            '[security]\nssl-cert = "/nonexistent.pem"\nssl-key = "/nonexistent.key"\n',
            "security.ssl-cert: no such file",
        ),
        ('[security]\nssl-cert = "/x.pem"\n', "must be set together"),
    ],
)
def test_bad_values(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(Sample, write(tmp_path, text))


def test_malformed_toml_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="invalid TOML"):
        load(Sample, write(tmp_path, "workers = = 3\n"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load(Sample, tmp_path / "absent.toml")


def test_durations() -> None:
    assert parse_duration("3s", "k") == 3.0
    assert parse_duration("10m", "k") == 600.0
    assert parse_duration("7d", "k") == 7 * 86400.0
    assert parse_duration(2, "k") == 2.0
    with pytest.raises(ConfigError, match="k: a duration cannot be negative"):
        parse_duration(-1, "k")


def test_describe_redacts_secrets() -> None:
    lines = describe(Sample(password="hunter2"))
    assert "password = <redacted>" in lines
    assert not any("hunter2" in line for line in lines)
    assert "inner.save-interval = 3.0" in lines


def test_check_addr() -> None:
    assert check_addr("127.0.0.1:8248", "addr") == ("127.0.0.1", 8248)
    assert check_addr("[::1]:80", "addr") == ("::1", 80)
    for bad in ("8248", "host:", ":80", "h:99999", "h:x"):
        with pytest.raises(ConfigError, match="addr: expected host:port"):
            check_addr(bad, "addr")
