"""Every command of docker-compose.yml is the project's own and works with what it mounts.

Each ``binlog-bridge ...`` and ``python -m spark_consumers ...`` invocation (the ``sh -c``
scripts included) parses with the project's own argument parsers; each config a meta, pump,
drainer or Spark job reads loads with the project's own loader, under the service's compose
environment (a drainer's sinks are constructed from it too, which checks their tables); every
healthcheck runs a tool that exists in its image.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))

from composelocal.commands import bridge_invocations, container_file  # noqa: E402
from composelocal.compose import ComposeFile, Service, load  # noqa: E402

from bridge.cli import build_parser  # noqa: E402
from bridge.config import describe  # noqa: E402

COMPOSE = ROOT / "docker-compose.yml"
SAMPLE_ENV = {
    "BRIDGE_MYSQL_PASSWORD": "sample-mysql-secret",
    "BRIDGE_REDIS_PASSWORD": "sample-redis-secret",
    "BRIDGE_GRAFANA_PASSWORD": "sample-grafana-secret",
    "BRIDGE_CLUSTER_TOKEN": "sample-cluster-token",
}
# The healthcheck tool of each third-party image and where the image ships it (from each image's
# documentation and Dockerfile; without a Docker engine the images cannot be opened here).
IMAGE_TOOLS = {
    "quay.io/coreos/etcd": "etcdctl",  # /usr/local/bin/etcdctl beside etcd
    "apache/kafka": "/opt/kafka/bin/kafka-broker-api-versions.sh",  # the Kafka distribution's scripts
    "confluentinc/cp-schema-registry": "curl",  # Confluent's UBI base ships curl
    "mariadb": "healthcheck.sh",  # the official image's /usr/local/bin/healthcheck.sh
    "mysql": 'MYSQL_PWD="$MYSQL_ROOT_PASSWORD" mysqladmin',  # the server's client tools
    "redis": "redis-cli",
    "pingcap/tidb": "curl",
    "prom/prometheus": "wget",  # busybox base
    "grafana/grafana": "wget",  # alpine base (busybox)
}
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def compose() -> ComposeFile:
    return load(COMPOSE, SAMPLE_ENV, frozenset({"spark", "tidb"}))


def _spark_parser() -> argparse.ArgumentParser:
    from spark_consumers.__main__ import parser

    return parser()


def _parse(invocation: list[str]) -> argparse.Namespace:
    """The invocation parsed by the project's own parser (SystemExit on an unknown flag)."""
    if invocation[0] == "spark_consumers":
        return _spark_parser().parse_args(invocation[1:])
    return build_parser().parse_args(invocation)


def test_every_project_command_parses_with_the_projects_parsers(compose: ComposeFile) -> None:
    parsed = []
    for service in compose.services.values():
        if not service.is_project:
            continue
        invocations = bridge_invocations(service)
        if service.command[0] == "spark-class":
            continue  # checked below
        assert invocations, f"{service.name}: runs no binlog-bridge or spark_consumers command"
        for invocation in invocations:
            args = _parse(invocation)
            parsed.append(getattr(args, "command", None) or invocation[1])
    assert sorted(set(parsed)) == ["diff", "drainer", "index", "load", "meta", "pump", "search", "stats"]


def test_spark_class_commands_name_classes_in_pysparks_jars(compose: ComposeFile) -> None:
    import pyspark

    classes: set[str] = set()
    for jar in (Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"):
        with zipfile.ZipFile(jar) as archive:
            classes.update(n[:-6].replace("/", ".") for n in archive.namelist() if n.endswith(".class"))
    spark_class = [s for s in compose.services.values() if s.command[:1] == ["spark-class"]]
    assert len(spark_class) == 2
    for service in spark_class:
        assert service.command[1] in classes, service.name
    assert (VENV_BIN / "spark-class").exists()


def _load_config(compose: ComposeFile, service: Service, args: argparse.Namespace, scratch: Path) -> Any:
    """The config the command would run with, loaded by the project's own loader: the flags map
    to keys through the FLAG_KEYS of the module that runs the command (found through the parser)."""
    path = container_file(compose, service, str(args.config), scratch)
    if args.command in ("index", "snapshot"):
        from spark_consumers.config import build_config, load_toml

        flags = {
            k: v
            for k, v in vars(args).items()
            if "-" in k or k in ("topics", "master", "source", "checkpoint")
        }
        return build_config(args.command, flags, load_toml(path))
    command = importlib.import_module(args.func.__module__)
    if args.command == "meta":
        return command.load_config(argparse.Namespace(**{**vars(args), "config": path}))
    overrides = {key: getattr(args, dest) for dest, key in command.FLAG_KEYS.items()}
    if args.command == "pump":
        from bridge.config import load as load_toml_config
        from pump.config import PumpConfig

        return load_toml_config(PumpConfig, path, overrides)
    from bridge.sink.registry import build_sink
    from drainer.config import load_config

    config = load_config(path, overrides)
    build_sink(config.sink.types, config.sink.tables, scratch / service.name)  # checks [sink.*]
    return config


def test_every_mounted_config_loads_under_the_compose_environment(
    compose: ComposeFile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = {}
    for service in compose.services.values():
        if not service.is_project:
            continue
        for invocation in bridge_invocations(service):
            args = _parse(invocation)
            if getattr(args, "config", None) is None:
                continue
            with monkeypatch.context() as env:
                for name, value in service.environment.items():
                    env.setenv(name, value)
                config = _load_config(compose, service, args, tmp_path)
                if args.command == "pump":  # the resolver reads its password from the environment
                    assert config.resolver.effective_password() == SAMPLE_ENV["BRIDGE_MYSQL_PASSWORD"]
            lines = "\n".join(describe(config))
            assert not any(secret in lines for secret in SAMPLE_ENV.values()), f"{service.name} logs a secret"
            loaded[service.name] = config
    assert set(loaded) == {
        "meta", "pump-1", "pump-2", "pump-3", "drainer-mysql", "drainer-kafka", "drainer-redis",
        "drainer-tidb", "spark-index",
    }  # fmt: skip
    assert [loaded[f"pump-{i}"].node_id for i in (1, 2, 3)] == ["pump-1", "pump-2", "pump-3"]
    assert (
        loaded["drainer-kafka"].sink.tables["kafka"]["schema-registry-url"] == "http://schema-registry:8081"
    )
    assert loaded["spark-index"].master == "spark://spark-master:7077"


def test_the_local_run_turns_the_registry_off_through_the_environment() -> None:
    local = load(COMPOSE, {**SAMPLE_ENV, "BRIDGE_SCHEMA_REGISTRY_URL": ""}, frozenset({"spark"}))
    assert 'schema-registry-url = ""' in (local.config_content("drainer-kafka") or "")
    index = local.services["spark-index"].command
    assert index[index.index("--schema-registry-url") + 1] == ""


def test_every_healthcheck_uses_a_tool_of_its_image(compose: ComposeFile) -> None:
    for service in compose.services.values():
        check = service.healthcheck
        if service.one_shot:
            assert check is None
            continue
        assert check, service.name
        if service.is_project:
            assert (VENV_BIN / check[0]).exists(), f"{service.name}: {check[0]} is not in the image's venv"
            if check[0] == "binlog-bridge":
                build_parser().parse_args(check[1:])
            else:
                assert check[1] == "-c"
                compile(check[2], service.name, "exec")
        else:
            repo = service.image.rpartition(":")[0]
            tool = check[2] if check[:2] == ["sh", "-c"] else check[0]
            assert tool.startswith(IMAGE_TOOLS[repo]), f"{service.name}: {tool}"
