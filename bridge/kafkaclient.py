"""Client helpers every Kafka user of the project shares (the kafka sink, ``consume``).

- :func:`schema_registry_client`: the Confluent Schema Registry client for a
  URL; ``mock://`` URLs name one in-process registry shared by every user of
  the same URL in this process (tests, ``bench kafka``, one-process demos).
- :func:`redacted` and :func:`redact_url`: librdkafka settings and URLs as
  they may be logged (credentials and inline keys never are).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from confluent_kafka.schema_registry import SchemaRegistryClient

SettingValue = str | int | float | bool

# Settings whose values are never logged: credentials, and inline keys (ssl.key.pem, *.keystore).
_SECRET_WORDS = ("password", "secret", "jaas", "user.info", "token", "credentials", "pem", "keystore")

# mock:// schema registries by URL: every sink (and test) of one process that
# names the same mock URL shares one in-process registry.
_MOCK_REGISTRIES: dict[str, SchemaRegistryClient] = {}


def redacted(settings: Mapping[str, SettingValue]) -> dict[str, SettingValue]:
    """``settings`` with every secret-looking value replaced, for logs."""
    return {
        name: ("<redacted>" if any(word in name.lower() for word in _SECRET_WORDS) else value)
        for name, value in settings.items()
    }


def redact_url(url: str) -> str:
    """``url`` without the user and password it may carry (``https://user:pw@host`` -> ``https://***@host``)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def schema_registry_client(
    url: str, settings: Mapping[str, SettingValue] | None = None
) -> SchemaRegistryClient:
    """The registry client for ``url``; ``mock://`` URLs give one shared in-process registry per URL."""
    conf: dict[str, Any] = {**(settings or {}), "url": url}
    if url.startswith("mock://"):
        client = _MOCK_REGISTRIES.get(url)
        if client is None:
            client = _MOCK_REGISTRIES[url] = SchemaRegistryClient.new_client(conf)
        return client
    return SchemaRegistryClient(conf)
