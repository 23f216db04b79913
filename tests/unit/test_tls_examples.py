"""docs/examples/tls: make-certs.sh makes a CA and role certificates that the example
configs load with (run from the directory that holds pki/, as docs/security.md says)."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from bridge.apps.meta.config import MetaConfig
from bridge.config import build, load
from bridge.pumpclient.config import PumpClientConfig
from bridge.tls import has_role
from drainer.config import load_config as load_drainer
from drainer.sinks.kafka.sink import KafkaSink
from pump.config import PumpConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "tls"
ROLES = ("meta", "pump", "drainer", "producer", "ctl")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("make-certs.sh needs the openssl command")
    directory = tmp_path_factory.mktemp("tls-examples")
    result = subprocess.run(
        ["sh", str(EXAMPLES / "make-certs.sh")], cwd=directory, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return directory


def test_make_certs_gives_each_role_a_certificate_of_the_ca(workdir: Path) -> None:
    ca = x509.load_pem_x509_certificate((workdir / "pki" / "ca.pem").read_bytes())
    for role in ROLES:
        cert = x509.load_pem_x509_certificate((workdir / "pki" / f"{role}.pem").read_bytes())
        cert.verify_directly_issued_by(ca)
        names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
        assert has_role(names, role)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "localhost" in sans.get_values_for_type(x509.DNSName)
        assert (workdir / "pki" / f"{role}-key.pem").stat().st_mode & 0o077 == 0  # owner only


def test_the_examples_load_with_those_files(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    meta = load(MetaConfig, EXAMPLES / "meta.toml")
    assert meta.security.ssl_ca == "pki/ca.pem" and meta.security.ssl_cert == "pki/meta.pem"
    etcd = load(MetaConfig, EXAMPLES / "meta-etcd.toml")
    assert etcd.etcd_tls and etcd.etcd_credentials() is not None
    pump = load(PumpConfig, EXAMPLES / "pump.toml")
    assert pump.security.ssl_cert == "pki/pump.pem"
    drainer = load_drainer(EXAMPLES / "drainer.toml")
    assert drainer.security.ssl_cert == "pki/drainer.pem"
    kafka = load_drainer(EXAMPLES / "drainer-kafka.toml")
    sink = KafkaSink(kafka.sink.tables["kafka"], workdir)
    assert sink.producer_settings()["security.protocol"] == "SASL_SSL"
    producer = tomllib.loads((EXAMPLES / "producer.toml").read_text())["pump-client"]
    client = build(PumpClientConfig, producer, prefix="pump-client.")
    assert client.security.ssl_cert == "pki/producer.pem"
