"""scripts/services mariadb-binlog: a MariaDB of its own with the row binlog a capture reads (issue 17).

Each test uses a private state dir and a free port (BRIDGE_SERVICES_DIR,
BRIDGE_MYSQL_BINLOG_PORT), so the shared services are never touched. The
server the script starts must pass the capture's own start-up checks
(bridge/apps/capture/source.py), reached through the DSN that ``env`` exports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.apps.capture import source
from bridge.apps.capture.errors import UpstreamNotReady
from bridge.dsn import parse_mysql_dsn
from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "services"
CAPTURE_NEEDS = {
    "log_bin": "ON",
    "binlog_format": "ROW",
    "binlog_row_image": "FULL",
    "binlog_row_metadata": "FULL",
    "character_set_server": "utf8mb4",
}

pytestmark = [
    pytest.mark.mysql,
    pytest.mark.skipif(
        shutil.which("mariadb-admin") is None or shutil.which("mariadb") is None,
        reason="no MariaDB client: scripts/services up mariadb installs mariadb-server",
    ),
]


class Services:
    def __init__(self, state_dir: Path, port: int) -> None:
        self.port = port
        self.env = {
            **os.environ,
            "BRIDGE_SERVICES_DIR": str(state_dir),
            "BRIDGE_MYSQL_BINLOG_PORT": str(port),
        }
        self.pidfile = state_dir / "mariadb-binlog" / str(port) / "mariadbd.pid"

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), *args, "mariadb-binlog"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    svc = Services(tmp_path / "services", free_port())
    yield svc
    svc.run("down")


def server_variables(url: str) -> dict[str, str]:
    conn = source.connect(parse_mysql_dsn(url))
    try:
        names = ", ".join(f"'{name}'" for name in CAPTURE_NEEDS)
        rows = source.query(conn, f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        return {str(name): str(value) for name, value in rows}
    finally:
        source.close_quietly(conn)


def test_up_gives_a_capture_source_status_env_and_down(services: Services) -> None:
    assert services.run("status").returncode == 3

    first = services.run("up")
    assert first.returncode == 0, first.stderr
    where = f"127.0.0.1:{services.port}"
    assert first.stdout.startswith(f"mariadb-binlog: started on {where}")
    pid = int(services.pidfile.read_text())

    again = services.run("up")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"mariadb-binlog: up on {where} (pid {pid})"

    status = services.run("status")
    assert status.returncode == 0
    assert status.stdout.strip() == f"mariadb-binlog: up on {where} (pid {pid}, started by scripts/services)"

    env = services.run("env").stdout.strip()
    assert env == f"export BRIDGE_CAPTURE_SOURCE=mysql://root@{where}/"
    url = env.split("=", 1)[1]
    assert server_variables(url) == CAPTURE_NEEDS

    # binlog-bridge capture's start-up checks pass against it, through the exported DSN.
    conn = source.connect(parse_mysql_dsn(url))
    try:
        source.check_server(conn)
        flavor = source.flavor_of(conn)
        assert flavor == "mariadb"
        assert source.choose_mode(conn, flavor, "auto") == "gtid"
        assert source.current_position(conn, flavor, "gtid").file.startswith("mariadb-bin.")
    finally:
        source.close_quietly(conn)

    assert services.run("down").stdout.strip() == f"mariadb-binlog: stopped (pid {pid})"
    assert services.run("status").returncode == 3
    assert services.run("down").stdout.strip() == "mariadb-binlog: not running"


def test_a_server_without_the_binlog_on_its_port_is_refused_and_left_running(
    services: Services, tmp_path: Path
) -> None:
    other = MariaDBInstance(tmp_path / "other", services.port)  # no binlog
    other.start()
    try:
        conn = other.connect()
        try:
            with pytest.raises(UpstreamNotReady, match="log_bin = OFF"):
                source.check_server(conn)
        finally:
            conn.close()

        up = services.run("up")
        assert up.returncode != 0
        assert "not started by scripts/services" in up.stderr
        assert "log_bin=OFF" in up.stderr and "BRIDGE_MYSQL_BINLOG_PORT" in up.stderr
        status = services.run("status")
        assert status.returncode == 3
        assert "not a capture source: log_bin=OFF" in status.stdout
        assert "left running" in services.run("down").stdout
        assert other.answers()
    finally:
        other.stop()
