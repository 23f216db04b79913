"""Run docker-compose.yml's topology as local processes, in depends_on order, ending with verify.

Project services (those the file builds from the Dockerfile) run their own
``command`` with their own mounted configs, rewritten by
:mod:`composelocal.remap`; their healthchecks are run the same way to know
when they are up, and a one-shot service (``restart: "no"``) must exit 0
before what depends on it starts. Third-party images with a local stand-in
(MariaDB for mariadb/mysql, the Tansu broker for apache/kafka, Redis, etcd)
are started by :mod:`composelocal.infra`, Prometheus by
:mod:`composelocal.observe`; the others (Schema Registry, Grafana, TiDB)
cannot run here and are skipped, and the
interpolation environment (:data:`LOCAL_ENV`) makes the file do without them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from composelocal.compose import ComposeFile, Service, start_order
from composelocal.infra import LocalServices
from composelocal.observe import LocalPrometheus, prometheus_binary, report
from composelocal.remap import PortMap, Rewriter

# What the file reads from the environment, as a local run sets it: the local servers have no
# passwords, and with no Schema Registry the Kafka drainer uses single-object encoding.
LOCAL_ENV = {
    "BRIDGE_MYSQL_PASSWORD": "",
    "BRIDGE_REDIS_PASSWORD": "",
    "BRIDGE_GRAFANA_PASSWORD": "",
    "BRIDGE_SCHEMA_REGISTRY_URL": "",
    "BRIDGE_CLUSTER_TOKEN": secrets.token_urlsafe(32),  # one per run, never printed
}
# The container port each local stand-in serves.
KIND_PORT = {"mariadb": 3306, "kafka": 9092, "redis": 6379, "etcd": 2379}
HEALTH_POLL = 0.5


@dataclass
class Running:
    """A started project service: ``state`` is starting, healthy or exited (``status`` set)."""

    service: Service
    process: subprocess.Popen[bytes]
    log: Path
    health: list[str] | None
    env: dict[str, str]
    started: float = field(default_factory=time.monotonic)
    state: str = "starting"
    status: int | None = None


@dataclass
class LocalRun:
    compose: ComposeFile
    run_dir: Path
    timeout: float = 240.0
    say: Callable[[str], None] = lambda line: print(f"compose-local: {line}", file=sys.stderr, flush=True)
    ports: PortMap = field(default_factory=PortMap)
    running: dict[str, Running] = field(default_factory=dict)
    prometheus: LocalPrometheus | None = None

    def local_services(self) -> list[str]:
        """The services this run starts, in start order."""
        order = start_order(self.compose)
        return [
            n for n in order if self.compose.services[n].is_project or self.compose.services[n].local_kind
        ]

    def skipped(self) -> list[str]:
        return [n for n in self.compose.services if n not in self.local_services()]

    def execute(self, infra: LocalServices) -> int:
        """Start the local servers, then every project service once what it depends on is
        healthy (or has completed), as Compose does; return verify's exit status."""
        names = self.local_services()
        if not names or names[-1] != "verify":
            raise RuntimeError(f"the last service to start must be verify, not {names[-1:]}")
        self.say(f"not run here: {', '.join(self.skipped()) or 'nothing'}")
        self.ports.services = frozenset(names)
        for name in names:
            service = self.compose.services[name]
            if service.local_kind == "prometheus":
                self.ports.assign(name, service.expose)
            elif service.local_kind:
                port = infra.start(service.local_kind)
                self.ports.ports[(name, KIND_PORT[service.local_kind])] = port
                self.say(f"{name}: local {service.local_kind} on 127.0.0.1:{port}")
            else:
                self.ports.assign(name, service.expose)
        if "prometheus" in names:
            self.prometheus = self._start_prometheus(self.compose.services["prometheus"])
        pending = [n for n in names if self.compose.services[n].is_project]
        while "verify" not in self.running or self.running["verify"].status is None:
            for name in [n for n in pending if self._ready(self.compose.services[n])]:
                pending.remove(name)
                self.running[name] = self._start(self.compose.services[name])
            for running in self.running.values():
                self._poll(running)
            time.sleep(HEALTH_POLL)
        sys.stdout.write(self.running["verify"].log.read_text())
        return int(self.running["verify"].status or 0)

    def _start_prometheus(self, service: Service) -> LocalPrometheus | None:
        binary = prometheus_binary(self.say)
        if binary is None:
            self.say("prometheus: not installed (Debian package prometheus); not run here")
            return None
        port = self.ports.local(service.name, 9090)
        log = self.run_dir / "logs" / f"{service.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        prometheus = LocalPrometheus(binary, self.rewriter(service), port or 0, log)
        self.say(f"prometheus: {binary} on {prometheus.url}")
        return prometheus

    def report(self) -> dict[str, Any]:
        """What ``--scrape`` writes: :func:`composelocal.observe.report`, and which service each
        local address stands for."""
        result = report(self.compose, self.ports, self.prometheus)
        result["instances"] = {f"127.0.0.1:{p}": f"{n}:{c}" for (n, c), p in self.ports.ports.items()}
        return result

    def _ready(self, service: Service) -> bool:
        """Whether every dependency of ``service`` that runs here meets its condition."""
        for dep, options in service.depends_on.items():
            running = self.running.get(dep)
            if not self.compose.services.get(dep) or not self.compose.services[dep].is_project:
                continue  # a local server (started first) or a service that cannot run here
            if running is None:
                return False
            wanted = options.get("condition", "service_started")
            if wanted == "service_healthy" and running.state != "healthy":
                return False
            if wanted == "service_completed_successfully" and running.status != 0:
                return False
        return True

    def _start(self, service: Service) -> Running:
        rewriter = self.rewriter(service)
        argv = rewriter.argv(service.command)
        env = self.environment(service, rewriter)
        work = self.run_dir / "work" / service.name
        work.mkdir(parents=True, exist_ok=True)
        log = self.run_dir / "logs" / f"{service.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            out.write(f"$ {' '.join(argv)}\n".encode())
            out.flush()
            process = subprocess.Popen(
                argv, cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        health = (
            None if service.one_shot or service.healthcheck is None else rewriter.argv(service.healthcheck)
        )
        return Running(service, process, log, health, env)

    def _poll(self, running: Running) -> None:
        """Move ``running`` on: healthy when its healthcheck passes, exited when it ends."""
        name, elapsed = running.service.name, time.monotonic() - running.started
        if running.state == "exited":
            return
        status = running.process.poll()
        if status is not None:
            running.state, running.status = "exited", status
            self.say(f"{name}: exited {status} after {elapsed:.1f}s (log {running.log})")
            if not running.service.one_shot or (status != 0 and name != "verify"):
                raise RuntimeError(f"{name} exited with status {status}:\n{_tail(running.log)}")
            return
        if running.state == "starting" and elapsed > self.timeout:  # not yet healthy, or a one-shot
            raise RuntimeError(f"{name}: not done after {self.timeout:.0f}s:\n{_tail(running.log)}")
        if running.state == "starting" and not running.service.one_shot and _passes(running):
            running.state = "healthy"
            elapsed = time.monotonic() - running.started
            self.say(f"{name}: healthy after {elapsed:.1f}s (pid {running.process.pid})")

    def rewriter(self, service: Service) -> Rewriter:
        """The rewriter for ``service``, its mounts materialised under the run folder."""
        paths: dict[str, str] = {}
        files: list[tuple[Path, str]] = []
        for mount in service.mounts:
            if mount.kind == "volume":
                local = self.run_dir / "volumes" / mount.source
                local.mkdir(parents=True, exist_ok=True)
            elif mount.kind == "bind" and (self.compose.root / mount.source).is_dir():
                local = (self.compose.root / mount.source).resolve()
            else:
                local = self.run_dir / "config" / service.name / Path(mount.target).name
                files.append((local, self._mount_text(mount.kind, mount.source)))
            paths[mount.target] = str(local)
        rewriter = Rewriter(service.name, self.ports, paths)
        for local, text in files:
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(rewriter.text(text))
        return rewriter

    def _mount_text(self, kind: str, source: str) -> str:
        if kind == "config":
            content = self.compose.config_content(source)
            if content is not None:
                return content
            path = self.compose.config_file(source)
            if path is None:
                raise RuntimeError(f"config {source}: neither content nor file")
            return path.read_text()
        return (self.compose.root / source).read_text()

    def environment(self, service: Service, rewriter: Rewriter) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("BRIDGE_")}
        venv_bin = str(Path(sys.executable).parent)
        base["PATH"] = f"{venv_bin}{os.pathsep}{base.get('PATH', '')}"
        # What the spark image sets in its Dockerfile, and what Spark needs on one machine.
        base.update(PYTHONUNBUFFERED="1", PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
        return {**base, **rewriter.environment(service.environment)}

    def stop(self) -> None:
        """SIGTERM every long-running process, newest first; SIGKILL what is left after 20 s."""
        for running in reversed(self.running.values()):
            _stop(running.process, 20)
        if self.prometheus is not None:
            self.prometheus.stop()


def _stop(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the service's own process (as ``docker compose stop`` sends its init), then
    SIGKILL to its whole process group (the JVMs a Spark process started) after ``grace``."""
    if process.poll() is None:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _passes(running: Running) -> bool:
    """The service's healthcheck, as Docker runs it: passing means exit status 0 within 30 s."""
    if running.health is None:
        return True
    try:
        done = subprocess.run(running.health, env=running.env, capture_output=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
