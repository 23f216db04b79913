"""The ``meta``, ``ctl`` and ``bench tso`` commands as a user runs them, bad input included."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from bridge.meta import MetaClient
from bridge.proto import meta_pb2
from tests.support.process import ChildProcess, bridge_cli, free_port, run_cli

READY = r"meta ready: addr=(\S+) backend=local cluster_id=(\d+) leader=yes"


@pytest.fixture
def meta(children: list[ChildProcess], tmp_path: Path) -> tuple[ChildProcess, str]:
    addr = f"127.0.0.1:{free_port()}"
    child = ChildProcess(
        bridge_cli("meta", "--data-dir", str(tmp_path / "meta"), "--addr", addr), tmp_path / "m.log"
    )
    children.append(child)
    child.wait_for_line(READY)
    return child, addr


def run_meta_expecting_failure(tmp_path: Path, *args: str) -> str:
    result = run_cli("meta", "--data-dir", str(tmp_path / "meta"), *args)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output
    return output


def test_ctl_tso_nodes_and_status(meta) -> None:
    _, addr = meta

    async def register() -> None:
        async with MetaClient(addr) as client:
            await client.heartbeat(
                meta_pb2.NodeStatus(
                    node_id="pump-1",
                    kind=meta_pb2.PUMP,
                    addr="10.1.2.3:8250",
                    state=meta_pb2.ONLINE,
                    score=7,
                    label="rack-a",
                    max_commit_ts=1234,
                    ttl_ms=60_000,  # alive through the slow ctl runs below, on a loaded machine
                )
            )

    asyncio.run(register())
    first = run_cli("ctl", "--meta", addr, "tso")
    second = run_cli("ctl", "--meta", addr, "tso")
    assert first.returncode == second.returncode == 0
    assert int(second.stdout.strip()) > int(first.stdout.strip()) > 0

    nodes = run_cli("ctl", "--meta", addr, "nodes", "--kind", "pump")
    assert nodes.returncode == 0, nodes.stderr
    header, row = nodes.stdout.splitlines()
    assert header.split()[:3] == ["KIND", "NODE", "ID"]
    assert row.split()[:8] == ["pump", "pump-1", "10.1.2.3:8250", "online", "yes", "7", "rack-a", "1234"]
    drainers = run_cli("ctl", "--meta", addr, "nodes", "--kind", "drainer")
    assert drainers.stdout.splitlines()[1:] == []

    status = run_cli("ctl", "--meta", addr, "status")
    assert status.returncode == 0
    assert "leader:     yes" in status.stdout and "backend:    local" in status.stdout


def test_ctl_against_an_unreachable_meta_prints_one_clear_line() -> None:
    addr = f"127.0.0.1:{free_port()}"
    result = run_cli("ctl", "--meta", addr, "--connect-timeout", "1", "tso")
    assert result.returncode == 3  # a dependency could not be reached
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert (
        lines[0].startswith("binlog-bridge ctl: error: no meta leader answered within 1s")
        and addr in lines[0]
    )


def test_ctl_flags_mean_one_thing_and_go_before_or_after_the_action(meta) -> None:
    _, addr = meta
    before = run_cli("ctl", "--output", "json", "--meta", addr, "nodes")
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout) == []
    # --timeout is how long wait-drainers waits, and only that; the leader search is --connect-timeout
    ambiguous = run_cli("ctl", "--meta", addr, "--timeout", "5", "nodes")
    assert ambiguous.returncode == 2 and "--timeout" in ambiguous.stderr, ambiguous.stderr
    assert run_cli("ctl", "--meta", addr, "--connect-timeout", "5", "status").returncode == 0


def test_ctl_listings_say_when_each_node_was_last_seen(meta) -> None:
    _, addr = meta

    async def register() -> None:
        async with MetaClient(addr) as client:
            status = meta_pb2.NodeStatus(
                node_id="drainer-9", kind=meta_pb2.DRAINER, addr="10.1.2.3:8249", state=meta_pb2.PAUSED,
                ttl_ms=500, max_commit_ts=1 << 18,
            )  # fmt: skip
            await client.heartbeat(status)

    asyncio.run(register())
    for action in ("nodes", "drainers"):
        table = run_cli("ctl", "--meta", addr, action)
        assert table.returncode == 0, table.stderr
        header, row = table.stdout.splitlines()[:2]
        assert "LAST SEEN" in header, header
        assert re.search(r" [0-9.]+(ms|s|m|h|d) ago", row), row
        listed = json.loads(run_cli("ctl", "--meta", addr, action, "--output", "json").stdout)
        assert listed[0]["node_id"] == "drainer-9" and listed[0]["last_seen_seconds"] >= 0


def test_meta_stops_cleanly_on_sigterm(meta) -> None:
    child, _ = meta
    assert child.stop() == 0
    assert "Traceback" not in child.output


def test_malformed_toml(tmp_path) -> None:
    config = tmp_path / "meta.toml"
    config.write_text('addr = "127.0.0.1:1\n')
    output = run_meta_expecting_failure(tmp_path, "--config", str(config))
    assert f"{config}: invalid TOML" in output


def test_unknown_key_is_named_with_a_suggestion(tmp_path) -> None:
    config = tmp_path / "meta.toml"
    config.write_text('[tso]\nsave-intervals = "3s"\n')
    output = run_meta_expecting_failure(tmp_path, "--config", str(config))
    assert "tso.save-intervals: unknown key (did you mean 'tso.save-interval'?)" in output


def test_bad_value_is_named(tmp_path) -> None:
    config = tmp_path / "meta.toml"
    config.write_text('election-ttl = "forever"\n')
    output = run_meta_expecting_failure(tmp_path, "--config", str(config))
    assert "election-ttl: expected a duration" in output
    output = run_meta_expecting_failure(tmp_path, "--addr", "nowhere")
    assert "addr: expected host:port, got 'nowhere'" in output


def test_address_in_use_is_named(meta, tmp_path) -> None:
    _, addr = meta
    output = run_meta_expecting_failure(tmp_path / "other", "--addr", addr)
    assert f"addr: cannot listen on {addr}" in output


def test_unreachable_etcd_names_the_url(tmp_path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    output = run_meta_expecting_failure(tmp_path, "--etcd", url, "--addr", f"127.0.0.1:{free_port()}")
    assert f"cannot reach etcd at {url}" in output


def test_bench_tso_prints_json_on_its_last_line() -> None:
    result = run_cli("bench", "tso", "--seconds", "0.5", "--concurrency", "4", "--batch", "10", timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["name"] == "tso" and report["unit"] == "timestamps/s"
    assert report["value"] > 0 and report["ceiling"] > 0
    assert report["ratio"] == pytest.approx(report["value"] / report["ceiling"], rel=0.01)
    assert report["params"] == {"seconds": 0.5, "batch": 10, "concurrency": 4}
