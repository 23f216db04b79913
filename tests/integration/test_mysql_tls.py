"""TLS of the project's MySQL connections (``?ssl-mode=``), through its own connect paths.

The shared server (``BRIDGE_TEST_MYSQL_DSN``, default ``mysql://root@127.0.0.1:3306/``)
runs without TLS: ``disabled`` and the default ``preferred`` connect in plaintext,
``required`` must refuse it rather than fall back. A private MariaDB started here with a
self-signed certificate shows the modes that do encrypt, and the verifications failing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from bridge.apps.diff.mysql_source import MySQLSource
from bridge.apps.diff.sources import DiffSourceError
from bridge.dsn import Dsn, parse_dsn
from bridge.sink.errors import SinkApplyError
from drainer.sinks.mysql.connection import ConnectSettings, translate_error
from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import free_port
from tests.support.tls import self_signed_cert

pytestmark = [pytest.mark.mysql, pytest.mark.timeout(120)]

DSN_ENV = "BRIDGE_TEST_MYSQL_DSN"
DEFAULT_DSN = "mysql://root@127.0.0.1:3306/"


def with_query(dsn_text: str, query: str) -> Dsn:
    return parse_dsn(f"{dsn_text}?{query}" if query else dsn_text)


def sink_connect(dsn: Dsn) -> Any:
    """A connection as the MySQL sink (and its checkpoint's settings) opens one."""
    return ConnectSettings(dsn, 5.0, 10.0, 10.0, "", foreign_key_checks=True).connect(autocommit=True)


def cipher(conn: Any) -> str:
    """The session's TLS cipher; empty for a plaintext connection."""
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        return str(cur.fetchone()[1])


@pytest.fixture(scope="module")
def plaintext_server() -> str:
    text = os.environ.get(DSN_ENV, DEFAULT_DSN)
    conn = sink_connect(with_query(text, "ssl-mode=disabled"))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@have_ssl")
            if cur.fetchone()[0] == "YES":
                pytest.skip(f"{parse_dsn(text)} offers TLS; these tests need one that does not")
    finally:
        conn.close()
    return text


@pytest.mark.parametrize("query", ["ssl-mode=disabled", ""])
def test_disabled_and_preferred_connect_in_plaintext(plaintext_server: str, query: str) -> None:
    dsn = with_query(plaintext_server, query)
    conn = sink_connect(dsn)
    try:
        assert cipher(conn) == ""
    finally:
        conn.close()
    source = MySQLSource(dsn)
    source.close()


def test_required_refuses_a_server_without_tls(plaintext_server: str) -> None:
    dsn = with_query(plaintext_server, "ssl-mode=required")

    with pytest.raises(DiffSourceError, match="SSL is required but the server doesn't support it"):
        MySQLSource(dsn)

    with pytest.raises(pymysql.err.OperationalError) as caught:
        sink_connect(dsn)
    assert caught.value.args[0] == 2026  # CR_SSL_CONNECTION_ERROR, not a plaintext session
    error = translate_error(caught.value, str(dsn))
    assert isinstance(error, SinkApplyError) and not error.retriable
    assert "SSL is required" in str(error)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MariaDBInstance, Path]]:
    """A private MariaDB serving TLS with a self-signed certificate for 127.0.0.1: (server, its CA)."""
    workdir = tmp_path_factory.mktemp("tls-mariadb")
    cert, key = self_signed_cert(workdir)
    server = MariaDBInstance(
        workdir / "server", free_port(), server_args=(f"--ssl-cert={cert}", f"--ssl-key={key}")
    )
    server.start()
    try:
        yield server, cert
    finally:
        server.stop()


@pytest.mark.parametrize("query", ["", "ssl-mode=required", "ssl-mode=verify-ca", "ssl-mode=verify-identity"])
def test_the_tls_modes_encrypt(tls_server: tuple[MariaDBInstance, Path], query: str) -> None:
    server, ca = tls_server
    if "verify" in query:
        query += f"&ssl-ca={ca}"
    conn = sink_connect(with_query(server.dsn, query))
    try:
        assert cipher(conn) != ""  # a cipher name: the session is encrypted
    finally:
        conn.close()


def test_preferred_connections_share_one_context_and_still_encrypt(
    tls_server: tuple[MariaDBInstance, Path], plaintext_server: str
) -> None:
    """bridge.mysql builds preferred mode's context once (pymysql loads the CA store per connect)."""
    server, _ = tls_server
    first, second = sink_connect(parse_dsn(server.dsn)), sink_connect(parse_dsn(server.dsn))
    plain = sink_connect(parse_dsn(plaintext_server))
    try:
        assert cipher(first) != "" and cipher(second) != ""
        assert first.ctx is second.ctx is plain.ctx
        assert cipher(plain) == ""  # the same context falls back to plaintext where TLS is not offered
    finally:
        for conn in (first, second, plain):
            conn.close()


def test_verification_failures_do_not_connect(
    tls_server: tuple[MariaDBInstance, Path], tmp_path: Path
) -> None:
    server, ca = tls_server
    other_ca, _ = self_signed_cert(tmp_path, "other")
    with pytest.raises(DiffSourceError, match="certificate verify failed"):
        MySQLSource(with_query(server.dsn, f"ssl-mode=verify-ca&ssl-ca={other_ca}"))
    # The certificate names 127.0.0.1, not localhost: verify-ca passes, verify-identity does not.
    by_name = server.dsn.replace("127.0.0.1", "localhost")
    sink_connect(with_query(by_name, f"ssl-mode=verify-ca&ssl-ca={ca}")).close()
    with pytest.raises(DiffSourceError, match="Hostname mismatch"):
        MySQLSource(with_query(by_name, f"ssl-mode=verify-identity&ssl-ca={ca}"))
