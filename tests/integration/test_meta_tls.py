"""The meta service over TLS: a TLS client is served, a plaintext one is not,
and with ``ssl-ca`` set the server demands a client certificate."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bridge.errors import MetaUnavailable
from bridge.grpcutil import SecurityConfig
from bridge.meta.client import MetaClient
from tests.support.process import ChildProcess, bridge_cli, free_port, run_cli
from tests.support.tls import self_signed_cert


def start_meta(tmp_path: Path, children: list[ChildProcess], security: str) -> str:
    addr = f"127.0.0.1:{free_port()}"
    config = tmp_path / "meta.toml"
    config.write_text(f'addr = "{addr}"\ndata-dir = "{tmp_path / "meta"}"\n[security]\n{security}')
    child = ChildProcess(bridge_cli("meta", "--config", str(config)), tmp_path / "meta.log")
    children.append(child)
    child.wait_for_line(r"meta ready")
    return addr


async def first_timestamp(addr: str, security: SecurityConfig | None) -> int:
    async with MetaClient(addr, security=security, timeout=3.0) as client:
        return await client.get_timestamp()


def test_server_tls(tmp_path: Path, children: list[ChildProcess]) -> None:
    cert, key = self_signed_cert(tmp_path)
    addr = start_meta(tmp_path, children, f'ssl-cert = "{cert}"\nssl-key = "{key}"\n')

    assert asyncio.run(first_timestamp(addr, SecurityConfig(ssl_ca=str(cert)))) > 0
    with pytest.raises(MetaUnavailable):
        asyncio.run(first_timestamp(addr, None))

    result = run_cli("ctl", "--meta", addr, "--ssl-ca", str(cert), "tso")
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) > 0


def test_mutual_tls_requires_a_client_certificate(tmp_path: Path, children: list[ChildProcess]) -> None:
    cert, key = self_signed_cert(tmp_path)
    addr = start_meta(tmp_path, children, f'ssl-ca = "{cert}"\nssl-cert = "{cert}"\nssl-key = "{key}"\n')

    with_client_cert = SecurityConfig(ssl_ca=str(cert), ssl_cert=str(cert), ssl_key=str(key))
    assert asyncio.run(first_timestamp(addr, with_client_cert)) > 0
    with pytest.raises(MetaUnavailable):
        asyncio.run(first_timestamp(addr, SecurityConfig(ssl_ca=str(cert))))
