"""MySQL TLS defaults and client certificates, against a private MariaDB serving TLS.

A DSN that names ``ssl-ca`` (and no ``ssl-mode``) verifies the server fully: chain and
host name (verify-identity). The server's certificate, made by a test CA with
``cryptography``, names only 127.0.0.1, so the same DSN over ``localhost`` is refused.
A user created ``REQUIRE SUBJECT '/CN=drainer'`` logs in only with the drainer's
client certificate (mutual TLS to the downstream). test_mysql_tls.py covers the
explicit modes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge import mysql
from bridge.apps.diff.mysql_source import MySQLSource
from bridge.apps.diff.sources import DiffSourceError
from bridge.dsn import parse_dsn
from tests.support.certs import TestCA
from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import free_port

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("mysql-ca"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, ca: TestCA) -> Iterator[MariaDBInstance]:
    """A private MariaDB with a certificate for IP 127.0.0.1 only, trusting ``ca`` for clients,
    and a user ``drainer`` that must present a certificate with CN=drainer."""
    workdir = tmp_path_factory.mktemp("ssl-mariadb")
    cert = ca.issue("mariadb", dns=())
    instance = MariaDBInstance(
        workdir / "server",
        free_port(),
        server_args=(f"--ssl-cert={cert.cert}", f"--ssl-key={cert.key}", f"--ssl-ca={ca.path}"),
    )
    instance.start()
    try:
        conn = instance.connect()
        with conn.cursor() as cur:
            cur.execute("CREATE USER 'drainer'@'%' REQUIRE SUBJECT '/CN=drainer'")
            cur.execute("GRANT SELECT ON *.* TO 'drainer'@'%'")
        conn.close()
        yield instance
    finally:
        instance.stop()


def session_cipher(dsn_text: str) -> str:
    conn = mysql.connect(parse_dsn(dsn_text))
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            return str(cur.fetchone()[1])
    finally:
        conn.close()


def test_naming_a_ca_verifies_the_server_and_its_name(server: MariaDBInstance, ca: TestCA) -> None:
    dsn = f"{server.dsn}?ssl-ca={ca.path}"
    assert parse_dsn(dsn).ssl_mode == "verify-identity"
    assert session_cipher(dsn) != ""

    by_name = dsn.replace("127.0.0.1", "localhost")
    with pytest.raises(DiffSourceError, match="Hostname mismatch"):
        MySQLSource(parse_dsn(by_name))
    assert session_cipher(f"{by_name}&ssl-mode=verify-ca") != ""  # asking for less still works


def test_a_client_certificate_user(server: MariaDBInstance, ca: TestCA, tmp_path: Path) -> None:
    base = server.dsn.replace("root@", "drainer@")
    drainer, producer = ca.issue("drainer"), ca.issue("producer")
    assert session_cipher(f"{base}?ssl-ca={ca.path}&ssl-cert={drainer.cert}&ssl-key={drainer.key}") != ""
    for refused in (
        f"{base}?ssl-ca={ca.path}",  # TLS, but no client certificate
        f"{base}?ssl-ca={ca.path}&ssl-cert={producer.cert}&ssl-key={producer.key}",  # another role
    ):
        with pytest.raises(DiffSourceError, match="Access denied"):
            MySQLSource(parse_dsn(refused))
