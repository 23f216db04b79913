"""Kafka security settings (security.protocol, ssl.*, sasl.*) are passed through to
librdkafka and checked at load time, with the key named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from bridge.apps.consume.settings import consumer_settings
from bridge.errors import ConfigError
from bridge.kafkaclient import check_security
from drainer.sinks.kafka.config import admin_settings, load_config, producer_settings
from tests.support.certs import TestCA


@pytest.fixture(scope="module")
def client_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    issued = TestCA(tmp_path_factory.mktemp("ca")).issue("drainer")
    return {
        "ssl.ca.location": str(issued.ca),
        "ssl.certificate.location": str(issued.cert),
        "ssl.key.location": str(issued.key),
    }


def test_mutual_tls_and_sasl_settings_reach_producer_and_admin(client_files: dict[str, str]) -> None:
    producer: dict[str, Any] = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "bridge",
        "sasl.password": "s3cret",
        **client_files,
    }
    config = load_config({"bootstrap-servers": "127.0.0.1:9093", "producer": producer})
    for settings in (producer_settings(config), admin_settings(config)):
        assert {k: settings[k] for k in producer} == producer
    # librdkafka itself takes them (it reads the PEM files when the client is built)
    Producer({**producer_settings(config), "socket.timeout.ms": 1000}).flush(0)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"security.protocol": "tls"}, r"k\.security\.protocol: expected one of plaintext, ssl"),
        ({"ssl.ca.location": "/etc/hostname"}, r"k\.ssl\.ca\.location: needs security\.protocol = ssl"),
        ({"security.protocol": "ssl", "sasl.username": "u"}, r"k\.sasl\.username: needs security\.protocol"),
        ({"security.protocol": "sasl_ssl", "sasl.mechanism": "MD5"}, r"k\.sasl\.mechanism: expected one of"),
        (
            {"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
            r"k\.sasl\.password: required with sasl\.mechanism = PLAIN",
        ),
        (
            {"security.protocol": "ssl", "ssl.certificate.location": "/etc/hostname"},
            r"k\.ssl\.key\.location: ssl\.certificate\.location and ssl\.key\.location go together",
        ),
        (
            {"security.protocol": "ssl", "ssl.endpoint.identification.algorithm": "dns"},
            r"k\.ssl\.endpoint\.identification\.algorithm: expected https or none",
        ),
    ],
)
def test_contradictions_are_refused_naming_the_key(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_security(settings, "k")


def test_valid_settings_pass() -> None:
    check_security({}, "k")
    check_security({"security.protocol": "ssl", "ssl.ca.location": "probe"}, "k")
    check_security({"security.protocol": "sasl_plaintext", "sasl.mechanism": "GSSAPI"}, "k")


def test_the_sink_config_names_its_table() -> None:
    with pytest.raises(ConfigError, match=r"sink\.kafka\.producer\.ssl\.ca\.location: needs security"):
        load_config({"bootstrap-servers": "b:9092", "producer": {"ssl.ca.location": "/etc/hostname"}})


def test_consume_checks_its_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "consumer.properties"
    path.write_text("security.protocol=PLAINTEXT\nssl.ca.location=/etc/ssl/ca.pem\n")
    with pytest.raises(
        ConfigError, match=r"--consumer-config .*consumer\.properties: ssl\.ca\.location: needs security"
    ):
        consumer_settings(str(path))
