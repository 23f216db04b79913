"""docker-compose.yml against the Compose Specification and against itself (no Docker engine here).

The schema check is check-jsonschema's vendored compose-spec schema; the rest is what a schema
cannot see: names that must refer to something, published ports, healthchecks, restart policies,
named volumes for pump and drainer data, secrets only from the environment, pinned images, and the
Prometheus and Grafana files pointing at services that exist.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))

from composelocal.commands import simple_commands  # noqa: E402
from composelocal.compose import ComposeFile, Service, load  # noqa: E402
from composelocal.remap import HOST_PORT, SELF_HOSTS  # noqa: E402

COMPOSE = ROOT / "docker-compose.yml"
ALL_PROFILES = frozenset({"spark", "tidb"})
# Secrets as a user sets them; the checks below make sure none of them is written in a file.
SAMPLE_ENV = {
    "BRIDGE_MYSQL_PASSWORD": "sample-mysql-secret",
    "BRIDGE_REDIS_PASSWORD": "sample-redis-secret",
    "BRIDGE_GRAFANA_PASSWORD": "sample-grafana-secret",
    "BRIDGE_CLUSTER_TOKEN": "sample-cluster-token",
}
REQUIRED_IMAGES = {
    "apache/kafka", "confluentinc/cp-schema-registry", "mariadb", "mysql", "redis",
    "quay.io/coreos/etcd", "prom/prometheus", "grafana/grafana", "pingcap/tidb",
}  # fmt: skip


@pytest.fixture(scope="module")
def compose() -> ComposeFile:
    return load(COMPOSE, SAMPLE_ENV, ALL_PROFILES)


def test_the_file_follows_the_compose_specification_schema() -> None:
    checker = Path(sys.executable).parent / "check-jsonschema"
    done = subprocess.run(
        [str(checker), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "version" not in yaml.safe_load(COMPOSE.read_text()), (
        "the Compose Specification has no version key"
    )


def test_every_required_variable_is_named_and_unset_ones_fail() -> None:
    from composelocal.compose import ComposeError

    with pytest.raises(ComposeError, match="BRIDGE_MYSQL_PASSWORD"):
        load(COMPOSE, {}, ALL_PROFILES)


def test_images_are_pinned_by_version(compose: ComposeFile) -> None:
    repos = set()
    for service in compose.services.values():
        repo, _, tag = service.image.rpartition(":")
        assert repo and re.search(r"\d", tag) and tag != "latest", f"{service.name}: unpinned {service.image}"
        repos.add(repo)
    assert repos >= REQUIRED_IMAGES
    tidb = next(s for s in compose.services.values() if s.image.startswith("pingcap/tidb"))
    assert tidb.spec["profiles"] == ["tidb"]
    spark = {n for n, s in compose.services.items() if "spark" in s.spec.get("profiles", [])}
    assert spark == {"spark-master", "spark-worker", "spark-index"}


def test_names_refer_to_things_that_exist(compose: ComposeFile) -> None:
    volumes = set(compose.data["volumes"])
    configs = set(compose.data.get("configs", {}))
    used_volumes = set()
    for service in compose.services.values():
        for dep, options in service.depends_on.items():
            assert dep in compose.services, f"{service.name}: depends on unknown service {dep}"
            if set(compose.services[dep].spec.get("profiles", [])) - set(service.spec.get("profiles", [])):
                assert options.get("required") is False, f"{service.name}: {dep} is in a profile it is not"
        for mount in service.mounts:
            if mount.kind == "volume":
                used_volumes.add(mount.source)
            elif mount.kind == "config":
                assert mount.source in configs, f"{service.name}: unknown config {mount.source}"
            else:
                assert (ROOT / mount.source).exists(), f"{service.name}: {mount.source} does not exist"
            assert mount.kind != "volume" or mount.source in volumes
    assert used_volumes == volumes, f"defined but unused: {volumes - used_volumes}"


def _references(service: Service, compose: ComposeFile) -> list[str]:
    """Every text a project service reads hostnames from: command, env, healthcheck, mounted configs."""
    texts = [*service.command, *service.environment.values(), *(service.healthcheck or [])]
    for mount in service.mounts:
        if mount.kind == "config":
            texts.append(compose.config_content(mount.source) or "")
        elif mount.kind == "bind" and (ROOT / mount.source).is_file():
            texts.append((ROOT / mount.source).read_text())
    return texts


def _check_host_port(text: str, own: Service, compose: ComposeFile, where: str) -> int:
    checked = 0
    for host, port in HOST_PORT.findall(text):
        target = own if host in SELF_HOSTS else compose.services.get(host)
        assert target is not None, f"{where}: {host}:{port} names no service"
        assert int(port) in target.expose, f"{where}: {target.name} does not expose {port}"
        checked += 1
    return checked


def test_every_host_and_port_a_project_service_names_is_a_service_exposing_it(compose: ComposeFile) -> None:
    checked = 0
    for service in compose.services.values():
        if service.is_project:
            for text in _references(service, compose):
                checked += _check_host_port(text, service, compose, service.name)
    assert checked > 40  # meta, pumps, drainers, workload, verify, spark all name others


def test_prometheus_scrapes_every_project_service_with_metrics_and_grafana_reads_prometheus(
    compose: ComposeFile,
) -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for g in job["static_configs"] for t in g["targets"]}
    prometheus = compose.services["prometheus"]
    for target in targets:
        _check_host_port(target, prometheus, compose, "deploy/prometheus.yml")
    # a project service serves metrics when a config it mounts sets status-addr (or the Spark UI port)
    with_metrics = {
        f"{name}:{port}"
        for name, service in compose.services.items()
        if service.is_project and not service.one_shot
        for text in _references(service, compose)
        for port in re.findall(r'(?:status-addr = "0\.0\.0\.0:|"spark\.ui\.port" = ")(\d+)"', text)
    }
    assert with_metrics == targets
    datasource = (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    assert _check_host_port(datasource, compose.services["grafana"], compose, "grafana datasource") == 1
    provider = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/binlog-bridge.yml").read_text())
    grafana_mounts = {m.target for m in compose.services["grafana"].mounts}
    assert provider["providers"][0]["options"]["path"] in grafana_mounts


def test_only_the_ports_a_user_needs_are_published_on_localhost(compose: ComposeFile) -> None:
    published = {}
    for service in compose.services.values():
        for port in service.spec.get("ports", []):
            host_ip, _, container = str(port).split(":")
            assert host_ip == "127.0.0.1", f"{service.name}: {port} is published beyond this machine"
            published[service.name] = int(container)
    assert published == {"kafka": 29092, "prometheus": 9090, "grafana": 3000, "spark-master": 8080}


def test_health_restart_and_start_conditions(compose: ComposeFile) -> None:
    for service in compose.services.values():
        if service.one_shot:
            assert service.spec.get("restart") == "no"
            continue
        assert service.healthcheck, f"{service.name}: a long-running service needs a healthcheck"
        assert service.spec.get("restart") == "on-failure", f"{service.name}: restart on-failure"
        for dep, options in service.depends_on.items():
            wanted = "service_completed_successfully" if compose.services[dep].one_shot else "service_healthy"
            assert options["condition"] == wanted, f"{service.name} -> {dep}"
    assert compose.services["verify"].depends_on["workload"]["condition"] == "service_completed_successfully"


def test_pump_and_drainer_data_live_on_named_volumes(compose: ComposeFile) -> None:
    nodes = [s for n, s in compose.services.items() if n.startswith(("pump-", "drainer-"))]
    assert len(nodes) == 7
    for service in nodes:
        assert any(m.kind == "volume" and m.target == "/var/lib/bridge" for m in service.mounts), service.name


def test_secrets_come_from_the_environment_only(compose: ComposeFile) -> None:
    raw = yaml.safe_load(COMPOSE.read_text())
    for name, spec in raw["services"].items():
        for key, value in (spec.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET|_AUTH$", key) and value:
                assert re.fullmatch(r"\$\{[A-Z_]+\?[^}]*\}", str(value)), f"{name}: {key} is a literal"
    written = [COMPOSE, *(ROOT / "deploy").rglob("*.toml"), *(ROOT / "deploy").rglob("*.yml")]
    for path in written:
        text = path.read_text()
        assert not re.search(r'^\s*password\s*=\s*"[^"]+"', text, re.M), f"{path}: a password literal"
        for secret in SAMPLE_ENV.values():
            assert secret not in text
    redis = compose.services["redis"].command
    assert redis[redis.index("--requirepass") + 1] == SAMPLE_ENV["BRIDGE_REDIS_PASSWORD"]


def test_verify_runs_diff_and_a_search(compose: ComposeFile) -> None:
    programs = [c[:2] for c in simple_commands(compose.services["verify"].command)]
    assert ["binlog-bridge", "diff"] in programs
    assert ["python", "-m"] in programs


def test_the_dashboard_reads_the_provisioned_data_source() -> None:
    datasources = yaml.safe_load(
        (ROOT / "deploy/grafana/provisioning/datasources/prometheus.yml").read_text()
    )
    uid = datasources["datasources"][0]["uid"]
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/binlog-bridge.json").read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    queried = [p for p in panels if p["type"] != "row"]
    assert queried and all(p["datasource"]["uid"] == uid for p in queried)
    assert all(t["datasource"]["uid"] == uid and t["expr"] for p in queried for t in p["targets"])
    grafana = load(COMPOSE, SAMPLE_ENV, ALL_PROFILES).services["grafana"].environment
    assert grafana["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"].endswith(f"/{dashboard['uid']}.json")


# `docker compose` options that take a value, before and after the sub-command.
_VALUED = {"--profile", "-f", "--file", "--env-file", "-p", "--project-name", "--scale", "-e", "--env", "-u",
           "--user", "-w", "--workdir", "--index"}  # fmt: skip


def _docs_compose_commands() -> list[tuple[str, str, list[str]]]:
    """``(where, sub-command, arguments)`` of every ``docker compose`` in the sh blocks of the Docker docs."""
    found = []
    for doc in (ROOT / "README.md", ROOT / "docs" / "docker.md"):
        blocks = re.findall(r"^```(?:sh|bash)\n(.*?)^```", doc.read_text(), re.M | re.S)
        lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
        for command in (c for line in lines for c in simple_commands(["sh", "-c", line])):
            if command[:2] != ["docker", "compose"]:
                continue
            words = command[2:]
            while words and words[0].startswith("-"):
                words = words[2:] if words[0] in _VALUED else words[1:]
            found.append((f"{doc.name}: {' '.join(command)}", words[0], words[1:]))
    return found


def _positionals(arguments: list[str]) -> list[str]:
    words, skip = [], False
    for word in arguments:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = word in _VALUED
        else:
            words.append(word)
    return words


def test_the_docs_docker_compose_commands_name_services_of_the_file(compose: ComposeFile) -> None:
    """README's and docs/docker.md's ``docker compose`` commands: every service they name is one of
    the file; ``exec`` goes to a long-running service, and into ours with a program of the venv."""
    commands = _docs_compose_commands()
    execs = 0
    for where, sub, arguments in commands:
        names = _positionals(arguments)
        services = names[:1] if sub == "exec" else names
        for name in services:
            assert name in compose.services, f"{where}: no service {name}"
        if sub == "exec":
            service = compose.services[names[0]]
            assert not service.one_shot, f"{where}: {service.name} has exited by then"
            program = names[1]
            if service.is_project:
                assert (Path(sys.executable).parent / program).exists(), (
                    f"{where}: {program} not in the image"
                )
            execs += 1
    assert {sub for _, sub, _ in commands} >= {"up", "build", "logs", "exec", "down"}
    assert execs >= 5


def test_the_readme_names_exactly_the_published_ports(compose: ComposeFile) -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Run the full system with Docker", 1)[1].split("\n## ", 1)[0]
    named = {int(port) for port in re.findall(r"127\.0\.0\.1:(\d+)", section)}
    published = {
        int(str(port).split(":")[1])
        for service in compose.services.values()
        for port in service.spec.get("ports", [])
    }
    assert named == published
