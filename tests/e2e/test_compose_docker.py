"""docker-compose.yml for real: its images built, its containers run by a Docker engine.

The module starts the private engine of ``scripts/services up docker`` (and stops it again with
``down`` when it was not running before), builds every image offline (``scripts/offline-images``,
then ``deploy/compose/local-images.yml``: the project's Dockerfile on a local Debian base with
pip from wheelhouse/ only, stand-ins from Debian's packages for MariaDB, MySQL, Redis, etcd and
Prometheus, the Tansu broker for Kafka) and runs the default profile with exactly the commands
docs/docker.md gives. Left out (no stand-in here): the Schema Registry, so the Kafka drainer
uses single-object Avro encoding, and Grafana; the spark and tidb profiles (CI budget, no image).

The checks are the compose file's own: ``verify`` (``binlog-bridge diff`` upstream against
downstream) reports equal after the workload, and again after a second workload during which a
pump's process is SIGKILLed inside its container (``restart: on-failure`` brings it back) and the
MySQL drainer's container is ``docker kill``ed (``docker start`` brings it back: the engine does
not restart a container killed by hand); Prometheus reports every target of the default profile
up. ``docker compose down -v`` ends the module.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.process import free_port

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "scripts" / "services"
OVERRIDE = "deploy/compose/local-images.yml"
# One service per image: compose would build the project image once per service using it.
IMAGE_SERVICES = ["meta", "upstream", "redis", "etcd", "prometheus", "kafka"]
# Prometheus targets outside the default profile (deploy/prometheus.yml labels them).
OTHER_PROFILES = {"spark", "tidb"}
WAIT_SECONDS = 300  # a hang guard for each wait below, not a measured bound

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)]


def run(argv: list[str], env: dict[str, str], timeout: float = 900) -> str:
    done = subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, (
        f"{' '.join(argv)}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@dataclass
class Stack:
    """One compose project on the private engine."""

    project: str
    env: dict[str, str]
    prometheus: str

    def compose(self, *args: str, timeout: float = 900) -> str:
        base = ["docker", "compose", "-p", self.project, "-f", "docker-compose.yml", "-f", OVERRIDE]
        return run([*base, *args], self.env, timeout)

    def docker(self, *args: str) -> str:
        return run(["docker", *args], self.env).strip()

    def container(self, service: str) -> str:
        ids = self.compose("ps", "-a", "-q", service).split()
        assert len(ids) == 1, f"{service}: containers {ids}"
        return ids[0]

    def state(self, service: str) -> dict[str, object]:
        found = json.loads(self.docker("inspect", self.container(service)))[0]
        state: dict[str, object] = found["State"]
        state["RestartCount"] = found["RestartCount"]
        return state

    def logs(self, service: str, since: str | None = None) -> str:
        argv = ["logs", *(["--since", since] if since else []), self.container(service)]
        done = subprocess.run(["docker", *argv], env=self.env, capture_output=True, text=True, check=False)
        return done.stdout + done.stderr

    def diagnosis(self) -> str:
        listing = self.compose("ps", "-a", "--format", "{{.Service}}\t{{.Status}}")
        return f"\n{listing}"

    def wait_exit(self, service: str) -> tuple[int, str]:
        """Wait for a one-shot service's container to exit: its exit code and its last run's log."""
        code = int(self.docker("wait", self.container(service)))
        return code, self.logs(service, since=str(self.state(service)["StartedAt"]))

    def wait_healthy(self, service: str, restarted_at_least: int = 0) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        state = self.state(service)
        while time.monotonic() < deadline:
            health = state.get("Health")
            if (
                state["Running"]
                and isinstance(health, dict)
                and health.get("Status") == "healthy"
                and int(str(state["RestartCount"])) >= restarted_at_least
            ):
                return
            time.sleep(1)
            state = self.state(service)
        raise AssertionError(
            f"{service} is not healthy: {state}{self.diagnosis()}\n{self.logs(service)[-3000:]}"
        )

    def verify_equal(self, rerun: bool) -> None:
        """Wait for the file's `verify` service (started again when ``rerun``) and require it
        to exit 0 with binlog-bridge diff's summary line saying every table is equal."""
        container = self.container("verify")
        if rerun:
            self.docker("start", container)
        since = str(self.state("verify")["StartedAt"])
        code = int(self.docker("wait", container))
        log = self.logs("verify", since=since)
        assert code == 0, f"verify exited {code}:\n{log[-4000:]}{self.diagnosis()}"
        assert re.search(r"^diff .*: equal \(\d+ tables", log, re.MULTILINE), log[-4000:]

    def targets(self) -> dict[str, str]:
        """Prometheus's default-profile targets: instance -> health."""
        with urllib.request.urlopen(f"{self.prometheus}/api/v1/targets", timeout=10) as reply:
            active = json.load(reply)["data"]["activeTargets"]
        return {
            t["labels"]["instance"]: t["health"]
            for t in active
            if t["labels"].get("profile") not in OTHER_PROFILES and t["labels"]["job"] not in OTHER_PROFILES
        }

    def wait_targets_up(self) -> dict[str, str]:
        deadline = time.monotonic() + WAIT_SECONDS
        targets = self.targets()
        while time.monotonic() < deadline and set(targets.values()) != {"up"}:
            time.sleep(2)
            targets = self.targets()
        return targets


def engine_env() -> dict[str, str]:
    """os.environ plus what `scripts/services env docker` exports (DOCKER_HOST, ...)."""
    env = dict(os.environ)
    for line in run([str(SERVICES), "env", "docker"], env).splitlines():
        key, _, value = line.removeprefix("export ").partition("=")
        env[key] = value
    return env


@pytest.fixture(scope="module")
def engine() -> Iterator[dict[str, str]]:
    """The private engine: started here unless it runs, and then stopped here (by its pid)."""
    was_running = subprocess.run([str(SERVICES), "status", "docker"], capture_output=True).returncode == 0
    run([str(SERVICES), "up", "docker"], dict(os.environ))
    try:
        yield engine_env()
    finally:
        if not was_running:
            run([str(SERVICES), "down", "docker"], dict(os.environ))


@pytest.fixture(scope="module")
def stack(engine: dict[str, str]) -> Iterator[Stack]:
    """The default profile built offline and up (`up -d --wait`); `down -v` at the end."""
    env = {
        **engine,
        "BRIDGE_MYSQL_PASSWORD": secrets.token_hex(12),
        "BRIDGE_REDIS_PASSWORD": secrets.token_hex(12),
        "BRIDGE_GRAFANA_PASSWORD": secrets.token_hex(12),
        "BRIDGE_CLUSTER_TOKEN": secrets.token_hex(32),
        "BRIDGE_SCHEMA_REGISTRY_URL": "",  # no registry stand-in: single-object encoding
        "BRIDGE_LOAD_SECONDS": "20",
        "BRIDGE_LOAD_RATE": "50",
    }
    port = free_port()
    env["BRIDGE_COMPOSE_PROMETHEUS_PORT"] = str(port)
    stack = Stack(f"bridge-e2e-{secrets.token_hex(4)}", env, f"http://127.0.0.1:{port}")
    run([str(ROOT / "scripts" / "offline-images")], env)
    stack.compose("build", *IMAGE_SERVICES)
    try:
        stack.compose("up", "-d", "--wait")
        yield stack
    finally:
        stack.compose("down", "-v", "--remove-orphans", timeout=300)


def test_the_default_profile_replicates_and_prometheus_sees_every_target(stack: Stack) -> None:
    code, log = stack.wait_exit("workload")
    assert code == 0, f"workload exited {code}:\n{log[-4000:]}{stack.diagnosis()}"
    targets = stack.wait_targets_up()
    assert targets and set(targets.values()) == {"up"}, targets
    assert {"meta:8247", "pump-1:8251", "drainer-mysql:8252", "drainer-kafka:8252"} <= set(targets)
    stack.verify_equal(rerun=False)


def test_a_killed_pump_and_drainer_come_back_and_verify_reports_equal(stack: Stack) -> None:
    stack.wait_exit("workload")  # the first test's run, when this one runs alone
    stack.docker("start", stack.container("workload"))
    started = str(stack.state("workload")["StartedAt"])
    deadline = time.monotonic() + WAIT_SECONDS
    while "txn/s" not in stack.logs("workload", since=started) and time.monotonic() < deadline:
        time.sleep(0.5)  # the second workload writes: now the faults
    assert "txn/s" in stack.logs("workload", since=started), stack.logs("workload")[-3000:]

    # pump-2: its process dies by SIGKILL inside the container; the restart policy restarts it.
    pump = stack.state("pump-2")
    top = stack.docker("top", stack.container("pump-2"), "-o", "pid,args")
    pids = [
        line.split()[0]
        for line in top.splitlines()[1:]
        if "binlog-bridge pump" in line and "docker-init" not in line
    ]
    assert len(pids) == 1, top
    os.kill(int(pids[0]), 9)
    # drainer-mysql: the whole container SIGKILLed by hand; `docker start` brings it back.
    stack.docker("kill", "--signal", "KILL", stack.container("drainer-mysql"))
    assert stack.state("drainer-mysql")["ExitCode"] == 137
    stack.docker("start", stack.container("drainer-mysql"))

    stack.wait_healthy("pump-2", restarted_at_least=int(str(pump["RestartCount"])) + 1)
    stack.wait_healthy("drainer-mysql")
    code, log = stack.wait_exit("workload")
    assert code == 0, f"workload exited {code}:\n{log[-4000:]}{stack.diagnosis()}"
    targets = stack.wait_targets_up()
    assert set(targets.values()) == {"up"}, targets
    stack.verify_equal(rerun=True)
