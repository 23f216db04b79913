"""bridge.producer.dsn: the upstream DSN forms and that a password never shows."""

from __future__ import annotations

import pytest

from bridge.errors import ConfigError
from bridge.producer.dsn import Dsn, parse_dsn


@pytest.mark.parametrize(
    ("text", "path"),
    [("sqlite:///tmp/up.db", "/tmp/up.db"), ("sqlite:data/up.db", "data/up.db"), ("SQLITE:x.db", "x.db")],
)
def test_sqlite_forms(text: str, path: str) -> None:
    dsn = parse_dsn(text)
    assert dsn == Dsn(scheme="sqlite", path=path)
    assert dsn.is_sqlite and not dsn.is_mysql
    assert parse_dsn(dsn.redacted()) == dsn


def test_mysql_defaults_and_decoding() -> None:
    assert parse_dsn("mysql://db.example") == Dsn("mysql", "db.example", 3306, "root", "", "")
    dsn = parse_dsn("mariadb://app:p%40ss@10.0.0.1:3307/shop%2Dx")
    assert (dsn.scheme, dsn.host, dsn.port, dsn.user, dsn.password, dsn.database) == (
        "mysql",
        "10.0.0.1",
        3307,
        "app",
        "p@ss",
        "shop-x",
    )


def test_password_is_never_shown() -> None:
    dsn = parse_dsn("mysql://app:hunter2@h/db")
    for text in (str(dsn), repr(dsn), dsn.redacted()):
        assert "hunter2" not in text
    assert dsn.redacted() == "mysql://app:***@h:3306/db"
    with pytest.raises(ConfigError) as caught:
        parse_dsn("mysql://app:hunter2@h:notaport/db")
    assert "hunter2" not in str(caught.value)


def test_password_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_UPSTREAM_PASSWORD", "from-env")
    assert parse_dsn("mysql://app@h/db").with_password_from_env().password == "from-env"
    assert parse_dsn("mysql://app:given@h/db").with_password_from_env().password == "given"
    assert parse_dsn("mysql://app@h/db").with_database("other").database == "other"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("postgres://h/db", "unknown scheme"),
        ("nothing", "expected"),
        ("sqlite://host/x.db", "no host"),
        ("sqlite:", "no database file"),
        ("mysql:///db", "no host"),
        ("mysql://h/a/b", "single database"),
        ("mysql://h/db?ssl=1", "takes no"),
    ],
)
def test_bad_dsns_name_the_key(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as caught:
        parse_dsn(text, key="--upstream")
    assert str(caught.value).startswith("--upstream: ")
