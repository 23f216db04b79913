"""`binlog-bridge ctl` against real meta, pump and drainer processes (issue 18):

- a state change verifies that the process at the registered status address
  is the node (node id and cluster id of its ``/status``), so a node that took
  over a dead node's address is never paused or closed in its place;
- ``ctl offline`` lets a drainer that is gone for good go (refused while it is
  alive, ``--yes`` required), after which a pump's close no longer waits for it;
- ``--output json`` on the listings.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.drainer_cluster import DrainerProcess
from tests.support.process import ChildProcess, run_cli, wait_until
from tests.support.pump_server import PumpProcess, start_meta

pytestmark = pytest.mark.timeout(240)


def nodes_json(meta_addr: str, *args: str) -> dict[str, dict[str, Any]]:
    result = run_cli("ctl", "--meta", meta_addr, *args, "--output", "json")
    assert result.returncode == 0, result.stderr
    return {node["node_id"]: node for node in json.loads(result.stdout)}


def status_of(status_port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{status_port}/status", timeout=10) as reply:
        return dict(json.loads(reply.read()))


def test_close_refuses_another_drainer_answering_at_the_registered_address(tmp_path: Path) -> None:
    meta, meta_addr = start_meta(tmp_path)
    first = DrainerProcess(tmp_path, meta_addr, node_id="drainer-1")
    second = DrainerProcess(tmp_path, meta_addr, node_id="drainer-2", status_port=first.status_port)
    try:
        first.start()
        first.kill()  # gone; its registry record still names its status address
        second.start()  # the same status-addr, as the example configs all had
        cluster_id = status_of(second.status_port)["cluster_id"]

        closed = run_cli("ctl", "--meta", meta_addr, "close", "drainer-1")
        assert closed.returncode == 2, closed.stdout + closed.stderr
        assert (
            f"refused: the process answering at 127.0.0.1:{first.status_port} is node drainer-2 "
            f"of cluster {cluster_id}, not drainer-1 of cluster {cluster_id}"
        ) in closed.stderr
        assert second.child is not None and second.child.proc.poll() is None
        assert status_of(second.status_port)["state"] == "ONLINE"
        assert nodes_json(meta_addr, "drainers")["drainer-2"]["state"] == "online"
    finally:
        second.kill()
        first.kill()
        meta.kill()


def test_pause_refuses_a_node_of_another_cluster(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    meta, meta_addr = start_meta(tmp_path / "a")
    other_meta, other_addr = start_meta(tmp_path / "b")
    ours = PumpProcess(tmp_path / "a", meta_addr)
    theirs = PumpProcess(tmp_path / "b", other_addr, status_port=ours.status_port)  # same node id too
    try:
        ours.start()
        ours.kill()
        theirs.start()
        paused = run_cli("ctl", "--meta", meta_addr, "pause", "pump-1")
        assert paused.returncode == 2, paused.stdout + paused.stderr
        their_cluster = status_of(theirs.status_port)["cluster_id"]
        assert f"is node pump-1 of cluster {their_cluster}, not pump-1 of cluster" in paused.stderr
        assert status_of(theirs.status_port)["state"] == "online"  # a pump's state names are lower case
    finally:
        theirs.kill()
        ours.kill()
        other_meta.kill()
        meta.kill()


def test_a_drainer_gone_for_good_is_taken_offline_and_a_pump_close_stops_waiting(tmp_path: Path) -> None:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr)
    drainer = DrainerProcess(tmp_path, meta_addr, node_id="drainer-1")
    children: list[ChildProcess] = []
    try:
        children.append(pump.start())
        children.append(drainer.start())
        listed = nodes_json(meta_addr, "nodes")
        assert listed["drainer-1"]["kind"] == "drainer" and listed["drainer-1"]["alive"] is True
        assert listed["pump-1"]["state"] == "online" and listed["pump-1"]["status_addr"] == (
            f"127.0.0.1:{pump.status_port}"
        )

        alive = run_cli("ctl", "--meta", meta_addr, "offline", "drainer-1", "--yes")
        assert alive.returncode == 2 and "drainer drainer-1 is alive" in alive.stderr

        drainer.kill()  # gone for good: its checkpoint will never pass the pump's final watermark
        wait_until(
            lambda: not nodes_json(meta_addr, "drainers")["drainer-1"]["alive"], what="drainer-1 not alive"
        )
        waited = run_cli("ctl", "--meta", meta_addr, "wait-drainers", "--timeout", "1")
        assert waited.returncode == 1, waited.stdout + waited.stderr  # a dead drainer never catches up
        assert re.search(r"still behind \d+: drainer-1 at \d+ \(not alive\)", waited.stderr), waited.stderr
        unconfirmed = run_cli("ctl", "--meta", meta_addr, "offline", "drainer-1")
        assert unconfirmed.returncode == 2 and "add --yes to confirm" in unconfirmed.stderr
        assert nodes_json(meta_addr, "drainers")["drainer-1"]["state"] == "online"

        offline = run_cli("ctl", "--meta", meta_addr, "offline", "drainer-1", "--yes")
        assert offline.returncode == 0, offline.stderr
        assert "drainer-1: registered offline; pumps stop waiting for it" in offline.stdout
        assert nodes_json(meta_addr, "drainers")["drainer-1"]["state"] == "offline"

        closed = run_cli("ctl", "--meta", meta_addr, "close", "pump-1")
        assert closed.returncode == 0, closed.stderr
        assert pump.child is not None and pump.child.wait(timeout=120) == 0
        assert nodes_json(meta_addr, "nodes", "--kind", "pump")["pump-1"]["state"] == "offline"

        status = run_cli("ctl", "--meta", meta_addr, "status", "--output", "json")
        assert status.returncode == 0 and json.loads(status.stdout)["cluster_id"] > 0
    finally:
        drainer.kill()
        pump.kill()
        meta.kill()


def node_ids(meta_addr: str, *args: str) -> list[str]:
    result = run_cli("ctl", "--meta", meta_addr, *args, "--output", "json")
    assert result.returncode == 0, result.stderr
    return sorted(node["node_id"] for node in json.loads(result.stdout))


def test_remove_and_prune_delete_the_records_of_nodes_gone_for_good(tmp_path: Path) -> None:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr)
    drainers = [DrainerProcess(tmp_path, meta_addr, node_id=f"drainer-{i}") for i in (1, 2)]
    try:
        pump.start()
        for drainer in drainers:
            drainer.start()
        assert node_ids(meta_addr, "nodes") == ["drainer-1", "drainer-2", "pump-1"]

        alive = run_cli("ctl", "--meta", meta_addr, "remove", "pump-1", "--yes")
        assert alive.returncode == 2 and "pump pump-1 is alive: take it offline first" in alive.stderr

        drainers[1].kill()  # gone for good, never taken offline: remove does both steps
        wait_until(lambda: not nodes_json(meta_addr, "drainers")["drainer-2"]["alive"], what="drainer-2 dead")
        unconfirmed = run_cli("ctl", "--meta", meta_addr, "remove", "drainer-2")
        assert unconfirmed.returncode == 2 and "add --yes to confirm" in unconfirmed.stderr
        removed = run_cli("ctl", "--meta", meta_addr, "remove", "drainer-2", "--yes")
        assert removed.returncode == 0, removed.stderr
        assert "drainer-2: record deleted" in removed.stdout
        assert node_ids(meta_addr, "nodes") == ["drainer-1", "pump-1"]

        assert run_cli("ctl", "--meta", meta_addr, "close", "pump-1").returncode == 0
        assert pump.child is not None and pump.child.wait(timeout=120) == 0
        drainers[0].kill()
        wait_until(lambda: not nodes_json(meta_addr, "drainers")["drainer-1"]["alive"], what="drainer-1 dead")
        assert run_cli("ctl", "--meta", meta_addr, "offline", "drainer-1", "--yes").returncode == 0

        assert node_ids(meta_addr, "prune", "--older-than", "1h") == []  # offline, but not for that long
        wait_until(
            lambda: (
                node_ids(meta_addr, "prune", "--older-than", "1s", "--dry-run") == ["drainer-1", "pump-1"]
            ),
            what="both records offline and dead for over a second",
        )
        assert node_ids(meta_addr, "nodes") == ["drainer-1", "pump-1"]  # a dry run deletes nothing
        assert node_ids(meta_addr, "prune", "--older-than", "1s") == ["drainer-1", "pump-1"]
        assert node_ids(meta_addr, "nodes") == []
    finally:
        for drainer in drainers:
            drainer.kill()
        pump.kill()
        meta.kill()
