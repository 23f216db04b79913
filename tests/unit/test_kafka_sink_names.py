"""The kafka sink's topic names and what it logs of its settings: no broker needed."""

from __future__ import annotations

import pytest

from bridge.kafkaclient import redact_url, redacted
from bridge.sink.errors import SinkApplyError
from drainer.sinks.kafka.topics import TopicNames


def test_a_table_whose_topic_would_be_the_ddl_or_schemas_topic_is_refused_by_name() -> None:
    names = TopicNames("bridge", "{db}.{table}")  # the template alone cannot rule this out
    assert names.table("shop", "orders") == "shop.orders"
    for table in ("_ddl", "_schemas"):
        expected = rf"table bridge\.{table}: its topic would be bridge\.{table}"
        with pytest.raises(SinkApplyError, match=expected):
            names.table("bridge", table)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:secret@registry.example:8081/base", "https://***@registry.example:8081/base"),
        ("http://token@registry:8081", "http://***@registry:8081"),
        ("http://registry:8081", "http://registry:8081"),
        ("mock://tests", "mock://tests"),
    ],
)
def test_registry_urls_are_logged_without_their_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_inline_keys_and_passwords_are_redacted_paths_are_not() -> None:
    settings = {
        "ssl.key.pem": "-----BEGIN PRIVATE KEY-----",
        "ssl.keystore.location": "/etc/kafka/client.p12",
        "ssl.key.password": "pw",
        "sasl.password": "pw",
        "sasl.username": "bridge",
        "ssl.key.location": "/etc/kafka/client.key",
    }
    shown = redacted(settings)
    assert shown["ssl.key.pem"] == shown["ssl.key.password"] == shown["sasl.password"] == "<redacted>"
    assert shown["ssl.keystore.location"] == "<redacted>"  # keystore settings are redacted wholesale
    assert shown["sasl.username"] == "bridge" and shown["ssl.key.location"] == "/etc/kafka/client.key"
