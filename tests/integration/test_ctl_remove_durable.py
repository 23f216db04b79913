"""`ctl remove` / `ctl prune` delete a record for good: a restarted meta service (local data
dir, or etcd) does not bring it back (issue 18)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from bridge.meta import MetaClient
from bridge.proto import meta_pb2
from tests.support.process import ChildProcess, bridge_cli, free_port, run_cli, wait_until

READY = r"meta ready: addr=\S+ backend=\w+ cluster_id=\d+ leader=yes"


def start_meta(tmp_path: Path, port: int, backend: list[str]) -> ChildProcess:
    argv = bridge_cli("meta", "--addr", f"127.0.0.1:{port}", "--data-dir", str(tmp_path / "meta"), *backend)
    child = ChildProcess(argv, tmp_path / "meta.log")
    child.wait_for_line(READY)
    return child


def register_gone(meta_addr: str, *node_ids: str) -> None:
    """Records of drainers that went OFFLINE and stopped heartbeating (a short ttl)."""

    async def main() -> None:
        async with MetaClient(meta_addr) as client:
            for node_id in node_ids:
                record = meta_pb2.NodeStatus(
                    node_id=node_id,
                    kind=meta_pb2.DRAINER,
                    addr="127.0.0.1:1",
                    state=meta_pb2.OFFLINE,
                    ttl_ms=150,
                )
                await client.heartbeat(record, await client.cluster_id())

    asyncio.run(main())


def listed(meta_addr: str) -> dict[str, bool]:
    result = run_cli("ctl", "--meta", meta_addr, "nodes", "--output", "json")
    assert result.returncode == 0, result.stderr
    return {node["node_id"]: node["alive"] for node in json.loads(result.stdout)}


@pytest.fixture(params=["local", pytest.param("etcd", marks=pytest.mark.etcd)])
def backend(request: pytest.FixtureRequest, etcd_url: str, unique_name: str) -> list[str]:
    return [] if request.param == "local" else ["--etcd", etcd_url, "--etcd-prefix", f"/{unique_name}"]


def test_removed_records_stay_removed_after_a_restart(tmp_path: Path, backend: list[str]) -> None:
    port = free_port()
    meta_addr = f"127.0.0.1:{port}"
    meta = start_meta(tmp_path, port, backend)
    try:
        register_gone(meta_addr, "gone-1", "gone-2", "kept")
        wait_until(
            lambda: listed(meta_addr) == {"gone-1": False, "gone-2": False, "kept": False}, what="dead"
        )
        removed = run_cli("ctl", "--meta", meta_addr, "remove", "gone-1", "--yes")
        assert removed.returncode == 0, removed.stderr
        pruned = run_cli(
            "ctl", "--meta", meta_addr, "prune", "--older-than", "0s", "--dry-run", "--output", "json"
        )
        assert sorted(n["node_id"] for n in json.loads(pruned.stdout)) == ["gone-2", "kept"]
        meta.stop()
        meta = start_meta(tmp_path, port, backend)
        assert sorted(listed(meta_addr)) == ["gone-2", "kept"]
        assert run_cli("ctl", "--meta", meta_addr, "remove", "gone-2", "--yes").returncode == 0
        meta.stop()
        meta = start_meta(tmp_path, port, backend)
        assert sorted(listed(meta_addr)) == ["kept"]
    finally:
        meta.kill()
