"""``binlog-bridge meta`` on an etcd that serves only TLS and demands client certificates.

A private etcd (the binary scripts/services runs) is started here on free ports with
a certificate of a test CA and ``--client-cert-auth``; the shared etcd is not touched.
A meta member with ``https://`` URLs and ``[etcd-security]`` becomes leader and hands
out timestamps; one without a client certificate, or with http://, does not start.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.meta import MetaClient
from tests.support.certs import CertFiles, TestCA
from tests.support.process import ChildProcess, bridge_cli, free_port, wait_until

pytestmark = [pytest.mark.etcd, pytest.mark.timeout(120)]

READY = r"meta ready: addr=(\S+) backend=etcd cluster_id=(\d+) leader=yes"


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("etcd-ca"))


@pytest.fixture(scope="module")
def tls_etcd(tmp_path_factory: pytest.TempPathFactory, ca: TestCA) -> Iterator[str]:
    """A one-member etcd serving https with mutual TLS; yields its client URL."""
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("no etcd binary (scripts/services installs etcd-server)")
    workdir = tmp_path_factory.mktemp("tls-etcd")
    server = ca.issue("etcd")
    client_port, peer_port = free_port(), free_port()
    url, peer = f"https://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
    data = workdir / "data"
    data.mkdir(mode=0o700)
    argv = [
        etcd, "--name", "tls", "--data-dir", str(data),
        "--listen-client-urls", url, "--advertise-client-urls", url,
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
        "--initial-cluster", f"tls={peer}", "--heartbeat-interval=20", "--election-timeout=200",
        "--cert-file", str(server.cert), "--key-file", str(server.key),
        "--client-cert-auth", "--trusted-ca-file", str(ca.path),
    ]  # fmt: skip
    child = ChildProcess(argv, workdir / "etcd.log")
    try:
        child.wait_for_line(r"serving client traffic securely|ready to serve client requests", timeout=30)
        yield url
    finally:
        child.stop()


def meta_config(tmp_path: Path, etcd: str, prefix: str, client: CertFiles | None) -> tuple[Path, str]:
    addr = f"127.0.0.1:{free_port()}"
    text = f'addr = "{addr}"\netcd = "{etcd}"\netcd-prefix = "{prefix}"\n'
    if client is not None:
        text += "[etcd-security]\n" + client.toml()
    path = tmp_path / f"meta-{addr.rpartition(':')[2]}.toml"
    path.write_text(text)
    return path, addr


def test_meta_on_a_mutual_tls_etcd(
    tls_etcd: str, ca: TestCA, tmp_path: Path, children: list[ChildProcess], unique_name: str
) -> None:
    config, addr = meta_config(tmp_path, tls_etcd, f"/{unique_name}", ca.issue("meta"))
    child = ChildProcess(bridge_cli("meta", "--config", str(config)), tmp_path / "meta.log")
    children.append(child)
    child.wait_for_line(READY)

    async def two_timestamps() -> tuple[int, int]:
        async with MetaClient(addr, timeout=5.0) as client:
            return await client.get_timestamp(), await client.get_timestamp()

    first, second = asyncio.run(two_timestamps())
    assert 0 < first < second


@pytest.mark.parametrize("setup", ["no client certificate", "plaintext"])
def test_meta_without_valid_etcd_credentials_does_not_start(
    tls_etcd: str, ca: TestCA, tmp_path: Path, children: list[ChildProcess], unique_name: str, setup: str
) -> None:
    if setup == "plaintext":
        config, _ = meta_config(tmp_path, tls_etcd.replace("https://", "http://"), f"/{unique_name}", None)
    else:
        only_ca = CertFiles(cert=Path(), key=Path(), ca=ca.path)
        config, _ = meta_config(tmp_path, tls_etcd, f"/{unique_name}", None)
        config.write_text(config.read_text() + f'[etcd-security]\nssl-ca = "{only_ca.ca}"\n')
    child = ChildProcess(bridge_cli("meta", "--config", str(config)), tmp_path / "meta.log")
    children.append(child)
    wait_until(lambda: child.proc.poll() is not None, timeout=60, what="meta to give up")
    assert child.proc.returncode != 0
    assert "cannot reach etcd" in child.output
