"""Watching a local run: the compose file's Prometheus, its targets and the dashboard's queries.

The ``prom/prometheus`` service runs here as Debian's ``prometheus`` (installed with apt-get
when missing, as scripts/services installs its servers) with the service's own mounted config,
rewritten like every other (targets at their local ports). :func:`report` is what
``scripts/compose-local --scrape`` writes: every target's ``/metrics`` text read directly,
Prometheus's view of its targets, and the result of every query of the dashboards the Grafana
service mounts, evaluated by that Prometheus.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from composelocal.compose import ComposeFile
from composelocal.remap import HOST_PORT, PortMap, Rewriter

CONFIG = "/etc/prometheus/prometheus.yml"  # where the image reads its config
STORAGE = "/prometheus"  # and keeps its data


def prometheus_binary(say: Callable[[str], None]) -> str | None:
    """Debian's prometheus, installed when missing and this process may (root with apt-get);
    ``say`` tells the user before the system package is installed, and how it went."""
    if shutil.which("prometheus") is None and shutil.which("apt-get") and os.geteuid() == 0:
        say("prometheus: not installed; installing Debian's package with apt-get (system-wide, as root)")
        done = subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=120",
             "prometheus"],
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, capture_output=True, check=False,
        )  # fmt: skip
        say(f"prometheus: apt-get install exited {done.returncode}")
    return shutil.which("prometheus")


class LocalPrometheus:
    """A Prometheus process for the compose service ``name``, rewritten by ``rewriter``."""

    def __init__(self, binary: str, rewriter: Rewriter, port: int, log: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        argv = [
            binary,
            f"--config.file={rewriter.paths[CONFIG]}",
            f"--storage.tsdb.path={rewriter.paths[STORAGE]}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._wait(lambda: self._get("/-/ready") is not None, 60, "ready")

    def _get(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(self.url + path, timeout=10) as reply:  # noqa: S310 - http to our Prometheus
                body = reply.read().decode()
        except OSError:
            return None
        return json.loads(body) if body.startswith("{") else body

    def _wait(self, done: Any, seconds: float, what: str) -> None:
        deadline = time.monotonic() + seconds
        while not done():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus: not {what} after {seconds:.0f}s")
            time.sleep(0.5)

    def targets(self) -> list[dict[str, Any]]:
        reply = self._get("/api/v1/targets?state=active")
        return list(reply["data"]["activeTargets"]) if reply else []

    def wait_up(self, instances: set[str], seconds: float = 60) -> None:
        """Until every target in ``instances`` (local host:port) was scraped successfully."""

        def all_up() -> bool:
            up = {t["labels"]["instance"] for t in self.targets() if t["health"] == "up"}
            return instances <= up

        self._wait(all_up, seconds, f"scraping {sorted(instances)}")

    def query(self, expr: str) -> dict[str, Any]:
        reply = self._get("/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        return reply if isinstance(reply, dict) else {"status": "error", "error": "no answer"}

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def scrape_directly(config_path: Path, ports: PortMap) -> dict[str, dict[str, str]]:
    """``{job: {target: /metrics text}}`` for every target of the config that runs here."""
    config = yaml.safe_load(config_path.read_text())
    scraped: dict[str, dict[str, str]] = {}
    for job in config.get("scrape_configs", []):
        path = job.get("metrics_path", "/metrics")
        for group in job.get("static_configs", []):
            for target in group.get("targets", []):
                match = HOST_PORT.fullmatch(target)
                port = match and ports.local(match.group(1), int(match.group(2)))
                if port:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
                        scraped.setdefault(job["job_name"], {})[target] = reply.read().decode()
    return scraped


def dashboard_queries(compose: ComposeFile) -> list[str]:
    """Every ``expr`` of the dashboards (JSON files) the grafana service mounts."""
    grafana = compose.services.get("grafana")
    exprs = []
    for mount in grafana.mounts if grafana else []:
        folder = compose.root / mount.source
        if mount.kind == "bind" and folder.is_dir():
            for dashboard in sorted(folder.rglob("*.json")):
                panels = json.loads(dashboard.read_text()).get("panels", [])
                exprs += [t["expr"] for p in panels for t in p.get("targets", []) if "expr" in t]
    return exprs


def report(compose: ComposeFile, ports: PortMap, prometheus: LocalPrometheus | None) -> dict[str, Any]:
    """The ``--scrape`` report (see the module's docstring)."""
    service = compose.services["prometheus"]
    config = next(compose.root / m.source for m in service.mounts if m.target == CONFIG)
    result: dict[str, Any] = {"metrics": scrape_directly(config, ports)}
    if prometheus is not None:
        local = {f"127.0.0.1:{port}" for (name, _), port in ports.ports.items() if name != "prometheus"}
        scraped_here = {
            t["labels"]["instance"] for t in prometheus.targets() if t["labels"]["instance"] in local
        }
        prometheus.wait_up(scraped_here)
        result["targets"] = prometheus.targets()
        result["queries"] = {expr: prometheus.query(expr) for expr in dashboard_queries(compose)}
    return result
