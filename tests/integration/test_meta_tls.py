"""The meta service over TLS: a TLS client is served, a plaintext one is not,
and with ``ssl-ca`` set the server demands a client certificate (on the gRPC
port and on the HTTP status endpoint alike)."""

from __future__ import annotations

import asyncio
import http.client
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bridge.errors import MetaUnavailable
from bridge.grpcutil import SecurityConfig
from bridge.meta.client import MetaClient
from tests.support.process import ChildProcess, bridge_cli, free_port, run_cli
from tests.support.tls import self_signed_cert


def start_meta(tmp_path: Path, children: list[ChildProcess], security: str, top: str = "") -> str:
    addr = f"127.0.0.1:{free_port()}"
    config = tmp_path / "meta.toml"
    config.write_text(f'addr = "{addr}"\ndata-dir = "{tmp_path / "meta"}"\n{top}[security]\n{security}')
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
    status_port = free_port()
    addr = start_meta(
        tmp_path,
        children,
        f'ssl-ca = "{cert}"\nssl-cert = "{cert}"\nssl-key = "{key}"\n',
        top=f'status-addr = "127.0.0.1:{status_port}"\n',
    )

    with_client_cert = SecurityConfig(ssl_ca=str(cert), ssl_cert=str(cert), ssl_key=str(key))
    assert asyncio.run(first_timestamp(addr, with_client_cert)) > 0
    with pytest.raises(MetaUnavailable):
        asyncio.run(first_timestamp(addr, SecurityConfig(ssl_ca=str(cert))))

    url = f"https://127.0.0.1:{status_port}"
    client = ssl.create_default_context(cafile=str(cert))
    client.load_cert_chain(str(cert), str(key))
    with urllib.request.urlopen(f"{url}/status", timeout=10, context=client) as response:
        assert json.loads(response.read())["addr"] == addr
    with urllib.request.urlopen(f"{url}/metrics", timeout=10, context=client) as response:
        assert "bridge_meta_is_leader 1.0" in response.read().decode()
    no_client_cert = ssl.create_default_context(cafile=str(cert))
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(f"{url}/metrics", timeout=10, context=no_client_cert)
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(f"http://127.0.0.1:{status_port}/metrics", timeout=10)  # no plaintext
