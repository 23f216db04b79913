"""TLS settings are validated at load time, and errors name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.apps.meta.config import MetaConfig
from bridge.config import load
from bridge.errors import ConfigError
from tests.support.certs import TestCA


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    issued = TestCA(tmp_path_factory.mktemp("ca")).issue("meta")
    return {"ssl-ca": str(issued.ca), "ssl-cert": str(issued.cert), "ssl-key": str(issued.key)}


def meta(tmp_path: Path, text: str) -> MetaConfig:
    path = tmp_path / "meta.toml"
    path.write_text(text)
    return load(MetaConfig, path, {})


def test_https_etcd_with_ca_and_client_certificate(tmp_path: Path, files: dict[str, str]) -> None:
    table = "\n".join(f'{key} = "{value}"' for key, value in files.items())
    config = meta(
        tmp_path,
        f'advertise-addr = "127.0.0.1:8248"\netcd = "https://127.0.0.1:2379, https://10.0.0.2:2379"\n'
        f"[etcd-security]\n{table}\n",
    )
    assert config.etcd_tls
    assert config.etcd_urls() == [("127.0.0.1", 2379), ("10.0.0.2", 2379)]
    assert config.etcd_credentials() is not None


def test_https_etcd_without_a_ca_uses_the_system_store(tmp_path: Path) -> None:
    config = meta(tmp_path, 'advertise-addr = "127.0.0.1:8248"\netcd = "https://127.0.0.1:2379"\n')
    assert config.etcd_credentials() is not None


def test_http_etcd_has_no_credentials(tmp_path: Path) -> None:
    config = meta(tmp_path, 'advertise-addr = "127.0.0.1:8248"\netcd = "http://127.0.0.1:2379"\n')
    assert not config.etcd_tls
    assert config.etcd_credentials() is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'etcd = "http://127.0.0.1:2379"\n[etcd-security]\nssl-ca = "{ssl-ca}"',
            "etcd-security: TLS to etcd needs",
        ),
        ('etcd = "https://127.0.0.1:2379,http://127.0.0.1:2380"', "etcd: all URLs must be https:// or all"),
        (
            'etcd = "https://127.0.0.1:2379"\n[etcd-security]\nssl-cert = "{ssl-cert}"',
            "etcd-security.ssl-cert and",
        ),
        (
            'etcd = "https://127.0.0.1:2379"\n[etcd-security]\nssl-ca = "/no/ca.pem"',
            "etcd-security.ssl-ca: no such",
        ),
        ('[security]\nssl-key = "{ssl-key}"', "security.ssl-cert and security.ssl-key"),
    ],
)
def test_bad_tls_settings_name_the_key(
    tmp_path: Path, files: dict[str, str], text: str, message: str
) -> None:
    body = 'advertise-addr = "127.0.0.1:8248"\n' + text
    for key, value in files.items():
        body = body.replace("{" + key + "}", value)
    with pytest.raises(ConfigError, match=message):
        meta(tmp_path, body)
