"""`sink.kafka.idempotence`: the producer's librdkafka settings either way, and the settings the
sink owns refused in `[sink.kafka.producer]` (docs/kafka-sink.md, "Delivery and duplicates")."""

from __future__ import annotations

import pytest

from bridge.errors import ConfigError
from drainer.sinks.kafka.config import load_config, producer_settings


def test_the_default_producer_is_idempotent_with_five_requests_in_flight() -> None:
    settings = producer_settings(load_config({"bootstrap-servers": "b:9092"}))
    assert settings["enable.idempotence"] is True
    assert settings["max.in.flight.requests.per.connection"] == 5
    assert settings["acks"] == "all"


def test_without_idempotence_one_request_is_in_flight_and_acks_stay_all() -> None:
    settings = producer_settings(load_config({"bootstrap-servers": "b:9092", "idempotence": False}))
    assert settings["enable.idempotence"] is False
    assert settings["max.in.flight.requests.per.connection"] == 1
    assert settings["acks"] == "all"


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("enable.idempotence", "sink.kafka.idempotence"),
        ("max.in.flight.requests.per.connection", "per-partition order"),
        ("max.in.flight", "per-partition order"),
    ],
)
def test_the_producer_table_cannot_set_what_keeps_the_order(name: str, hint: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config({"bootstrap-servers": "b:9092", "producer": {name: 1}})
    assert f"sink.kafka.producer.{name}: set by the sink" in str(refused.value)
    assert hint in str(refused.value)


def test_idempotence_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match="idempotence"):
        load_config({"bootstrap-servers": "b:9092", "idempotence": "sometimes"})
