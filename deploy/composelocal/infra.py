"""The local servers standing in for the compose file's third-party images.

Each is started by ``scripts/services`` on a fresh port with its own state
folder inside the run's folder, so a compose-local run never touches the
services the test suite uses and ``scripts/services down`` stops exactly what
the run started. Redis comes from ``scripts/services`` when it knows Redis,
else a ``redis-server`` child of this process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from composelocal.remap import LOCAL_HOST, free_port

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
        self.children: list[subprocess.Popen[bytes]] = []

    def start(self, kind: str) -> int:
        """Start a server of ``kind`` on a fresh port and return the port once it answers."""
        name, port_var = SERVICES[kind]
        port = free_port()
        env = {**os.environ, "BRIDGE_SERVICES_DIR": str(self.state_dir), port_var: str(port)}
        if kind == "etcd":
            env["BRIDGE_ETCD_PEER_PORT"] = str(free_port())
        if kind == "redis" and not self._knows(name):
            self._start_redis(port)
            return port
        self._services("up", name, env)
        self.started.append((name, env))
        return port

    def stop(self) -> None:
        for name, env in reversed(self.started):
            self._services("down", name, env, check=False)
        for child in self.children:
            child.terminate()
            child.wait(timeout=10)

    def _knows(self, name: str) -> bool:
        usage = subprocess.run([str(self.script), "help"], capture_output=True, text=True, check=False)
        return any(
            line.startswith("Services:") and name in line.split() for line in usage.stdout.splitlines()
        )

    def _services(self, action: str, name: str, env: dict[str, str], check: bool = True) -> None:
        self.log(f"scripts/services {action} {name}")
        done = subprocess.run(
            [str(self.script), action, name], env=env, capture_output=True, text=True, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"scripts/services {action} {name} failed:\n{done.stdout}{done.stderr}")

    def _start_redis(self, port: int) -> None:
        server = shutil.which("redis-server")
        if server is None:
            raise RuntimeError("redis: redis-server is not installed (Debian package redis-server)")
        folder = self.state_dir / "redis" / str(port)
        folder.mkdir(parents=True, exist_ok=True)
        argv = [
            server,
            "--bind",
            LOCAL_HOST,
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(folder),
        ]
        self.log(f"redis-server on {LOCAL_HOST}:{port}")
        with (folder / "redis.log").open("ab") as out:
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.children.append(child)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            ping = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, check=False)
            if ping.stdout.strip() == b"PONG":
                return
            if child.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"redis: no answer on {LOCAL_HOST}:{port} (log {folder / 'redis.log'})")
