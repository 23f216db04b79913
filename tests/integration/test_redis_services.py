"""scripts/services redis and redis-cluster on private ports and a private state dir: up, status,
env, idempotent up, down (the suite's own Redis and cluster are never touched)."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster

from tests.support.process import free_port

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "services"

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server: scripts/services up"),
]


def cluster_port(taken: set[int]) -> int:
    """A free port whose cluster bus port (+10000) is free too (a node's port must be <= 55535)."""
    for _ in range(200):
        port = random.randint(20000, 45000)
        if port in taken or port + 10000 in taken:
            continue
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        taken.update((port, port + 10000))
        return port
    raise AssertionError("no free port pair for a cluster node")


def services(
    state: Path, port: int, cluster_ports: list[int], *args: str
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "BRIDGE_SERVICES_DIR": str(state),
        "BRIDGE_REDIS_PORT": str(port),
        "BRIDGE_REDIS_CLUSTER_PORTS": ",".join(map(str, cluster_ports)),
    }
    return subprocess.run(
        [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_redis_and_a_three_master_cluster_come_up_report_and_go_down(tmp_path: Path) -> None:
    port = free_port()
    taken: set[int] = set()
    cluster_ports = [cluster_port(taken) for _ in range(3)]
    run = lambda *args: services(tmp_path / "state", port, cluster_ports, *args)  # noqa: E731
    try:
        up = run("up", "redis", "redis-cluster")
        assert up.returncode == 0, up.stderr
        assert f"redis: started on 127.0.0.1:{port}" in up.stdout
        assert "redis-cluster: created on" in up.stdout
        assert redis.Redis(port=port).ping()
        nodes = [ClusterNode("127.0.0.1", p) for p in cluster_ports]
        cluster = RedisCluster(startup_nodes=nodes)
        assert len(cluster.get_primaries()) == 3 and cluster.set("k", "v") and cluster.get("k") == b"v"
        cluster.close()

        again = run("up", "redis", "redis-cluster")  # idempotent
        assert (
            f"redis: up on 127.0.0.1:{port} (pid" in again.stdout and "redis-cluster: up on" in again.stdout
        )
        status = run("status", "redis", "redis-cluster")
        assert status.returncode == 0 and "cluster_state ok" in status.stdout
        env = run("env", "redis", "redis-cluster").stdout
        assert f"export BRIDGE_TEST_REDIS_URL=redis://127.0.0.1:{port}/0" in env
        assert (
            "export BRIDGE_TEST_REDIS_CLUSTER_NODES=" + ",".join(f"127.0.0.1:{p}" for p in cluster_ports)
            in env
        )
    finally:
        down = run("down", "redis", "redis-cluster")
    assert down.returncode == 0, down.stderr
    assert run("status", "redis", "redis-cluster").returncode == 3
