"""Pumps coming and going under load: a fourth pump joins mid-run, and a pump
is paused and then closed for good mid-run. Both end with the drainer caught
up and ``bridge.apps.diff`` finding the downstream equal to the upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.apps.demo.cluster import Cluster, resolver_for
from bridge.apps.demo.workload import LoadProcess
from tests.e2e.test_pipeline import (
    assert_replicated,
    run_load,
    start_cluster,
    wait_for,
    wait_for_transactions,
)
from tests.support.process import discard, run_cli
from tests.support.pump_server import PumpProcess

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture
def sqlite_upstream(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'upstream.db'}"


@pytest.fixture
def cluster(tmp_path: Path, sqlite_upstream: str) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path, resolver=resolver_for(sqlite_upstream))
    yield cluster
    discard(cluster)  # teardown asserts nothing about the stop (docs/development.md)


def pump_states(cluster: Cluster) -> dict[str, str]:
    result = run_cli("ctl", "--meta", cluster.meta_addr, "nodes", "--kind", "pump")
    assert result.returncode == 0, result.stderr
    return {cells[1]: cells[3] for cells in (line.split() for line in result.stdout.splitlines()[1:])}


def test_a_fourth_pump_joins_mid_run(cluster: Cluster, sqlite_upstream: str, tmp_path: Path) -> None:
    resolver = f'[resolver]\ntype = "sqlite"\ndsn = "{sqlite_upstream}"\n'
    joiner = PumpProcess(tmp_path, cluster.meta_addr, node_id="pump-4", extra_config=resolver)

    def join(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        joiner.start()  # goes online only after the drainer acknowledged its Notify
        wait_for(lambda: pump_states(cluster).get("pump-4") == "online", "pump-4 online", cluster)
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 100)

    try:
        run_load(cluster, sqlite_upstream, seconds=15, fault=join)
        status = cluster.drainer_status()
        assert status is not None and len(status["pumps"]) == 4, json.dumps(status)
        assert_replicated(cluster, sqlite_upstream)
    finally:
        joiner.kill()


def test_a_pump_paused_then_closed_mid_run(cluster: Cluster, sqlite_upstream: str) -> None:
    def pause_then_close(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        paused = run_cli("ctl", "--meta", cluster.meta_addr, "pause", "pump-2")
        assert paused.returncode == 0, paused.stderr
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 60)  # the others take the writes
        cluster.members["pump-2"].expected_up = False  # a closed pump goes offline and exits
        closed = run_cli("ctl", "--meta", cluster.meta_addr, "close", "pump-2")
        assert closed.returncode == 0, closed.stderr
        wait_for(lambda: pump_states(cluster).get("pump-2") == "offline", "pump-2 offline", cluster)

    run_load(cluster, sqlite_upstream, seconds=15, fault=pause_then_close)
    assert_replicated(cluster, sqlite_upstream)


def test_a_dead_pump_marked_offline_by_hand_releases_the_merge(
    cluster: Cluster, sqlite_upstream: str
) -> None:
    """A pump that dies for good holds the merge (it may hold unpulled binlogs) until an operator
    runs ``ctl offline``. Pausing it first and letting the drainer pass a timestamp taken after the
    pause guarantees it holds nothing unpulled, so the downstream must still equal the upstream."""

    def die_then_offline(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        paused = run_cli("ctl", "--meta", cluster.meta_addr, "pause", "pump-2")
        assert paused.returncode == 0, paused.stderr
        cluster.wait_caught_up(cluster.timestamp(), 120)  # everything pump-2 took is merged
        cluster.kill("pump-2")
        wait_for(lambda: pump_alive(cluster, "pump-2") is False, "pump-2's heartbeat expiring", cluster)

        refused = run_cli("ctl", "--meta", cluster.meta_addr, "offline", "pump-2")
        assert refused.returncode == 2 and "--yes" in refused.stderr, refused.stderr
        alive = run_cli("ctl", "--meta", cluster.meta_addr, "offline", "pump-1", "--yes")
        assert alive.returncode == 2 and "ctl close pump-1" in alive.stderr, alive.stderr

        marked = run_cli("ctl", "--meta", cluster.meta_addr, "offline", "pump-2", "--yes")
        assert marked.returncode == 0, marked.stderr
        assert "registered offline" in marked.stdout
        wait_for(lambda: pump_states(cluster).get("pump-2") == "offline", "pump-2 offline", cluster)

    run_load(cluster, sqlite_upstream, seconds=15, fault=die_then_offline)
    assert_replicated(cluster, sqlite_upstream)  # needs the merge released: pump-2 never returns


def pump_alive(cluster: Cluster, name: str) -> bool | None:
    result = run_cli("ctl", "--meta", cluster.meta_addr, "nodes", "--kind", "pump")
    assert result.returncode == 0, result.stderr
    for cells in (line.split() for line in result.stdout.splitlines()[1:]):
        if cells[1] == name:
            return cells[4] == "yes"
    return None
