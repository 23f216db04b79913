"""Network faults between the drainer and one pump, under a writer load (issue 27, item 2).

A meta service, three pumps and a drainer (sqlite sink) as real processes, and
`binlog-bridge load` (DDL during DML, a SQLite upstream) as the writer. pump-2 advertises the
address of a fault proxy (tests/support/tcp_proxy.py) in front of it, so every connection to it
goes through the proxy; the faults are scoped to the drainer's process group, so the producers
still reach pump-2 while the drainer cannot.

- **Blackhole, then heal**: established and new connections of the drainer to pump-2 accept
  bytes and forward nothing (half-open, no RST). The drainer must notice through gRPC keepalive
  (bridge.grpcutil: a ping unanswered 5 s after it was sent, pings every 10 s) and show pump-2
  ``unreachable`` with a ``last_error`` in ``/status`` and ``bridge_drainer_errors_total{where="pull"}``;
  the merge waits for pump-2 (it may hold commits) and goes on once the proxy heals.
- **Reset storm**: every connection of the drainer to pump-2 is RST every 100 ms for a while.

Each ends with the producers' acknowledged transactions as the reference: the drainer's
checkpoint passes a fresh timestamp and ``bridge.apps.diff`` finds the sink equal to the upstream.
Skipping the heal leaves the merge waiting for pump-2, and the catch-up fails at its hang guard.
The blackhole lasts until the drainer has reported it (the assertion does not depend on a
longer one) and the load has gone on past it. Timeouts are hang guards; the times logged
(detection, recovery) are for docs/operations.md, never asserted.
"""

from __future__ import annotations

import logging
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.apps.demo import tomlfile
from bridge.apps.demo.cluster import Cluster, ClusterSpec, resolver_for
from bridge.apps.demo.workload import LoadProcess
from tests.e2e.test_pipeline import assert_replicated, run_load, wait_for, wait_for_transactions
from tests.support.process import discard
from tests.support.tcp_proxy import TcpProxy, process_group

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
log = logging.getLogger(__name__)

CUT = "pump-2"
STORM_SECONDS = 3.0
STORM_EVERY = 0.1


def pump_entry(cluster: Cluster, name: str) -> dict[str, Any] | None:
    status = cluster.drainer_status()
    for entry in (status or {}).get("pumps", []):
        if entry["node_id"] == name:
            return dict(entry)
    return None


def pull_errors(cluster: Cluster) -> float:
    """``bridge_drainer_errors_total{where="pull"}`` from the drainer's /metrics."""
    port = cluster.members["drainer"].status_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith('bridge_drainer_errors_total{where="pull"}'):
                return float(line.split()[-1])
    return 0.0


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Cluster, TcpProxy, str]]:
    """The cluster of the module docstring, pump-2 behind a proxy; the upstream's DSN."""
    upstream = f"sqlite://{tmp_path / 'upstream.db'}"
    spec = ClusterSpec(
        tmp_path / "cluster",
        pumps=3,
        resolver=resolver_for(upstream),
        pump_settings={"max-txn-timeout": "20s"},
        drainer_settings={"pump-unreachable-timeout": "2s"},
    )
    cluster = Cluster(spec)
    proxy = TcpProxy(("127.0.0.1", cluster.members[CUT].port))
    cluster.write_configs()
    path = cluster.config_path(CUT)
    config = tomllib.loads(path.read_text(encoding="utf-8"))
    config["advertise-addr"] = proxy.addr  # producers and the drainer dial the proxy
    path.write_text(tomlfile.dumps(config, f"{CUT} behind a fault proxy"), encoding="utf-8")
    proxy.plug()
    try:
        cluster.start()
        yield cluster, proxy, upstream
    finally:
        discard(cluster)
        proxy.unplug()


def blackhole_then_heal(proxy: TcpProxy, timings: dict[str, float]) -> Any:
    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        errors_before = pull_errors(cluster)
        began = time.monotonic()
        proxy.blackhole(clients=process_group(cluster.members["drainer"].process.pid))
        wait_for(lambda: (pump_entry(cluster, CUT) or {}).get("unreachable"), f"{CUT} unreachable", cluster)
        timings["detected"] = time.monotonic() - began
        entry = pump_entry(cluster, CUT)
        assert entry is not None and entry["last_error"] and not entry["connected"], entry
        assert pull_errors(cluster) > errors_before
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 60)  # producers still write
        healed = time.monotonic()
        proxy.heal()
        wait_for(lambda: (pump_entry(cluster, CUT) or {}).get("connected"), f"{CUT} pulled again", cluster)
        timings["recovered"] = time.monotonic() - healed
        timings["cut"] = healed - began

    return fault


def test_drainer_to_pump_blackholed_then_healed(proxied: tuple[Cluster, TcpProxy, str]) -> None:
    cluster, proxy, upstream = proxied
    timings: dict[str, float] = {}
    summary = run_load(cluster, upstream, seconds=60, fault=blackhole_then_heal(proxy, timings))
    log.warning("drainer-pump blackhole: %s; load %s", timings, summary)
    assert_replicated(cluster, upstream)


def test_drainer_to_pump_reset_storm(proxied: tuple[Cluster, TcpProxy, str]) -> None:
    cluster, proxy, upstream = proxied
    resets: list[int] = []

    def storm(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        drainer = process_group(cluster.members["drainer"].process.pid)
        deadline = time.monotonic() + STORM_SECONDS
        while time.monotonic() < deadline:
            resets.append(proxy.reset_all(clients=drainer))
            time.sleep(STORM_EVERY)
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 60)

    summary = run_load(cluster, upstream, seconds=60, fault=storm)
    log.warning("drainer-pump reset storm: %d connections reset; load %s", sum(resets), summary)
    assert sum(resets) > 0
    assert_replicated(cluster, upstream)
    entry = pump_entry(cluster, CUT)
    assert entry is not None and entry["connects"] > 1, entry  # it was cut and came back
