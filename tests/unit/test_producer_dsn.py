"""bridge.dsn: the upstream DSN forms, the TLS parameters and that a password never shows."""

from __future__ import annotations

import contextlib
import re
import sqlite3
import ssl
from pathlib import Path

import pytest

from bridge.dsn import Dsn, connect_sqlite, parse_dsn, parse_mysql_dsn
from bridge.errors import ConfigError
from tests.support.tls import self_signed_cert


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
        ("mysql://h/db?ssl=1", "unknown parameter 'ssl'"),
        ("mysql://h/db#x", "no #fragment"),
        ("mysql://h/db?connect_timeout=soon", "connect_timeout"),
    ],
)
def test_bad_dsns_name_the_key(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as caught:
        parse_dsn(text, key="--upstream")
    assert str(caught.value).startswith("--upstream: ")


# --- TLS: ssl-mode, ssl-ca, ssl-cert, ssl-key


@pytest.fixture(scope="module")
def cert_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 (its own CA) and its key."""
    cert, key = self_signed_cert(tmp_path_factory.mktemp("tls"))
    return str(cert), str(key)


def test_ssl_mode_defaults_to_preferred_and_takes_the_mysql_spelling() -> None:
    assert parse_dsn("mysql://h/db").ssl_mode == "preferred"
    assert parse_dsn("mysql://h/db?ssl-mode=DISABLED").ssl_mode == "disabled"
    assert parse_dsn("mysql://h/db?ssl-mode=Required").ssl_mode == "required"


def test_preferred_leaves_tls_to_pymysql_and_disabled_turns_it_off() -> None:
    assert parse_dsn("mysql://h/db").pymysql_tls() == {}
    assert parse_dsn("mysql://h/db?ssl-mode=preferred").pymysql_tls() == {}
    assert parse_dsn("mysql://h/db?ssl-mode=disabled").pymysql_tls() == {"ssl_disabled": True}


def test_required_encrypts_without_checking_the_certificate() -> None:
    tls = parse_dsn("mysql://h/db?ssl-mode=required").pymysql_tls()
    context = tls.pop("ssl")
    assert tls == {}  # nothing else: an ``ssl`` context alone makes pymysql insist on TLS
    assert isinstance(context, ssl.SSLContext)
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_NONE, False)
    assert context.get_ca_certs() == []  # no default CA store loaded: that is the ~18 ms


@pytest.mark.parametrize(("mode", "hostname"), [("verify-ca", False), ("VERIFY_IDENTITY", True)])
def test_verify_modes_check_the_certificate_against_ssl_ca(
    mode: str, hostname: bool, cert_files: tuple[str, str]
) -> None:
    cert, _ = cert_files
    context = parse_dsn(f"mysql://h/db?ssl-mode={mode}&ssl-ca={cert}").pymysql_tls()["ssl"]
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_REQUIRED, hostname)
    assert [ca["subject"] for ca in context.get_ca_certs()] == [((("commonName", "127.0.0.1"),),)]


def test_a_client_certificate_is_loaded_with_its_key(cert_files: tuple[str, str], tmp_path: Path) -> None:
    cert, key = cert_files
    dsn = parse_dsn(f"mysql://h/db?ssl-mode=required&ssl-cert={cert}&ssl-key={key}")
    assert isinstance(dsn.pymysql_tls()["ssl"], ssl.SSLContext)
    # A certificate file that holds its key too needs no ssl-key.
    both = tmp_path / "both.pem"
    both.write_text(Path(cert).read_text() + Path(key).read_text())
    assert "ssl" in parse_dsn(f"mysql://h/db?ssl-mode=required&ssl-cert={both}").pymysql_tls()
    # The key is really loaded: another certificate's key is refused.
    _, other_key = self_signed_cert(tmp_path, "other")
    mismatched = parse_dsn(f"mysql://h/db?ssl-mode=required&ssl-cert={cert}&ssl-key={other_key}")
    with pytest.raises(ConfigError, match="ssl-cert: cannot load"):
        mismatched.pymysql_tls()


def test_a_file_that_is_not_pem_is_a_config_error_naming_the_parameter(tmp_path: Path) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate\n")
    dsn = parse_dsn(f"mysql://app:hunter2@h/db?ssl-mode=verify-ca&ssl-ca={bogus}")
    with pytest.raises(ConfigError, match="ssl-ca: cannot load") as caught:
        dsn.pymysql_tls()
    assert "hunter2" not in str(caught.value)


def test_tls_parameters_survive_redaction(cert_files: tuple[str, str]) -> None:
    cert, _ = cert_files
    dsn = parse_dsn(f"mysql://app:hunter2@h/db?ssl-mode=verify-identity&ssl-ca={cert}")
    assert dsn.redacted() == f"mysql://app:***@h:3306/db?ssl-mode=verify-identity&ssl-ca={cert}"
    assert parse_dsn(dsn.redacted()).params == dsn.params


@pytest.mark.parametrize(
    ("query", "fragment"),
    [
        ("ssl-mode=on", "ssl-mode must be one of disabled, preferred, required, verify-ca, verify-identity"),
        ("ssl-mode=disabled&ssl-ca={cert}", "ssl-ca is given but ssl-mode=disabled"),
        ("ssl-mode=disabled&ssl-cert={cert}", "ssl-cert is given but ssl-mode=disabled"),
        ("ssl-mode=verify-ca", "ssl-mode=verify-ca needs ssl-ca"),
        ("ssl-mode=verify-identity&ssl-ca=", "ssl-mode=verify-identity needs ssl-ca"),
        ("ssl-mode=required&ssl-ca={cert}", "ssl-ca is used only by"),
        ("ssl-cert={cert}", "ssl-mode=verify-identity (the default with ssl-cert) needs ssl-ca"),
        ("ssl-mode=preferred&ssl-cert={cert}", "ssl-cert needs ssl-mode=required"),
        ("ssl-mode=required&ssl-key={key}", "ssl-key needs ssl-cert"),
        ("ssl-mode=verify-ca&ssl-ca=/nonexistent/ca.pem", "ssl-ca: no such file '/nonexistent/ca.pem'"),
        ("ssl_mode=required", "unknown parameter 'ssl_mode'"),
    ],
)
def test_contradictory_tls_parameters_are_refused_by_name(
    query: str, fragment: str, cert_files: tuple[str, str]
) -> None:
    cert, key = cert_files
    text = "mysql://app:hunter2@h/db?" + query.format(cert=cert, key=key)
    with pytest.raises(ConfigError, match=re.escape(fragment)) as caught:
        parse_dsn(text, key="sink.mysql.dsn")
    assert str(caught.value).startswith("sink.mysql.dsn: ")
    assert "hunter2" not in str(caught.value)


def test_connect_sqlite_read_only_never_writes_nor_creates(tmp_path: Path) -> None:
    path = tmp_path / "up.db"
    with contextlib.closing(parse_dsn(f"sqlite://{path}").connect_sqlite(isolation_level=None)) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    with contextlib.closing(connect_sqlite(path, read_only=True)) as conn:
        assert conn.execute("SELECT count(*) FROM t").fetchone() == (0,)
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(sqlite3.OperationalError):
        connect_sqlite(tmp_path / "missing.db", read_only=True)
    assert not (tmp_path / "missing.db").exists()


def test_pymysql_args_carry_the_dsn_and_let_the_caller_add_or_replace() -> None:
    dsn = parse_dsn(
        "mysql://u:p%40ss@db.example:3307/shop?charset=latin1&connect_timeout=3&ssl-mode=disabled"
        "&read_timeout=40"
    )
    args = dsn.pymysql_args(connect_timeout=10, read_timeout=20, autocommit=True)
    assert args == {
        "host": "db.example",
        "port": 3307,
        "user": "u",
        "password": "p@ss",
        "database": "shop",
        "charset": "latin1",
        "unix_socket": None,
        "connect_timeout": 3.0,  # the DSN's wins over the caller's default
        "read_timeout": 40.0,
        "write_timeout": None,  # 0 (the default): no limit
        "ssl_disabled": True,
        "autocommit": True,
    }
    plain = parse_dsn("mysql://root@h/")
    assert plain.pymysql_args(connect_timeout=7)["connect_timeout"] == 7.0
    assert plain.pymysql_args(write_timeout=9)["write_timeout"] == 9.0
    assert plain.pymysql_args()["charset"] == "utf8mb4"
    assert plain.pymysql_args()["database"] is None
    assert dsn.pymysql_args(database=None, password="other")["database"] is None
    assert dsn.pymysql_args(password="other")["password"] == "other"


def test_parse_mysql_dsn_refuses_sqlite_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"^resolver\.dsn: expected mysql://"):
        parse_mysql_dsn("sqlite:///tmp/x.db", key="resolver.dsn")
    assert parse_mysql_dsn("mariadb://root@h/db").database == "db"
