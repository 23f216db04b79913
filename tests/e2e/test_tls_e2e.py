"""The demo topology with mutual TLS on every hop, and the clients it refuses.

meta, two pumps and a drainer (SQLite sink) run as real processes, each with
``[security]`` naming a certificate of one test CA whose CN is its role
(``meta``, ``pump``, ``drainer``; see bridge.tls), and ``ssl-ca`` so every
gRPC and HTTP port demands a client certificate. ``binlog-bridge load`` writes
with a ``producer`` certificate, ``binlog-bridge ctl`` reads with a ``ctl`` one.
The load ends in an equal diff. The same cluster then shows, through raw gRPC
and HTTP clients, that a client without a certificate, with one of another CA,
or with the wrong role is refused, and that the cluster still works after.

Certificates are made here with ``cryptography`` (tests/support/certs.py).
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge.apps.demo.cluster import Cluster, ClusterSpec, resolver_for
from bridge.apps.demo.workload import LoadProcess
from bridge.apps.diff import diff
from bridge.grpcutil import SecurityConfig, aio_channel
from bridge.meta.client import MetaClient
from bridge.proto import meta_pb2, meta_pb2_grpc, pump_pb2, pump_pb2_grpc
from tests.support.certs import CertFiles, TestCA
from tests.support.process import discard, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

HANG_GUARD = 120.0
LOAD_TABLES = {"load_accounts", "load_orders", "load_events", "load_docs", "load_wide"}


class TlsCluster:
    """The cluster, its CA and the certificates of every role."""

    def __init__(self, workdir: Path) -> None:
        self.ca = TestCA(workdir / "pki")
        self.files = {role: self.ca.issue(role) for role in ("meta", "pump", "drainer", "producer", "ctl")}
        self.upstream = f"sqlite://{workdir / 'upstream.db'}"
        self.cluster = Cluster(
            ClusterSpec(
                workdir / "cluster",
                pumps=2,
                sinks=("sqlite",),
                resolver=resolver_for(self.upstream),
                pump_settings={"security": self.files["pump"].settings()},
                drainer_settings={"security": self.files["drainer"].settings()},
            )
        )
        self.cluster.write_configs()
        meta_toml = self.cluster.config_path("meta")
        meta_toml.write_text(meta_toml.read_text() + "\n[security]\n" + self.files["meta"].toml())

    def security(self, role: str) -> SecurityConfig:
        files = self.files[role]
        return SecurityConfig(ssl_ca=str(files.ca), ssl_cert=str(files.cert), ssl_key=str(files.key))

    def tls_flags(self, role: str) -> list[str]:
        files = self.files[role]
        return ["--ssl-ca", str(files.ca), "--ssl-cert", str(files.cert), "--ssl-key", str(files.key)]

    def timestamp(self) -> int:
        async def fetch() -> int:
            async with MetaClient(
                self.cluster.meta_addr, security=self.security("ctl"), timeout=10.0
            ) as meta:
                return await meta.get_timestamp()

        return asyncio.run(fetch())

    def https_context(self, client: CertFiles | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca.path))
        if client is not None:
            context.load_cert_chain(str(client.cert), str(client.key))
        return context

    def drainer_status(self) -> dict[str, Any]:
        port = self.cluster.members["drainer"].status_port
        context = self.https_context(self.files["ctl"])
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/status", timeout=5, context=context) as reply:
            return dict(json.loads(reply.read()))

    def wait_caught_up(self, target: int) -> None:
        deadline = time.monotonic() + HANG_GUARD
        while True:
            self.cluster.check()
            try:
                if int(self.drainer_status().get("checkpoint_ts") or 0) >= target:
                    return
            except (OSError, ValueError):
                pass
            assert time.monotonic() < deadline, f"hang guard: checkpoint below {target} after {HANG_GUARD:g}s"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    setup = TlsCluster(tmp_path_factory.mktemp("tls-e2e"))
    try:
        setup.cluster.start()
        yield setup
    finally:
        discard(setup.cluster)  # teardown asserts nothing about the stop


def run_load(tls: TlsCluster, seconds: float, name: str) -> dict[str, Any]:
    cluster = tls.cluster
    flags = ["--concurrency", "2", "--ddl-interval", "0.5", "--seed", "11", *tls.tls_flags("producer")]
    load = LoadProcess(cluster.data_dir / "logs", cluster.meta_addr, tls.upstream, seconds, flags, name=name)
    load.start()
    try:
        status = load.wait(timeout=HANG_GUARD)
    finally:
        load.stop()
    summary = load.result()
    assert status == 0 and summary["transactions"] > 0 and summary["errors"] == 0, summary
    return summary


def assert_replicated(tls: TlsCluster) -> None:
    tls.wait_caught_up(tls.timestamp())
    report = diff(tls.upstream, tls.cluster.downstream_dsn)
    assert {table.name.split(".", 1)[1] for table in report.tables} >= LOAD_TABLES, report.lines()
    assert report.equal, "\n".join(report.lines())


def test_every_hop_over_mutual_tls_replicates_equal(tls: TlsCluster) -> None:
    summary = run_load(tls, seconds=6, name="load")
    assert summary["ddl"] > 0, summary
    status = tls.drainer_status()
    assert len(status["pumps"]) == 2, status

    # ctl reads the registry over gRPC and each node's /status over HTTPS with its ctl certificate
    nodes = run_cli("ctl", "--meta", tls.cluster.meta_addr, *tls.tls_flags("ctl"), "nodes")
    assert nodes.returncode == 0, nodes.stderr
    assert nodes.stdout.count("pump-") >= 2 and "drainer" in nodes.stdout, nodes.stdout

    assert_replicated(tls)


async def grpc_code(addr: str, security: SecurityConfig | None, call: str) -> grpc.StatusCode:
    """Make one raw call (a stub, not the SDK) and return its status code."""
    channel = aio_channel(addr, security)
    try:
        if call == "PullBinlogs":
            stream = pump_pb2_grpc.PumpStub(channel).PullBinlogs(pump_pb2.PullBinlogReq(), timeout=5)
            async for _ in stream:
                break
        elif call == "Heartbeat as a pump":
            status = meta_pb2.NodeStatus(node_id="ghost", addr="127.0.0.1:1", kind=meta_pb2.PUMP)
            request = meta_pb2.HeartbeatRequest(status=status)
            await meta_pb2_grpc.MetaStub(channel).Heartbeat(request, timeout=5)
        else:
            await meta_pb2_grpc.MetaStub(channel).GetTimestamps(meta_pb2.TsoRequest(count=1), timeout=5)
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    finally:
        await channel.close()


def test_clients_without_a_valid_certificate_are_refused(tls: TlsCluster, tmp_path: Path) -> None:
    meta, pump = tls.cluster.meta_addr, f"127.0.0.1:{tls.cluster.members['pump-1'].port}"
    stranger = TestCA(tmp_path / "other", "stranger-ca").issue("ctl")
    forged = SecurityConfig(ssl_ca=str(tls.ca.path), ssl_cert=str(stranger.cert), ssl_key=str(stranger.key))
    no_cert = SecurityConfig(ssl_ca=str(tls.ca.path))

    async def codes() -> dict[str, grpc.StatusCode]:
        return {
            "plaintext to meta": await grpc_code(meta, None, "GetTimestamps"),
            "no certificate to meta": await grpc_code(meta, no_cert, "GetTimestamps"),
            "another CA to meta": await grpc_code(meta, forged, "GetTimestamps"),
            "no certificate to a pump": await grpc_code(pump, no_cert, "PullBinlogs"),
            "producer pulling binlogs": await grpc_code(pump, tls.security("producer"), "PullBinlogs"),
            "producer registering a pump": await grpc_code(
                meta, tls.security("producer"), "Heartbeat as a pump"
            ),
            "drainer registering a pump": await grpc_code(
                meta, tls.security("drainer"), "Heartbeat as a pump"
            ),
            "ctl asking for a timestamp": await grpc_code(meta, tls.security("ctl"), "GetTimestamps"),
        }

    unavailable, denied = grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.PERMISSION_DENIED
    assert asyncio.run(codes()) == {
        "plaintext to meta": unavailable,  # the handshake fails: no TLS, no certificate
        "no certificate to meta": unavailable,
        "another CA to meta": unavailable,
        "no certificate to a pump": unavailable,
        "producer pulling binlogs": denied,
        "producer registering a pump": denied,
        "drainer registering a pump": denied,
        "ctl asking for a timestamp": grpc.StatusCode.OK,
    }

    port = tls.cluster.members["pump-1"].status_port
    url = f"https://127.0.0.1:{port}/status"
    for client in (None, stranger):
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(url, timeout=5, context=tls.https_context(client))
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5)
    with urllib.request.urlopen(url, timeout=5, context=tls.https_context(tls.files["ctl"])) as reply:
        assert json.loads(reply.read())["node_id"] == "pump-1"
    pause = urllib.request.Request(  # a state change from a node that is not ctl
        f"https://127.0.0.1:{port}/state/pause", data=b"{}", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(pause, timeout=5, context=tls.https_context(tls.files["drainer"]))
    assert refused.value.code == 403
    assert "needs a certificate with role ctl" in refused.value.read().decode()

    # nothing refused reached the registry, and the cluster keeps replicating
    ghost = run_cli("ctl", "--meta", meta, *tls.tls_flags("ctl"), "nodes")
    assert ghost.returncode == 0 and "ghost" not in ghost.stdout, ghost.stdout
    run_load(tls, seconds=2, name="load-after")
    assert_replicated(tls)
