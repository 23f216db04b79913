"""The meta service on three etcd members: one member partitioned away, healed, then the etcd
leader SIGKILLed, under a writer load (issue 27, item 2: pump ↔ meta on the etcd backend).

A private three-member etcd cluster (tests/support/etcd_cluster.py), each member's client and
peer traffic through a fault proxy; ``binlog-bridge meta`` on it (``etcd`` = the three client
proxies), three pumps and a drainer (sqlite sink), and ``binlog-bridge load`` as the writer. The
meta service talks to the first member (etcd-1) until a call there fails, then to the next.

1. etcd-1 is cut from its peers and its clients (a blackhole both ways, no RST). The other
   two keep a quorum; the meta service's calls to etcd-1 time out, it moves to another member
   (stepping down and taking the leadership again if a lease refresh failed), and the load goes
   on. etcd-1 is healed and must serve again (a linearizable read through it).
2. The etcd leader of that moment is SIGKILLed: the other two elect a new one, the meta service
   moves again if it talked to the dead one, and the load goes on. The killed member is started
   again on its data dir and must serve.

What is shown, besides the diff (the load's acknowledged transactions, committed upstream, are
the reference): the TSO never went backwards, neither for one caller (four callers sample it
the whole time) nor across callers (a timestamp handed out after another was returned is
greater), and every timestamp a producer used (the upstream's start_ts → commit_ts table) is
unique; after the heal the three pumps, the drainer and the registry read through each of the
three etcd members agree on the membership. Skipping the heal (BRIDGE_FAULT_SKIP_HEAL=1) fails
at "etcd-1 serving" (hang guard). Times are logged for docs/operations.md, never asserted.

CI cost: 21-31 s (three etcd members, the cluster, a load of 10-15 s), at load average 5-20 on
the shared 2-core machine (2026-11-29).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import sqlite3
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import aetcd
import pytest

from bridge.apps.demo import tomlfile
from bridge.apps.demo.cluster import Cluster, ClusterSpec, resolver_for
from bridge.apps.demo.workload import LoadProcess
from bridge.meta.client import MetaClient
from bridge.proto import meta_pb2
from tests.e2e.test_network_faults import registry
from tests.e2e.test_pipeline import assert_replicated, run_load, wait_for, wait_for_transactions
from tests.support.etcd_cluster import EtcdCluster, EtcdMember, etcd_available
from tests.support.process import discard

pytestmark = [
    pytest.mark.slow,
    pytest.mark.etcd,
    pytest.mark.timeout(420),
    pytest.mark.skipif(not etcd_available(), reason="no etcd binary"),
]
log = logging.getLogger(__name__)

PREFIX = "/bridge-netfaults"
CALLERS = 4
MOVED = "etcd: the next calls go to"  # bridge.apps.meta.etcd_store, when a member fails


@dataclass
class TsoSampler:
    """CALLERS tasks asking the meta service for timestamps until stopped: each answer with
    the monotonic times its call began and returned. Failed calls (no leader for a moment)
    are counted, not recorded."""

    meta_addr: str
    answers: list[tuple[float, float, int]] = field(default_factory=list)
    per_caller: list[list[int]] = field(default_factory=lambda: [[] for _ in range(CALLERS)])
    failures: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    async def _main(self) -> None:
        async with MetaClient(self.meta_addr, timeout=5.0) as meta:
            await asyncio.gather(*(self._caller(meta, seen) for seen in self.per_caller))

    async def _caller(self, meta: MetaClient, seen: list[int]) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                ts = await meta.get_timestamp()
            except Exception:  # any failure: no leader right now; try again
                self.failures += 1
                await asyncio.sleep(0.1)
                continue
            self.answers.append((began, time.monotonic(), ts))
            seen.append(ts)
            await asyncio.sleep(0.02)

    def check(self) -> None:
        """Per caller strictly increasing; across callers, a call that began after another
        returned got a greater timestamp (the TSO is linearizable, it never went back)."""
        for seen in self.per_caller:
            assert seen == sorted(seen) and len(set(seen)) == len(seen), "a caller's timestamps went back"
        by_end = sorted(self.answers, key=lambda a: a[1])
        ends = [a[1] for a in by_end]
        highest: list[int] = []
        for _, _, ts in by_end:
            highest.append(max(ts, highest[-1]) if highest else ts)
        for began, _, ts in self.answers:
            before = bisect.bisect_left(ends, began)  # calls that returned before this one began
            if before:
                earlier = highest[before - 1]
                assert ts > earlier, f"timestamp {ts} not above {earlier}, handed out before it was asked for"


def meta_log(cluster: Cluster) -> str:
    return cluster.log_path("meta").read_text(encoding="utf-8", errors="replace")


def upstream_timestamps(upstream: str) -> list[tuple[int, int]]:
    """(start_ts, commit_ts) of every transaction the load committed upstream."""
    path = upstream.removeprefix("sqlite://")
    with sqlite3.connect(path) as db:
        return [(int(s), int(c)) for s, c in db.execute("SELECT start_ts, commit_ts FROM bridge_txn_status")]


def etcd_registry(member: EtcdMember) -> dict[str, str]:
    """The node records under PREFIX read through ``member``: node id → state (linearizable)."""

    async def main() -> dict[str, str]:
        async with aetcd.Client(host="127.0.0.1", port=member.client_port, timeout=5) as client:
            out: dict[str, str] = {}
            for kind in ("pumps", "drainers"):
                result = await client.get_prefix(f"{PREFIX}/{kind}/".encode())
                for kv in result.kvs:
                    out[bytes(kv.key).decode()] = str(json.loads(bytes(kv.value))["state"])
            return out

    return asyncio.run(main())


def start_on_etcd(tmp_path: Path, etcd: EtcdCluster, upstream: str) -> Cluster:
    spec = ClusterSpec(
        tmp_path / "cluster",
        pumps=3,
        resolver=resolver_for(upstream),
        pump_settings={"max-txn-timeout": "20s"},
    )
    cluster = Cluster(spec)
    cluster.write_configs()
    path = cluster.config_path("meta")
    config = tomllib.loads(path.read_text(encoding="utf-8"))
    config.update({"etcd": etcd.client_urls, "etcd-prefix": PREFIX, "advertise-addr": config["addr"]})
    path.write_text(tomlfile.dumps(config, "meta on the three-member etcd of the test"), encoding="utf-8")
    try:
        cluster.start()
    except BaseException:
        discard(cluster)
        raise
    return cluster


def test_etcd_member_partitioned_then_leader_killed(tmp_path: Path) -> None:
    etcd = EtcdCluster(tmp_path / "etcd")
    upstream = f"sqlite://{tmp_path / 'upstream.db'}"
    timings: dict[str, float | str] = {}
    cluster: Cluster | None = None
    try:
        etcd.start()
        cluster = start_on_etcd(tmp_path, etcd, upstream)
        sampler = TsoSampler(cluster.meta_addr)

        def goes_on(cluster: Cluster, load: LoadProcess, more: int) -> None:
            before = load.progress()
            assert before is not None
            wait_for_transactions(cluster, load, before.transactions + more)

        def fault(cluster: Cluster, load: LoadProcess) -> None:
            wait_for_transactions(cluster, load, 60)
            sampler.start()
            cut = etcd.members[0]  # the member the meta service talks to first
            timings["leader_before"] = etcd.leader().name
            began = time.monotonic()
            etcd.partition(cut)
            wait_for(lambda: MOVED in meta_log(cluster), "the meta service moving to another member", cluster)
            timings["meta_moved"] = time.monotonic() - began
            goes_on(cluster, load, 60)
            timings["load_went_on_after_partition"] = time.monotonic() - began
            healed = time.monotonic()
            etcd.heal()
            etcd.wait_healthy(cut, timeout=120)
            timings["partitioned_member_serving"] = time.monotonic() - healed
            goes_on(cluster, load, 30)
            leader = etcd.leader()
            timings["killed"] = leader.name
            killed = time.monotonic()
            etcd.kill(leader)
            goes_on(cluster, load, 60)
            timings["load_went_on_after_kill"] = time.monotonic() - killed
            etcd.launch(leader)
            etcd.wait_healthy(leader, timeout=120)
            goes_on(cluster, load, 30)

        try:
            summary = run_load(cluster, upstream, seconds=150, fault=fault)
        finally:
            sampler.stop()
        log.warning(
            "etcd partition, leader kill: %s; load %s; TSO calls failed: %d",
            timings,
            summary,
            sampler.failures,
        )
        assert_replicated(cluster, upstream)

        sampler.check()
        assert len(sampler.answers) > 100, len(sampler.answers)
        used = upstream_timestamps(upstream)
        assert all(commit > start for start, commit in used)
        stamps = [ts for pair in used for ts in pair]
        assert len(stamps) == len(set(stamps)), "a timestamp was handed out twice"

        pumps = registry(cluster)
        assert set(pumps) == {"pump-1", "pump-2", "pump-3"}
        assert all(alive and state == meta_pb2.ONLINE for state, alive in pumps.values()), pumps
        for name in cluster.pump_names:
            status = cluster.member_status(name)
            assert status is not None and status["state"] == "online", (name, status)
        drainer = cluster.drainer_status()
        assert drainer is not None and {p["node_id"] for p in drainer["pumps"]} == set(pumps)
        views = [etcd_registry(m) for m in etcd.members]  # each member's copy of the registry
        assert views[0] and all(view == views[0] for view in views), views
        assert etcd.members[0].client_proxy.blackholed > 0  # the meta service's link to etcd-1 was cut
    finally:
        if cluster is not None:
            discard(cluster)
        etcd.close()
