"""Fixtures shared by every test suite."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.process import ChildProcess, free_port

ETCD_URL_ENV = "BRIDGE_TEST_ETCD_URL"
DEFAULT_ETCD_URL = "http://127.0.0.1:23790"  # where scripts/services starts etcd
KAFKA_BOOTSTRAP_ENV = "BRIDGE_TEST_KAFKA_BOOTSTRAP"
DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:19092"  # where scripts/services starts the Tansu broker


@pytest.fixture
def etcd_url() -> str:
    """The etcd that scripts/services started; tests use a unique key prefix."""
    return os.environ.get(ETCD_URL_ENV, DEFAULT_ETCD_URL)


@pytest.fixture
def kafka_bootstrap() -> str:
    """The Kafka-compatible broker scripts/services started; tests use topics of their own."""
    return os.environ.get(KAFKA_BOOTSTRAP_ENV, DEFAULT_KAFKA_BOOTSTRAP)


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
