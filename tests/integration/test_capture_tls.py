"""`binlog-bridge capture` over TLS: a binlog MariaDB with a certificate, a capture user that the
server admits over TLS only, and the capture's DSN checking the certificate (``verify-identity``);
the snapshot and the stream both arrive, so both connections spoke TLS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.capture_source import CaptureProcess, model_rows, replay, source_rows
from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import free_port
from tests.support.pump_server import PumpProcess, start_meta
from tests.support.tls import self_signed_cert

pytestmark = pytest.mark.mysql


@pytest.fixture
def tls_source(tmp_path: Path) -> Iterator[tuple[MariaDBInstance, Path]]:
    cert, key = self_signed_cert(tmp_path)
    server = MariaDBInstance(
        tmp_path / "source", free_port(), binlog=True, server_args=(f"--ssl-cert={cert}", f"--ssl-key={key}")
    )
    server.start()
    try:
        yield server, cert
    finally:
        server.stop()


def test_capture_reads_the_binlog_and_the_snapshot_over_verified_tls(
    tls_source: tuple[MariaDBInstance, Path], tmp_path: Path
) -> None:
    source, cert = tls_source
    conn = source.connect()
    with conn.cursor() as cursor:
        cursor.execute("CREATE USER capture@'127.0.0.1' IDENTIFIED BY 'pw' REQUIRE SSL")
        cursor.execute("GRANT ALL ON *.* TO capture@'127.0.0.1'")
        cursor.execute("CREATE DATABASE shop")
        cursor.execute("CREATE TABLE shop.t (id INT PRIMARY KEY, v VARCHAR(10))")
        cursor.execute("INSERT INTO shop.t VALUES (1, 'before')")
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr)
    upstream = f"mysql://capture:pw@127.0.0.1:{source.port}/?ssl-mode=verify-identity&ssl-ca={cert}"
    capture = CaptureProcess(tmp_path, source, meta_addr, ["shop"], upstream=upstream)
    try:
        pump.start()
        capture.start()
        with conn.cursor() as cursor:
            cursor.execute("INSERT INTO shop.t VALUES (2, 'after')")
            cursor.execute("UPDATE shop.t SET v = 'changed' WHERE id = 1")
        capture.wait_caught_up()
        model, _ = replay(meta_addr, [pump])
        assert model_rows(model, "shop", "t") == source_rows(source, "shop", "t")
        assert len(model_rows(model, "shop", "t")) == 2
        assert (
            capture.child is not None and ":pw@" not in capture.child.output
        )  # the password is never logged
        assert capture.stop() == 0
    finally:
        conn.close()
        capture.kill()
        pump.kill()
        meta.stop()
