"""Client helpers every Kafka user of the project shares (the kafka sink, ``consume``).

- :func:`schema_registry_client`: the Confluent Schema Registry client for a
  URL; ``mock://`` URLs name one in-process registry shared by every user of
  the same URL in this process (tests, ``bench kafka``, one-process demos).
- :func:`redacted` and :func:`redact_url`: librdkafka settings and URLs as
  they may be logged (credentials and inline keys never are).
- :func:`check_security`: the ``security.protocol``, ``ssl.*`` and ``sasl.*``
  settings passed through to librdkafka, checked before a client is built, so
  a secured cluster misconfigured fails at start with the key named instead of
  in a background thread (or, worse, silently in plaintext).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from confluent_kafka.schema_registry import SchemaRegistryClient

from bridge.errors import ConfigError

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


PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", "OAUTHBEARER")


def check_security(settings: Mapping[str, SettingValue], key: str, sep: str = ".") -> None:
    """Refuse security settings that contradict each other; :class:`ConfigError` naming
    ``key<sep><setting>`` (``sink.kafka.producer.ssl.ca.location``).

    - ``security.protocol``: one of :data:`PROTOCOLS` (any case; default plaintext);
    - ``ssl.*`` needs ``ssl`` or ``sasl_ssl`` (librdkafka would ignore it: no TLS at all);
    - ``sasl.*`` needs ``sasl_plaintext`` or ``sasl_ssl``; ``sasl.mechanism(s)`` one of
      :data:`SASL_MECHANISMS`; PLAIN and SCRAM need ``sasl.username`` and ``sasl.password``;
    - ``ssl.certificate.location`` and ``ssl.key.location`` go together;
      ``ssl.endpoint.identification.algorithm`` is ``https`` (the default) or ``none``.

    Files are not opened here: librdkafka reads them when the client is built (at start),
    and its error names the setting and the file.
    """
    key += sep
    protocol = str(settings.get("security.protocol", "plaintext")).lower()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"{key}security.protocol: expected one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    names = sorted(settings)
    tls, sasl = protocol in ("ssl", "sasl_ssl"), protocol.startswith("sasl_")
    for name in names:
        if name.startswith("ssl.") and not tls:
            raise ConfigError(f"{key}{name}: needs security.protocol = ssl or sasl_ssl (now {protocol})")
        if name.startswith("sasl.") and not sasl:
            raise ConfigError(
                f"{key}{name}: needs security.protocol = sasl_ssl or sasl_plaintext (now {protocol})"
            )
    if sasl:
        _check_sasl(settings, key)
    if tls:
        _check_ssl(settings, key)


def _check_sasl(settings: Mapping[str, SettingValue], key: str) -> None:
    name = "sasl.mechanism" if "sasl.mechanism" in settings else "sasl.mechanisms"
    mechanism = str(settings.get(name, "GSSAPI")).upper()
    if mechanism not in SASL_MECHANISMS:
        raise ConfigError(f"{key}{name}: expected one of {', '.join(SASL_MECHANISMS)}, got {mechanism!r}")
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        for needed in ("sasl.username", "sasl.password"):
            if not settings.get(needed):
                raise ConfigError(f"{key}{needed}: required with {name} = {mechanism}")


def _check_ssl(settings: Mapping[str, SettingValue], key: str) -> None:
    if ("ssl.certificate.location" in settings) != ("ssl.key.location" in settings):
        raise ConfigError(f"{key}ssl.key.location: ssl.certificate.location and ssl.key.location go together")
    algorithm = str(settings.get("ssl.endpoint.identification.algorithm", "https")).lower()
    if algorithm not in ("https", "none"):
        raise ConfigError(
            f"{key}ssl.endpoint.identification.algorithm: expected https or none, got {algorithm!r}"
        )
