"""Fixtures shared by every test suite."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.ports import install_port_slot
from tests.support.process import ChildProcess, free_port
from tests.support.spark import spark  # noqa: F401 (the session-scoped SparkSession fixture)

ETCD_URL_ENV = "BRIDGE_TEST_ETCD_URL"
DEFAULT_ETCD_URL = "http://127.0.0.1:23790"  # where scripts/services starts etcd
KAFKA_BOOTSTRAP_ENV = "BRIDGE_TEST_KAFKA_BOOTSTRAP"
DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:19092"  # where scripts/services starts the Tansu broker
REDIS_URL_ENV = "BRIDGE_TEST_REDIS_URL"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"  # where scripts/services starts (or finds) redis-server
REDIS_CLUSTER_NODES_ENV = "BRIDGE_TEST_REDIS_CLUSTER_NODES"
# the three masters scripts/services redis-cluster builds
DEFAULT_REDIS_CLUSTER_NODES = "127.0.0.1:17001,127.0.0.1:17002,127.0.0.1:17003"


WORKER_ENV = "PYTEST_XDIST_WORKER"  # gw0, gw1, ... in a worker of `pytest -n N` (scripts/test)
WORKER_COUNT_ENV = "PYTEST_XDIST_WORKER_COUNT"

_worker = os.environ.get(WORKER_ENV, "")
# Each worker (and every process it starts) hands out only its own ports: the w-th of W shares of
# the run's slot ($BRIDGE_PORT_SLOT=k/n, tests/support/ports.py), so two workers never give the same
# port to two servers, nor reach into another run's slot.
install_port_slot(
    (int(_worker[2:]), int(os.environ[WORKER_COUNT_ENV]))
    if _worker.startswith("gw") and os.environ.get(WORKER_COUNT_ENV)
    else None
)


SPARK_MARK = re.compile(r"\bmark\.spark\b")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``-n N --dist loadgroup`` (scripts/test): a test module runs whole on one worker
    (its module-scoped fixtures start once), and every module with Spark tests on the same
    worker (one SparkSession per run: half a GB and 7-15 s each), in collection order (the
    long end-to-end modules first). pytest-xdist 3.8's own loadgroup cannot do this under
    pytest 9 (it renames ``item._nodeid``, which pytest 9 no longer reads), so the grouping
    is by file, in the controller, which sees node ids only."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False
    spark_files: dict[str, bool] = {}

    class ModuleScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path not in spark_files:
                text = (config.rootpath / path).read_text(encoding="utf-8", errors="replace")
                spark_files[path] = SPARK_MARK.search(text) is not None
            return "spark" if spark_files[path] else path

    return ModuleScheduling(config, log)


@pytest.fixture
def etcd_url() -> str:
    """The etcd that scripts/services started; tests use a unique key prefix."""
    return os.environ.get(ETCD_URL_ENV, DEFAULT_ETCD_URL)


@pytest.fixture
def kafka_bootstrap() -> str:
    """The Kafka-compatible broker scripts/services started; tests use topics of their own."""
    return os.environ.get(KAFKA_BOOTSTRAP_ENV, DEFAULT_KAFKA_BOOTSTRAP)


@pytest.fixture
def redis_url() -> str:
    """The Redis scripts/services started (or found); tests use a key prefix of their own."""
    return os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL)


@pytest.fixture
def redis_cluster_nodes() -> list[str]:
    """host:port of the masters of the local Redis Cluster scripts/services built (redis-cluster)."""
    text = os.environ.get(REDIS_CLUSTER_NODES_ENV, DEFAULT_REDIS_CLUSTER_NODES)
    return [node.strip() for node in text.split(",") if node.strip()]


@pytest.fixture
def unique_name() -> str:
    """A name no other test uses: for key prefixes, databases and topics."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def children(tmp_path: Path) -> Iterator[list[ChildProcess]]:
    """Child processes started by a test; all are SIGKILLed at teardown."""
    started: list[ChildProcess] = []
    yield started
    for child in started:
        child.kill()
