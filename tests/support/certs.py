"""A private certificate authority for TLS tests, made with ``cryptography``.

:func:`make_ca` writes a CA; :meth:`TestCA.issue` a certificate signed by it for
one role name (the subject CN, as :mod:`bridge.tls` reads it) that also names
127.0.0.1 and localhost, so the same file serves a node as server and as client.
Keys are EC P-256: quick to make, accepted by gRPC, OpenSSL, MariaDB and etcd.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class CertFiles:
    """PEM files of one identity: its certificate, its key and the CA that signed it."""

    cert: Path
    key: Path
    ca: Path

    def toml(self) -> str:
        """A ``[security]`` body naming these files."""
        return f'ssl-ca = "{self.ca}"\nssl-cert = "{self.cert}"\nssl-key = "{self.key}"\n'

    def settings(self) -> dict[str, str]:
        """The same as a config table (for the demo cluster's ``*_settings``)."""
        return {"ssl-ca": str(self.ca), "ssl-cert": str(self.cert), "ssl-key": str(self.key)}


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class TestCA:
    """A CA in ``directory`` (``<name>.pem``, ``<name>-key.pem``) that issues role certificates."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path, name: str = "ca") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.subject = _name(f"binlog-bridge test {name}")
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.subject)
            .issuer_name(self.subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + _DAY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{name}.pem"
        self.path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        self, role: str, *, dns: tuple[str, ...] = ("localhost",), ips: tuple[str, ...] = ("127.0.0.1",)
    ) -> CertFiles:
        """A certificate with CN ``role`` and those SANs, for server and client use."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(role))
            .issuer_name(self.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _DAY)
            .not_valid_after(now + _DAY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        stem = role.replace("/", "_")
        cert_path, key_path = self.directory / f"{stem}.pem", self.directory / f"{stem}-key.pem"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        return CertFiles(cert_path, key_path, self.path)


def make_ca(directory: Path, name: str = "ca") -> TestCA:
    return TestCA(directory, name)
