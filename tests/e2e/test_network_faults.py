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
- **Reset storm**: every connection of the drainer to pump-2 is RST every 100 ms for a while;
  once it is over, the drainer pulls pump-2 on one connection while the load goes on.

- **Producer blackholed from pump-2** (the faults scoped to the load's process group): the pump
  client's calls to pump-2 time out, writes go on on the other pumps; orphans are resolved;
  after the heal Prewrites reach pump-2 again.
- **pump-2 blackholed from the meta service** (local backend; pump-2 dials meta through the
  proxy): pump-2 goes not-alive in the registry and comes back online and alive after the heal;
  timestamps taken before, during and after never go back; the drainer merges all three.

Each ends with the producers' acknowledged transactions as the reference: the drainer's
checkpoint passes a fresh timestamp and ``bridge.apps.diff`` finds the sink equal to the upstream.
Each fails when its heal is skipped (``BRIDGE_FAULT_SKIP_HEAL=1``, tests/support/faults.py: the
proxy's heal does nothing, a storm never ends); docs/operations.md records how.
The blackhole lasts until the drainer has reported it (the assertion does not depend on a
longer one) and the load has gone on past it. Timeouts are hang guards; the times logged
(detection, recovery) are for docs/operations.md, never asserted.

CI cost of the three network fault modules (this one, test_network_faults_sinks.py and
test_network_faults_etcd.py, 8 tests): 3 min 48 s wall, 96 s user + 26 s system CPU of the
whole process tree, at load average 5-10 on the shared 2-core machine, and 6 min 14 s wall
(118 s user + 32 s system) at load 18-20 (2026-11-29); the etcd test alone 21-31 s. An earlier
run of 12 tests (with tests/integration/test_fault_proxy.py and test_pump_pull_cancel.py) took
6 min 25 s at load 31-40.
"""

from __future__ import annotations

import asyncio
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
from bridge.meta.client import MetaClient
from bridge.proto import meta_pb2
from tests.e2e.test_pipeline import HANG_GUARD, assert_replicated, run_load, wait_for, wait_for_transactions
from tests.support.faults import storm
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


def metric(cluster: Cluster, member: str, sample: str) -> float:
    """The value of ``sample`` (name and labels as printed) in ``member``'s /metrics; 0 if absent."""
    port = cluster.members[member].status_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(sample + " "):
                return float(line.split()[-1])
    return 0.0


def pull_errors(cluster: Cluster) -> float:
    """``bridge_drainer_errors_total{where="pull"}`` from the drainer's /metrics."""
    return metric(cluster, "drainer", 'bridge_drainer_errors_total{where="pull"}')


def prewrites(cluster: Cluster, pump: str) -> float:
    """Prewrites ``pump`` stored."""
    return metric(cluster, pump, 'bridge_pump_writes_total{result="ok",type="prewrite"}')


def start_with_a_proxy(tmp_path: Path, key: str) -> tuple[Cluster, TcpProxy, str]:
    """The cluster of the module docstring; pump-2's ``key`` goes through a proxy: ``advertise-addr``
    (every connection to pump-2) or ``meta`` (pump-2's connections to the meta service)."""
    upstream = f"sqlite://{tmp_path / 'upstream.db'}"
    spec = ClusterSpec(
        tmp_path / "cluster",
        pumps=3,
        resolver=resolver_for(upstream),
        pump_settings={"max-txn-timeout": "20s"},
        drainer_settings={"pump-unreachable-timeout": "2s"},
    )
    cluster = Cluster(spec)
    behind = cluster.members[CUT if key == "advertise-addr" else "meta"].port
    proxy = TcpProxy(("127.0.0.1", behind))
    cluster.write_configs()
    path = cluster.config_path(CUT)
    config = tomllib.loads(path.read_text(encoding="utf-8"))
    config[key] = proxy.addr
    path.write_text(tomlfile.dumps(config, f"{CUT}: {key} through a fault proxy"), encoding="utf-8")
    proxy.plug()
    try:
        cluster.start()
    except BaseException:
        discard(cluster)
        proxy.unplug()
        raise
    return cluster, proxy, upstream


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Cluster, TcpProxy, str]]:
    """The cluster of the module docstring, pump-2 behind a proxy; the upstream's DSN."""
    cluster, proxy, upstream = start_with_a_proxy(tmp_path, "advertise-addr")
    try:
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


def test_producer_to_pump_blackholed_writes_move_to_the_other_pumps(
    proxied: tuple[Cluster, TcpProxy, str],
) -> None:
    """The load's connections to pump-2 blackholed: its pump client's calls there time out
    (rpc-timeout), it marks pump-2 unavailable and writes to the other pumps; a transaction
    whose Prewrite pump-2 took is written again elsewhere and the orphan on pump-2 is resolved
    (max-txn-timeout 20 s, the upstream's status table), never applied twice. Once healed,
    the pump client's probe finds pump-2 again and Prewrites reach it again."""
    cluster, proxy, upstream = proxied
    timings: dict[str, float] = {}

    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        began = time.monotonic()
        proxy.blackhole(clients=process_group(load.process.pid))
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 100)  # on the other pumps
        timings["writes_went_on"] = time.monotonic() - began
        stored = prewrites(cluster, CUT)
        healed = time.monotonic()
        proxy.heal()
        wait_for(lambda: prewrites(cluster, CUT) > stored, f"Prewrites reaching {CUT} again", cluster)
        timings["back_in_rotation"] = time.monotonic() - healed
        after = load.progress()
        assert after is not None
        wait_for_transactions(cluster, load, after.transactions + 60)

    summary = run_load(cluster, upstream, seconds=60, fault=fault)
    log.warning("producer-pump blackhole: %s; load %s", timings, summary)
    assert_replicated(cluster, upstream)
    assert proxy.blackholed > 0  # the load's connections to pump-2 were cut


def test_drainer_to_pump_reset_storm(proxied: tuple[Cluster, TcpProxy, str]) -> None:
    cluster, proxy, upstream = proxied
    resets: list[int] = []

    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        drainer = process_group(cluster.members["drainer"].process.pid)
        storm(lambda: proxy.reset_all(clients=drainer), STORM_SECONDS, STORM_EVERY, resets)
        wait_for(lambda: (pump_entry(cluster, CUT) or {}).get("connected"), f"{CUT} pulled again", cluster)
        connects = (pump_entry(cluster, CUT) or {}).get("connects")
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 60)
        cluster.wait_caught_up(cluster.timestamp(), timeout=HANG_GUARD)  # pump-2's part merged too
        entry = pump_entry(cluster, CUT)
        assert entry is not None and entry["connects"] == connects, (connects, entry)  # the storm is over

    summary = run_load(cluster, upstream, seconds=60, fault=fault)
    log.warning("drainer-pump reset storm: %d connections reset; load %s", sum(resets), summary)
    assert sum(resets) > 0
    assert_replicated(cluster, upstream)
    entry = pump_entry(cluster, CUT)
    assert entry is not None and entry["connects"] > 1, entry  # it was cut and came back


def registry(cluster: Cluster) -> dict[str, tuple[int, bool]]:
    """Each registered pump: (state, is_alive), from the meta service."""

    async def listed() -> dict[str, tuple[int, bool]]:
        async with MetaClient(cluster.meta_addr, timeout=10.0) as meta:
            nodes = await meta.list_nodes(meta_pb2.PUMP)
            return {n.node_id: (n.state, n.is_alive) for n in nodes.nodes}

    return asyncio.run(listed())


def test_pump_to_meta_blackholed_then_healed(tmp_path: Path) -> None:
    """pump-2 cut from the meta service (local backend): its heartbeats stop, the registry
    shows it not alive after its TTL, and once healed every pump is online and alive again,
    the drainer merges all three, timestamps went on rising, and nothing is lost."""
    cluster, proxy, upstream = start_with_a_proxy(tmp_path, "meta")
    timings: dict[str, float] = {}
    stamps: list[int] = []

    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        stamps.append(cluster.timestamp())
        began = time.monotonic()
        proxy.blackhole()
        wait_for(lambda: not registry(cluster)[CUT][1], f"{CUT} not alive in the registry", cluster)
        timings["not_alive"] = time.monotonic() - began
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 60)  # on the other pumps
        stamps.append(cluster.timestamp())
        healed = time.monotonic()
        proxy.heal()
        wait_for(lambda: registry(cluster)[CUT][1], f"{CUT} alive again", cluster)
        timings["alive_again"] = time.monotonic() - healed
        stamps.append(cluster.timestamp())

    try:
        summary = run_load(cluster, upstream, seconds=60, fault=fault)
        log.warning("pump-meta blackhole: %s; load %s", timings, summary)
        assert_replicated(cluster, upstream)
        assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # the TSO never went back
        pumps = registry(cluster)
        assert set(pumps) == {"pump-1", "pump-2", "pump-3"}
        assert all(alive and state == meta_pb2.ONLINE for state, alive in pumps.values()), pumps
        status = cluster.drainer_status()
        assert status is not None
        assert {p["node_id"] for p in status["pumps"]} == set(pumps)  # the drainer agrees
        assert proxy.blackholed > 0
    finally:
        discard(cluster)
        proxy.unplug()
