"""The pump client against real processes: `binlog-bridge meta` and three
stand-in pumps (tests/support/standin_pump.py, a test double that records
each binlog it receives in a log file)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from bridge.errors import MetaUnavailable, NoPumpAvailable, PumpRejected
from bridge.meta.client import MetaClient
from bridge.proto import binlog_pb2
from bridge.pumpclient import AsyncPumpsClient, PumpClientConfig, PumpsClient
from bridge.pumpclient.config import Strategy
from tests.support.process import ChildProcess, bridge_cli, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
PUMP_IDS = ("pump-1", "pump-2", "pump-3")

pytestmark = pytest.mark.timeout(180)


@dataclass
class Cluster:
    """One meta service and stand-in pumps, each a child process."""

    workdir: Path
    meta_addr: str = ""
    meta: ChildProcess | None = None
    pumps: dict[str, ChildProcess] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)

    def start_meta(self) -> None:
        self.meta_addr = f"127.0.0.1:{free_port()}"
        argv = bridge_cli("meta", "--data-dir", str(self.workdir / "meta"), "--addr", self.meta_addr)
        self.meta = ChildProcess(argv, self.workdir / "meta.out")
        self.meta.wait_for_line("meta ready")

    def start_pumps(self, *node_ids: str) -> None:
        started = {}
        for node_id in node_ids:
            port = self.ports.setdefault(node_id, free_port())
            argv = [
                sys.executable,
                "-m",
                "tests.support.standin_pump",
                "--meta",
                self.meta_addr,
                "--node-id",
                node_id,
                "--addr",
                f"127.0.0.1:{port}",
                "--log",
                str(self.log_path(node_id)),
            ]
            env = {"PYTHONPATH": str(ROOT)}
            started[node_id] = ChildProcess(argv, self.workdir / f"{node_id}.out", env=env)
        for node_id, child in started.items():
            child.wait_for_line("standin pump ready")
            self.pumps[node_id] = child

    def kill(self, node_id: str) -> None:
        self.pumps[node_id].kill()

    def log_path(self, node_id: str) -> Path:
        return self.workdir / f"{node_id}.binlogs"

    def received(self) -> dict[str, list[tuple[str, int, int]]]:
        """Every pump's recorded binlogs: (tp, start_ts, commit_ts)."""
        out: dict[str, list[tuple[str, int, int]]] = {}
        for node_id in self.ports:
            path = self.log_path(node_id)
            lines = path.read_text().splitlines() if path.exists() else []
            out[node_id] = [(tp, int(s), int(c)) for tp, s, c in (line.split() for line in lines)]
        return out

    def stop(self) -> None:
        for child in [*self.pumps.values(), self.meta]:
            if child is not None:
                child.kill()


def start_cluster(workdir: Path) -> Cluster:
    cluster = Cluster(workdir)
    try:
        cluster.start_meta()
        cluster.start_pumps(*PUMP_IDS)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """For tests that kill nothing."""
    cluster = start_cluster(tmp_path_factory.mktemp("pumps"))
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """For tests that kill processes."""
    cluster = start_cluster(tmp_path)
    yield cluster
    cluster.stop()


def metric_sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return value or 0.0


def timestamps(meta_addr: str, count: int) -> int:
    async def allocate() -> int:
        async with MetaClient(meta_addr) as meta:
            return await meta.get_timestamps(count)

    return asyncio.run(allocate())


def prewrite(start_ts: int) -> binlog_pb2.Binlog:
    mutation = binlog_pb2.TableMutation(
        table_id=7, inserted_rows=[b"r%d" % start_ts], sequence=[binlog_pb2.Insert]
    )
    value = binlog_pb2.PrewriteValue(schema_version=1, mutations=[mutation]).SerializeToString()
    return binlog_pb2.Binlog(
        tp=binlog_pb2.Prewrite, start_ts=start_ts, prewrite_key=b"k", prewrite_value=value
    )


def commit(start_ts: int) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=start_ts + 1)


def routing(cluster: Cluster, start_ts_values: set[int]) -> tuple[dict[int, set[str]], dict[int, set[str]]]:
    """For the given transactions: start_ts -> pumps holding its Prewrite, and its Commit."""
    prewrites: dict[int, set[str]] = defaultdict(set)
    commits: dict[int, set[str]] = defaultdict(set)
    for node_id, binlogs in cluster.received().items():
        for tp, start_ts, _ in binlogs:
            if start_ts in start_ts_values:
                (prewrites if tp == "Prewrite" else commits)[start_ts].add(node_id)
    return prewrites, commits


def assert_commits_follow_prewrites(cluster: Cluster, committed: set[int]) -> dict[int, set[str]]:
    prewrites, commits = routing(cluster, committed)
    assert set(commits) == committed, f"{len(committed - set(commits))} Commits reached no pump"
    strays = {ts: (commits[ts], prewrites.get(ts)) for ts in committed if not commits[ts] <= prewrites[ts]}
    assert not strays, f"Commits on a pump without their Prewrite: {list(strays.items())[:5]}"
    return prewrites


async def run_transactions(client: AsyncPumpsClient, first_ts: int, count: int, workers: int) -> None:
    """``count`` transactions (Prewrite then Commit) on ``workers`` concurrent tasks.

    Timestamps step by 2 so that each commit_ts (start_ts + 1) is unique."""
    numbers = iter(range(count))

    async def worker() -> None:
        for n in numbers:
            start_ts = first_ts + 2 * n
            await client.write_binlog(prewrite(start_ts))
            await client.write_binlog(commit(start_ts))

    await asyncio.gather(*(worker() for _ in range(workers)))


@pytest.mark.parametrize("strategy", ["range", "hash"])
def test_prewrites_spread_over_three_pumps_and_commits_follow(
    shared_cluster: Cluster, strategy: Strategy
) -> None:
    count = 30_000
    first = timestamps(shared_cluster.meta_addr, 2 * count)

    async def scenario() -> float:
        config = PumpClientConfig(strategy=strategy)
        async with AsyncPumpsClient(shared_cluster.meta_addr, config) as client:
            assert client.available == list(PUMP_IDS)
            started = time.perf_counter()
            await run_transactions(client, first, count, workers=400)
            return time.perf_counter() - started

    batches_before = metric_sample("bridge_pump_client_batch_size_count")
    elapsed = asyncio.run(scenario())
    batches = metric_sample("bridge_pump_client_batch_size_count") - batches_before
    # Concurrent transactions' binlogs share calls.
    assert batches < count, f"{batches} WriteBinlogs calls for {2 * count} binlogs"
    logging.getLogger(__name__).info(
        "%s: %d binlogs in %.2fs = %.0f binlogs/s", strategy, 2 * count, elapsed, 2 * count / elapsed
    )
    committed = {first + 2 * n for n in range(count)}
    prewrites = assert_commits_follow_prewrites(shared_cluster, committed)
    assert all(len(pumps) == 1 for pumps in prewrites.values()), "a Prewrite reached two pumps"
    per_pump = Counter(next(iter(pumps)) for pumps in prewrites.values())
    assert set(per_pump) == set(PUMP_IDS)
    for node_id, n in per_pump.items():
        assert abs(n - count / 3) <= count / 3 * 0.10, f"{node_id} took {n} of {count}: {per_pump}"


def test_sync_client_from_several_threads(shared_cluster: Cluster) -> None:
    threads, per_thread = 8, 150
    first = timestamps(shared_cluster.meta_addr, 2 * threads * per_thread)
    errors: list[BaseException] = []
    with PumpsClient(shared_cluster.meta_addr, PumpClientConfig(strategy="hash")) as client:

        def producer(t: int) -> None:
            try:
                for n in range(per_thread):
                    start_ts = first + 2 * (t * per_thread + n)
                    client.write_binlog(prewrite(start_ts))
                    client.write_binlog(commit(start_ts))
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=producer, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert errors == []
    committed = {first + 2 * n for n in range(threads * per_thread)}
    prewrites = assert_commits_follow_prewrites(shared_cluster, committed)
    assert {p for pumps in prewrites.values() for p in pumps} == set(PUMP_IDS)


def test_a_binlog_the_pump_refuses_is_raised_and_not_retried(shared_cluster: Cluster) -> None:
    def total(result: str) -> float:
        return sum(
            metric_sample("bridge_pump_client_writes_total", pump=p, type="prewrite", result=result)
            for p in PUMP_IDS
        )

    def failed_and_rejected() -> tuple[float, float]:
        return total("failed"), total("rejected")

    before = failed_and_rejected()
    with PumpsClient(shared_cluster.meta_addr) as client, pytest.raises(PumpRejected) as info:
        client.write_binlog(prewrite(-42))
    assert "negative start_ts -42" in str(info.value)
    assert failed_and_rejected() == (before[0], before[1] + 1)


def test_wrong_cluster_id_is_refused_by_every_pump(shared_cluster: Cluster) -> None:
    config = PumpClientConfig(cluster_id=987654321, write_timeout=1.0)
    with PumpsClient(shared_cluster.meta_addr, config) as client:
        with pytest.raises(NoPumpAvailable) as info:
            client.write_binlog(prewrite(timestamps(shared_cluster.meta_addr, 1)))
        # Each pump refused max-errors (3) calls in a row: all are set aside, and probes
        # carrying the same wrong id keep them there.
        assert client.unavailable == list(PUMP_IDS)
        assert client.available == []
    message = str(info.value)
    assert "cluster id mismatch" in message
    for node_id in PUMP_IDS:
        assert f"{node_id} (127.0.0.1:{shared_cluster.ports[node_id]}): " in message


def test_documented_example_runs(shared_cluster: Cluster) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "docs" / "examples" / "pump_client_example.py"),
            "--meta",
            shared_cluster.meta_addr,
            "--txns",
            "50",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    assert "available pumps: pump-1, pump-2, pump-3" in result.stdout
    assert "wrote 50 transactions (100 binlogs)" in result.stdout


class Producer:
    """Threads writing transactions through one PumpsClient until stopped.

    Transaction n has start_ts ``first_ts + 2 * n``; n grows in start order."""

    def __init__(self, client: PumpsClient, first_ts: int, threads: int) -> None:
        self._client = client
        self._first = first_ts
        self._lock = threading.Lock()
        self._next = 0
        self._stop = threading.Event()
        self.errors: list[BaseException] = []
        self.committed: list[int] = []
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]
        for t in self._threads:
            t.start()

    def next_start_ts(self) -> int:
        """The start_ts of the next transaction to begin."""
        with self._lock:
            return self._first + 2 * self._next

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                start_ts = self._first + 2 * self._next
                self._next += 1
            try:
                self._client.write_binlog(prewrite(start_ts))
                self._client.write_binlog(commit(start_ts))
            except BaseException as exc:
                self.errors.append(exc)
                return
            self.committed.append(start_ts)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


def test_killed_pump_is_bypassed_then_probed_back_into_rotation(cluster: Cluster) -> None:
    first = timestamps(cluster.meta_addr, 200_000)
    config = PumpClientConfig(strategy="range", write_timeout=3.0, rpc_timeout=1.0, probe_interval=0.2)
    with PumpsClient(cluster.meta_addr, config) as client:
        producer = Producer(client, first, threads=6)
        wait_until(lambda: len(producer.committed) >= 1_000, what="1,000 transactions before the kill")
        cluster.kill("pump-2")
        wait_until(lambda: "pump-2" not in client.available, what="pump-2 leaving the available list")
        boundary = producer.next_start_ts()
        wait_until(
            lambda: sum(ts >= boundary for ts in producer.committed) >= 1_000, what="1,000 transactions after"
        )
        producer.stop()
        assert producer.errors == []
        later = {ts for ts in producer.committed if ts >= boundary}

        cluster.start_pumps("pump-2")
        wait_until(lambda: "pump-2" in client.available, what="pump-2 back in rotation")
        back = timestamps(cluster.meta_addr, 600)
        for n in range(300):
            client.write_binlog(prewrite(back + 2 * n))
            client.write_binlog(commit(back + 2 * n))

    prewrites, _ = routing(cluster, later)
    assert set(prewrites) == later
    assert {p for pumps in prewrites.values() for p in pumps} == {"pump-1", "pump-3"}
    returned = {back + 2 * n for n in range(300)}
    prewrites = assert_commits_follow_prewrites(cluster, returned)
    assert Counter(p for pumps in prewrites.values() for p in pumps)["pump-2"] >= 90


def test_all_pumps_down_raises_a_clear_error(cluster: Cluster) -> None:
    config = PumpClientConfig(write_timeout=2.0, rpc_timeout=1.0)
    first = timestamps(cluster.meta_addr, 2)
    unsent_before = metric_sample("bridge_pump_client_commit_unsent_total")
    with PumpsClient(cluster.meta_addr, config) as client:
        client.write_binlog(prewrite(first))
        for node_id in PUMP_IDS:
            cluster.kill(node_id)
        # The upstream transaction committed: losing its Commit is not the caller's error.
        client.write_binlog(commit(first))
        with pytest.raises(NoPumpAvailable) as info:
            client.write_binlog(prewrite(first + 1))
    assert metric_sample("bridge_pump_client_commit_unsent_total") == unsent_before + 1
    message = str(info.value)
    assert f"no pump took the prewrite binlog of start_ts {first + 1} within write-timeout 2s" in message
    for node_id in PUMP_IDS:
        assert f"{node_id} (127.0.0.1:{cluster.ports[node_id]}): UNAVAILABLE" in message


def test_meta_outage_keeps_the_last_known_pumps(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    first = timestamps(cluster.meta_addr, 2_000)
    caplog.set_level(logging.WARNING, logger="bridge.pumpclient")
    # meta-timeout: how long the registry's request retries before the outage is logged
    with PumpsClient(cluster.meta_addr, PumpClientConfig(strategy="range", meta_timeout=3.0)) as client:
        assert cluster.meta is not None
        cluster.meta.kill()
        wait_until(
            lambda: "pump registry unreachable" in caplog.text, what="the registry outage being noticed"
        )
        for n in range(500):
            client.write_binlog(prewrite(first + 2 * n))
            client.write_binlog(commit(first + 2 * n))
        assert client.available == list(PUMP_IDS)
    prewrites = assert_commits_follow_prewrites(cluster, {first + 2 * n for n in range(500)})
    assert {p for pumps in prewrites.values() for p in pumps} == set(PUMP_IDS)


def test_start_without_a_meta_service_fails_clearly_and_cleans_up() -> None:
    addr = f"127.0.0.1:{free_port()}"
    threads_before = set(threading.enumerate())
    client = PumpsClient(addr, PumpClientConfig(meta_timeout=2.0))
    with pytest.raises(MetaUnavailable, match=rf"within 2s \(tried {addr}\)"):
        client.start()
    # Compared by identity, not by count: a thread of an earlier test may end meanwhile.
    leaked = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    assert leaked == []
    with pytest.raises(RuntimeError, match="closed"):
        client.write_binlog(prewrite(1))
