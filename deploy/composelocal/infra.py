"""The local servers standing in for the compose file's third-party images.

Each is started by ``scripts/services`` on a fresh port with its own state
folder inside the run's folder, so a compose-local run never touches the
services the test suite uses and ``scripts/services down`` stops exactly what
the run started.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

from bridge.apps.demo.cluster import free_port

# kind -> (scripts/services name, the environment variable naming its port)
SERVICES = {
    "mariadb": ("mariadb", "BRIDGE_MYSQL_PORT"),
    "kafka": ("kafka", "BRIDGE_KAFKA_PORT"),
    "etcd": ("etcd", "BRIDGE_ETCD_PORT"),
    "redis": ("redis", "BRIDGE_REDIS_PORT"),
}


class LocalServices:
    """Starts and stops the local servers of one run."""

    def __init__(self, root: Path, state_dir: Path, log: Callable[[str], None]) -> None:
        self.script = root / "scripts" / "services"
        self.state_dir = state_dir
        self.log = log
        self.started: list[tuple[str, dict[str, str]]] = []

    def start(self, kind: str) -> int:
        """Start a server of ``kind`` on a fresh port and return the port once it answers."""
        name, port_var = SERVICES[kind]
        port = free_port()
        env = {**os.environ, "BRIDGE_SERVICES_DIR": str(self.state_dir), port_var: str(port)}
        if kind == "etcd":
            env["BRIDGE_ETCD_PEER_PORT"] = str(free_port())
        self._services("up", name, env)
        self.started.append((name, env))
        return port

    def stop(self) -> None:
        for name, env in reversed(self.started):
            self._services("down", name, env, check=False)

    def _services(self, action: str, name: str, env: dict[str, str], check: bool = True) -> None:
        self.log(f"scripts/services {action} {name}")
        done = subprocess.run(
            [str(self.script), action, name], env=env, capture_output=True, text=True, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"scripts/services {action} {name} failed:\n{done.stdout}{done.stderr}")
