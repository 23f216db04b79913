"""The kafka sink creates topics with the broker's default replication factor unless
``replication-factor`` says otherwise (issue 15, item 5). The broker side (a topic created
with -1 gets the broker's default) runs in tests/e2e/test_faults_kafka.py."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.config import build
from bridge.errors import ConfigError
from drainer.sinks.kafka.config import KafkaSinkConfig
from drainer.sinks.kafka.topics import BROKER_DEFAULT_REPLICATION


def config(**options: Any) -> KafkaSinkConfig:
    return build(KafkaSinkConfig, {"bootstrap-servers": "127.0.0.1:9092", **options}, prefix="sink.kafka.")


def test_unset_means_the_brokers_default() -> None:
    assert BROKER_DEFAULT_REPLICATION == -1
    assert config().replication_factor == BROKER_DEFAULT_REPLICATION


@pytest.mark.parametrize("value", [-1, 1, 3, 32])
def test_explicit_values_are_kept(value: int) -> None:
    assert config(**{"replication-factor": value}).replication_factor == value


@pytest.mark.parametrize("value", [0, -2, 33])
def test_other_values_name_the_key(value: int) -> None:
    with pytest.raises(ConfigError, match=r"sink\.kafka\.replication-factor: -1 \(the broker's default\)"):
        config(**{"replication-factor": value})
