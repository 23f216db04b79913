"""docker-compose.yml's topology runs here: scripts/compose-local, then its live metrics.

One run of ``scripts/compose-local --profile spark`` (every project service's own command and
configs as local processes against local MariaDB x2, the Tansu broker, Redis and etcd, the Spark
master, worker and index job included) must end with the file's own ``verify`` reporting the
downstream equal to the upstream, the search index holding one document per upstream row of
every table, and a search finding documents. Before it stops, the
run reads every target of deploy/prometheus.yml directly and asks the compose file's Prometheus
(run here as Debian's prometheus with the file's config) about its targets and every query of the
Grafana dashboard: every target of a service running here is up, every query is valid and finds
series where the live processes export samples, and every metric the queries select is among
what those processes exported, with the labels the queries use.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "binlog-bridge.json"
PROMETHEUS = ROOT / "deploy" / "prometheus.yml"
RUN_TIMEOUT = 420  # seconds; a run takes about two and a half minutes on a shared 2-core machine

pytestmark = [pytest.mark.slow, pytest.mark.mysql, pytest.mark.kafka, pytest.mark.redis, pytest.mark.etcd,
              pytest.mark.spark]  # fmt: skip

SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+\S+")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
SELECTOR = re.compile(r"\b((?:bridge|metrics)_\w+)\s*(\{[^}]*\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!=|!~|=)\s*"([^"]*)"')
BY = re.compile(r"\bby\s*\(([^)]*)\)")
PROMETHEUS_LABELS = {"instance", "job", "le"}  # added by Prometheus, or the histogram's own


class Exported:
    """Sample names and label sets of /metrics texts, and the names only declared (# HELP)."""

    def __init__(self, texts: list[str]) -> None:
        self.samples: dict[str, list[dict[str, str]]] = {}
        self.declared: set[str] = set()
        for text in texts:
            for line in text.splitlines():
                if line.startswith("# HELP "):
                    self.declared.add(line.split()[2])
                elif (found := SAMPLE.match(line)) is not None:
                    labels = dict(LABEL.findall(found.group(2) or ""))
                    self.samples.setdefault(found.group(1), []).append(labels)


@pytest.fixture(scope="module")
def local_run(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    run_dir = tmp_path_factory.mktemp("compose-local")
    scrape = run_dir / "scrape.json"
    done = subprocess.run(
        [str(ROOT / "scripts" / "compose-local"), "--profile", "spark", "--seconds", "6", "--rate", "60",
         "--run-dir", str(run_dir / "run"), "--scrape", str(scrape)],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    yield done, scrape


def test_the_compose_topology_runs_here_and_verify_reports_equal(
    local_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    done, _ = local_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = [line for line in done.stdout.splitlines() if line.startswith("diff mysql://")]
    equal = (
        re.search(r": equal \((\d+) tables, (\d+) upstream rows", summary[0]) if len(summary) == 1 else None
    )
    assert equal is not None, done.stdout
    for service in ("meta", "pump-3", "drainer-mysql", "drainer-kafka", "drainer-redis", "spark-index"):
        assert f"compose-local: {service}: healthy" in done.stderr
    assert "not run here: schema-registry, grafana" in done.stderr
    tables, rows = equal.groups()
    assert f"verify-index: the index holds every upstream row: {rows} in {tables} tables" in done.stdout
    hits = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"score"')]
    assert hits and all(hit["table"] == "shop.load_docs" and "dge" in json.dumps(hit["row"]) for hit in hits)


def test_prometheus_scrapes_every_project_service(
    local_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """The compose file's Prometheus (Debian's, with the file's config rewritten) had every
    meta, pump, drainer and Spark driver target up; only the TiDB drainer, not run here, is not."""
    _, scrape = local_run
    report = json.loads(scrape.read_text())
    config = yaml.safe_load(PROMETHEUS.read_text())
    listed = {
        t for job in config["scrape_configs"] for group in job["static_configs"] for t in group["targets"]
    }
    health = {report["instances"].get(t["labels"]["instance"], t["labels"]["instance"]): t["health"]
              for t in report["targets"]}  # fmt: skip
    assert set(health) == listed
    assert {target for target, state in health.items() if state != "up"} == {"drainer-tidb:8252"}
    assert set(report["metrics"]) == {"meta", "pump", "drainer", "spark-index"}


def _queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_every_dashboard_metric_is_exported_by_the_live_processes(
    local_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    _, scrape = local_run
    report = json.loads(scrape.read_text())
    exported = Exported([text for targets in report["metrics"].values() for text in targets.values()])
    queries = _queries()
    assert len(queries) >= 14 and set(report["queries"]) == set(queries)
    for expr in queries:
        answer = report["queries"][expr]
        assert answer["status"] == "success", f"{expr}: {answer}"
        with_samples = [n for n, _ in SELECTOR.findall(expr) if exported.samples.get(n)]
        assert answer["data"]["result"] or not with_samples, f"{expr}: Prometheus found no series"
        grouping = {label.strip() for found in BY.findall(expr) for label in found.split(",")}
        for name, selector in SELECTOR.findall(expr):
            samples = exported.samples.get(name)
            assert samples is not None or name in exported.declared, f"{expr}: {name} is not exported"
            if not samples:
                continue  # a labelled counter nothing has incremented yet (errors): declared, no samples
            for label, op, value in MATCHER.findall(selector):
                assert any(label in s for s in samples), f"{expr}: {name} has no label {label}"
                if op == "=":
                    assert any(s.get(label) == value for s in samples), (
                        f"{expr}: no {name}{{{label}={value!r}}}"
                    )
            for label in grouping - PROMETHEUS_LABELS:
                assert any(label in s for s in samples), f"{expr}: {name} has no label {label} to group by"
