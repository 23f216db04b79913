"""Certificates for TLS tests, made with the openssl command."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed_cert(directory: Path, name: str = "node") -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key: ``(cert, key)``.

    The certificate is its own CA, so it serves as ``ssl-ca`` as well.
    """
    cert, key = directory / f"{name}.pem", directory / f"{name}-key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
