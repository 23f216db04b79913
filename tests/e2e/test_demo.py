"""`binlog-bridge demo` as a user runs it from a fresh clone, and how it stops.

The demo must end with downstream = upstream and exit 0; stop every child
when it is signalled; and fail, naming the child and showing its log, when
a child dies before it is ready. No test leaves a process behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from bridge.apps.demo.cluster import Cluster, ClusterSpec
from bridge.apps.demo.errors import ServiceFailed
from bridge.apps.demo.workload import LoadProcess
from bridge.apps.diff import diff
from bridge.errors import BridgeError
from bridge.meta.client import MetaClient
from tests.support.process import discard

pytestmark = pytest.mark.timeout(300)

HANG_GUARD = 240.0


def processes_under(path: Path, ignore: int = 0) -> list[str]:
    """Command lines of running processes that name ``path`` (the children the demo started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in (os.getpid(), ignore):
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = " ".join(part.decode(errors="replace") for part in argv if part)
        if str(path) in text:
            found.append(f"{entry.name}: {text}")
    return found


def demo(data_dir: Path, *flags: str, log: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "bridge.cli", "demo", "--data-dir", str(data_dir), *flags]
    with log.open("w") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)


def test_demo_ends_with_downstream_equal_to_upstream(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    log = tmp_path / "demo.out"
    child = demo(data_dir, "--seconds", "10", log=log)
    status = child.wait(timeout=HANG_GUARD)
    output = log.read_text()
    assert status == 0, output
    assert "result       EQUAL: the downstream equals the upstream" in output
    assert "txn/s" in output and "lag" in output  # the progress line
    summary = json.loads((data_dir / "summary.json").read_text())
    assert summary["equal"] and summary["tables"] >= 5, summary
    assert summary["load"]["transactions"] > 0 and summary["load"]["ddl"] > 0, summary
    assert summary["checkpoint_ts"] >= summary["target_ts"] > 0
    tokens = set()
    for name in ("meta", "pump-1", "pump-2", "pump-3", "drainer"):
        assert (data_dir / f"{name}.toml").is_file() and (data_dir / "logs" / f"{name}.log").is_file()
        assert (data_dir / f"{name}.toml").stat().st_mode & 0o777 == 0o600
        tokens.add(tomllib.loads((data_dir / f"{name}.toml").read_text())["cluster-token"])
    assert len(tokens) == 1 and len(tokens.pop()) >= 32  # one generated secret for the cluster
    assert sorted(p.name for p in (data_dir / "drainer" / "binlog-files").iterdir()), "file sink empty"
    assert processes_under(data_dir) == []
    report = diff(f"sqlite://{data_dir / 'upstream.db'}", f"sqlite://{data_dir / 'drainer' / 'sqlite'}")
    assert report.equal and report.tables, "\n".join(report.lines())


async def timestamp_without_a_token(meta_addr: str) -> int:
    async with MetaClient(meta_addr, timeout=10.0, token="") as meta:
        return await meta.get_timestamp()


def test_sigterm_mid_run_stops_every_child(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    log = tmp_path / "demo.out"
    child = demo(data_dir, "--seconds", "600", log=log)
    load_log = data_dir / "logs" / "load.log"
    deadline = time.monotonic() + HANG_GUARD
    while not (load_log.exists() and " txns " in load_log.read_text()):
        assert child.poll() is None, log.read_text()
        assert time.monotonic() < deadline, "hang guard: the load never reported progress"
        time.sleep(0.2)
    assert len(processes_under(data_dir, ignore=child.pid)) == 6  # meta, 3 pumps, drainer, load
    child.send_signal(signal.SIGTERM)
    status = child.wait(timeout=HANG_GUARD)
    output = log.read_text()
    assert status == 128 + signal.SIGTERM, output
    assert "interrupted by SIGTERM" in output and str(data_dir) in output
    assert processes_under(data_dir) == []
    assert "drainer drainer stopped at checkpoint" in (data_dir / "logs" / "drainer.log").read_text()
    # Started again by hand from the configs the demo wrote, the cluster delivers the rest.
    cluster = Cluster.from_data_dir(data_dir)
    try:
        cluster.start()
        with pytest.raises(BridgeError, match=r"UNAUTHENTICATED|token"):  # the demo's token is required
            asyncio.run(timestamp_without_a_token(cluster.meta_addr))
        assert_replicated(cluster, f"sqlite://{data_dir / 'upstream.db'}")
    finally:
        discard(cluster)  # teardown asserts nothing about the stop


def test_a_child_that_dies_before_ready_fails_with_its_log(tmp_path: Path) -> None:
    cluster = Cluster(ClusterSpec(tmp_path / "cluster", pumps=3))
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", cluster.members["pump-2"].port))
        squatter.listen()
        try:
            with pytest.raises(ServiceFailed) as failed:
                cluster.start()
        finally:
            cluster.stop()
    message = str(failed.value)
    assert "pump-2 exited with status 2 before it was ready" in message, message
    port = cluster.members["pump-2"].port
    assert str(cluster.log_path("pump-2")) in message, message
    # The key is named once, as docs/pump-operations.md shows it.
    assert f"binlog-bridge pump: error: addr: cannot listen on 127.0.0.1:{port}: " in message, message
    assert processes_under(cluster.data_dir) == []
    # With the port free again the same cluster starts and replicates.
    upstream = f"sqlite://{tmp_path / 'upstream.db'}"
    try:
        cluster.start()
        load = LoadProcess(tmp_path, cluster.meta_addr, upstream, seconds=3)
        load.start()
        assert load.wait(timeout=HANG_GUARD) == 0, load.process.tail()
        assert_replicated(cluster, upstream)
    finally:
        discard(cluster)  # teardown asserts nothing about the stop


def assert_replicated(cluster: Cluster, upstream: str) -> None:
    """Catch up past every commit so far; then the sqlite sink must equal the upstream."""
    cluster.wait_caught_up(cluster.timestamp(), timeout=HANG_GUARD)
    report = diff(upstream, cluster.downstream_dsn)
    assert report.equal and len(report.tables) >= 5, "\n".join(report.lines())
