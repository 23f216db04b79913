"""Fixtures shared by every test suite."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

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
