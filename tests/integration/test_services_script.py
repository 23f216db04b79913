"""scripts/services: idempotent start, stale pid files, and leaving others' servers alone.

Each test runs its own etcd on free ports with its own state dir, so the etcd
the rest of the suite uses is never touched.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.process import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "services"

pytestmark = [
    pytest.mark.etcd,
    pytest.mark.skipif(shutil.which("etcd") is None, reason="no etcd: run scripts/services up"),
]


class Services:
    def __init__(self, state_dir: Path, port: int, peer_port: int) -> None:
        self.state_dir = state_dir
        self.env = {
            **os.environ,
            "BRIDGE_SERVICES_DIR": str(state_dir),
            "BRIDGE_ETCD_PORT": str(port),
            "BRIDGE_ETCD_PEER_PORT": str(peer_port),
        }
        self.url = f"http://127.0.0.1:{port}"

    def run(self, *args: str, state_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if state_dir is not None:
            env["BRIDGE_SERVICES_DIR"] = str(state_dir)
        return subprocess.run(
            [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    @property
    def pid(self) -> int:
        return int(next(self.state_dir.glob("etcd/*/etcd.pid")).read_text())


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    svc = Services(tmp_path / "services", free_port(), free_port())
    yield svc
    svc.run("down")


def test_up_is_idempotent_and_down_stops_it(services: Services) -> None:
    assert services.run("status", "etcd").returncode == 3

    first = services.run("up", "etcd")
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"etcd: started on {services.url}")
    pid = services.pid

    again = services.run("up", "etcd")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"etcd: up on {services.url} (pid {pid})"
    assert services.pid == pid

    status = services.run("status", "etcd")
    assert status.returncode == 0
    assert "started by scripts/services" in status.stdout
    assert services.run("env", "etcd").stdout.strip() == f"export BRIDGE_TEST_ETCD_URL={services.url}"

    assert services.run("down", "etcd").stdout.strip() == f"etcd: stopped (pid {pid})"
    assert services.run("down", "etcd").stdout.strip() == "etcd: not running"
    assert services.run("status", "etcd").returncode == 3


def test_up_replaces_a_stale_pid_file_after_a_crash(services: Services) -> None:
    assert services.run("up", "etcd").returncode == 0
    crashed = services.pid
    os.kill(crashed, signal.SIGKILL)
    subprocess.run(["sh", "-c", f"while kill -0 {crashed} 2>/dev/null; do sleep 0.05; done"], timeout=10)

    restarted = services.run("up", "etcd")
    assert restarted.returncode == 0, restarted.stderr
    assert "etcd: started" in restarted.stdout
    assert services.pid != crashed


def test_a_healthy_etcd_started_elsewhere_counts_as_up_and_is_left_running(
    services: Services, tmp_path: Path
) -> None:
    assert services.run("up", "etcd").returncode == 0
    other_dir = tmp_path / "other"

    up = services.run("up", "etcd", state_dir=other_dir)
    assert up.stdout.strip() == f"etcd: up on {services.url} (not started by scripts/services)"
    down = services.run("down", "etcd", state_dir=other_dir)
    assert "left running" in down.stdout
    assert services.run("status", "etcd").returncode == 0


def test_a_failed_start_shows_the_log(services: Services) -> None:
    # Hold the client port (bound, not listening: the health probe is refused at once).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", int(services.env["BRIDGE_ETCD_PORT"])))
        result = services.run("up", "etcd")
    assert result.returncode != 0
    assert "etcd: exited during start" in result.stderr
    assert "address already in use" in result.stderr


@pytest.mark.kafka
def test_kafka_broker_up_status_env_down(tmp_path: Path) -> None:
    port = free_port()
    services = Services(tmp_path / "services", free_port(), free_port())
    services.env["BRIDGE_KAFKA_PORT"] = str(port)
    try:
        assert services.run("status", "kafka").returncode == 3
        first = services.run("up", "kafka")
        assert first.returncode == 0, first.stderr
        assert first.stdout.startswith(f"kafka: started on 127.0.0.1:{port}")
        again = services.run("up", "kafka")
        assert "kafka: up on" in again.stdout and "started" not in again.stdout.split("(")[0]
        assert (
            services.run("env", "kafka").stdout.strip()
            == f"export BRIDGE_TEST_KAFKA_BOOTSTRAP=127.0.0.1:{port}"
        )
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
        assert services.run("down", "kafka").stdout.startswith("kafka: stopped (pid ")
        assert services.run("status", "kafka").returncode == 3
    finally:
        services.run("down", "kafka")
