"""Network faults between the drainer and its downstream, under a writer load (issue 27, item 2).

Each sink reaches its service through a fault proxy (tests/support/tcp_proxy.py); only the
drainer uses that proxy, so a fault cuts exactly the drainer-downstream link:

- **MySQL** (a private MariaDB, the sink and its checkpoint): 300 ms ± 50 ms of latency on every
  chunk for a while, then a blackhole of established and new connections (no RST). The sink's
  and the checkpoint's ``read-timeout`` / ``write-timeout`` are 3 s, so the drainer must notice
  through them, not hang, and say so naming the timeout that applied (``sink.sink_last_error``
  in ``/status``: "no answer within read-timeout 3s", ``bridge_drainer_errors_total{where="sink"}``).
- **Redis** (the shared server; ``timeout`` 2 s): the same blackhole.
- **Kafka** (a private Tansu advertising the proxy's address, so bootstrap and broker connections
  both go through it; ``socket.timeout.ms`` 6 s, ``delivery-timeout`` 15 s: shorter ones time
  requests out on a healthy but loaded machine): the same blackhole; then
  ``consume --apply`` replays the topics through the proxy while, for its first 4 s, every
  connection is reset every 300 ms.

The windows last until the drainer has reported the fault and the load has gone on past it:
the assertions do not depend on longer ones. Each test ends with the acknowledged transactions
as the reference: the checkpoint passes a fresh timestamp, and ``bridge.apps.diff`` (MySQL,
the Kafka replay) or the exact set of invalidated keys (Redis) matches the upstream. Without
the heal the drainer never catches up and the test fails at its hang guard. Times logged are
for docs/operations.md, never asserted.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from bridge.apps.demo.cluster import Cluster
from bridge.apps.demo.workload import LoadProcess
from tests.e2e import test_mysql_sink_e2e as mysql_e2e
from tests.e2e import test_redis_e2e as redis_e2e
from tests.e2e.test_kafka_e2e import kafka_spec, replay_and_diff
from tests.e2e.test_mysql_sink_e2e import pipeline as pipeline  # a fixture used here
from tests.e2e.test_pipeline import run_load, wait_for, wait_for_transactions
from tests.support.faults import storm
from tests.support.process import discard, wait_until
from tests.support.tansu import PrivateTansu
from tests.support.tcp_proxy import TcpProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
log = logging.getLogger(__name__)

Fault = Callable[[Cluster, LoadProcess], None]
STORM_EVERY = 0.3
STORM_SECONDS = 4.0


def sink_errors(cluster: Cluster) -> float:
    """``bridge_drainer_errors_total{where="sink"}`` from the drainer's /metrics."""
    port = cluster.members["drainer"].status_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith('bridge_drainer_errors_total{where="sink"}'):
                return float(line.split()[-1])
    return 0.0


def sink_error_shown(cluster: Cluster, before: float, naming: str = "") -> bool:
    """``/status`` shows a sink error (containing ``naming``) and the error metric rose."""
    status = cluster.drainer_status() or {}
    shown = str((status.get("sink") or {}).get("sink_last_error") or "")
    return bool(shown) and naming in shown and sink_errors(cluster) > before


def checkpoint_ts(cluster: Cluster) -> int:
    return int((cluster.drainer_status() or {}).get("checkpoint_ts") or 0)


def cut_then_heal(
    proxy: TcpProxy, timings: dict[str, float], latency: bool = False, naming: str = ""
) -> Fault:
    """Latency first when ``latency``; then a blackhole until the drainer reports a sink error
    (one that contains ``naming``) and the load has gone on; then the heal, timed until the
    checkpoint passes the heal."""

    def fault(cluster: Cluster, load: LoadProcess) -> None:
        wait_for_transactions(cluster, load, 60)
        if latency:
            proxy.latency(0.25, jitter=0.1)
            slow_from = checkpoint_ts(cluster)
            wait_for(
                lambda: checkpoint_ts(cluster) > slow_from, "the checkpoint moving under latency", cluster
            )
            before = load.progress()
            assert before is not None
            wait_for_transactions(cluster, load, before.transactions + 40)
            proxy.heal()
        errors_before = sink_errors(cluster)
        began = time.monotonic()
        proxy.blackhole()
        wait_for(lambda: sink_error_shown(cluster, errors_before, naming), f"sink error {naming!r}", cluster)
        timings["detected"] = time.monotonic() - began
        before = load.progress()
        assert before is not None
        wait_for_transactions(cluster, load, before.transactions + 60)
        healed = time.monotonic()
        proxy.heal()
        target = cluster.timestamp()
        wait_for(lambda: checkpoint_ts(cluster) >= target, "the checkpoint past the heal", cluster)
        timings["recovered"] = time.monotonic() - healed

    return fault


# ---------------------------------------------------------------- MySQL


@pytest.mark.mysql
def test_drainer_to_mysql_latency_then_blackhole(pipeline: mysql_e2e.Pipeline) -> None:
    pipe = pipeline
    timings: dict[str, float] = {}
    with TcpProxy(("127.0.0.1", pipe.downstream.port)) as proxy:
        timeouts = {"read-timeout": "3s", "write-timeout": "3s"}
        pipe.checkpoint_options.update(timeouts)
        pipe.start(dsn=f"mysql://root@127.0.0.1:{proxy.port}/?connect_timeout=2", **timeouts)
        fault = cut_then_heal(proxy, timings, latency=True, naming="no answer within read-timeout 3s")
        summary = mysql_e2e.run_load(pipe, seconds=120, fault=fault)
        log.warning("drainer-mysql latency then blackhole: %s; load %s", timings, summary)
        mysql_e2e.assert_replicated(pipe)


# ---------------------------------------------------------------- Redis


def test_drainer_to_redis_blackhole(tmp_path: Path, redis_url: str, unique_name: str) -> None:
    upstream = f"sqlite://{tmp_path / 'upstream.db'}"
    real = redis.Redis.from_url(redis_url)
    host, port = (
        real.connection_pool.connection_kwargs["host"],
        real.connection_pool.connection_kwargs["port"],
    )
    timings: dict[str, float] = {}
    with TcpProxy((host, int(port))) as proxy:
        settings = {"url": f"redis://127.0.0.1:{proxy.port}/0", "timeout": "2s", "connect-timeout": "1s"}
        pipe = redis_e2e.RedisPipeline(tmp_path, upstream, unique_name, settings, real)
        try:
            pipe.start()
            pipe.seed()
            redis_e2e.run_main_load(pipe, seconds=120, fault=cut_then_heal(proxy, timings))
            log.warning("drainer-redis blackhole: %s", timings)
            pipe.assert_exact()
        finally:
            pipe.cleanup()


# ---------------------------------------------------------------- Kafka


@pytest.fixture
def proxied_broker(tmp_path: Path) -> Iterator[tuple[PrivateTansu, TcpProxy]]:
    proxy = TcpProxy(("127.0.0.1", 1))
    broker = PrivateTansu(tmp_path, advertised_port=proxy.port, memory=True)  # never restarted here
    proxy.target = ("127.0.0.1", broker.port)
    proxy.plug()
    try:
        broker.start()
        yield broker, proxy
    finally:
        broker.close()
        proxy.unplug()


def reset_storm(proxy: TcpProxy, counts: list[int]) -> None:
    """Once a new client connects (consume), RST every connection every STORM_EVERY seconds
    for STORM_SECONDS; the client must get through afterwards."""
    accepted = proxy.accepted
    wait_until(lambda: proxy.accepted > accepted, timeout=120, what="consume connecting", interval=0.01)
    storm(proxy.reset_all, STORM_SECONDS, STORM_EVERY, counts)


def test_drainer_to_kafka_blackhole_and_consume_under_a_reset_storm(
    tmp_path: Path, proxied_broker: tuple[PrivateTansu, TcpProxy], unique_name: str
) -> None:
    _, proxy = proxied_broker
    upstream = f"sqlite://{tmp_path / 'upstream.db'}"
    spec = kafka_spec(tmp_path, upstream, proxy.addr, unique_name)
    kafka: dict[str, Any] = spec.drainer_settings["sink"]["kafka"]
    kafka.update({"delivery-timeout": "15s", "producer": {"socket.timeout.ms": 6000}})
    cluster = Cluster(spec)
    timings: dict[str, float] = {}
    try:
        cluster.start()
        summary = run_load(cluster, upstream, seconds=120, fault=cut_then_heal(proxy, timings))
        log.warning("drainer-kafka blackhole: %s; load %s", timings, summary)
        cluster.wait_caught_up(cluster.timestamp(), timeout=180)
        counts: list[int] = []
        storm = threading.Thread(target=reset_storm, args=(proxy, counts), daemon=True)
        storm.start()
        replay_and_diff(cluster, upstream, proxy.addr, unique_name, tmp_path / "replica")
        storm.join(timeout=60)
        log.warning("consume --apply under a reset storm: %d connections reset", sum(counts))
        assert sum(counts) > 0
    finally:
        discard(cluster)
