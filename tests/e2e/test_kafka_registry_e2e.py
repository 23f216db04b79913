"""The Kafka path end to end with the Schema Registry (Confluent wire format) encoding:
`binlog-bridge load` (DDL during DML, against a SQLite upstream) → three pumps → a drainer with the
kafka sink and a ``mock://`` registry → the real broker → consume's apply path into a fresh SQLite
directory → `bridge.apps.diff` against the upstream: equal.

The only registry here is confluent-kafka's in-process ``mock://`` one, which another process cannot
reach; so meta, the pumps and the load are child processes as in tests/e2e/test_kafka_e2e.py, while
the drainer (``drainer.app.serve``, in a thread with its own event loop) and the consumer run in the
test process, sharing the registry through its URL.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bridge.apps.consume.apply import Applier
from bridge.apps.consume.reader import ChangeReader
from bridge.apps.consume.runner import Limits, run_apply
from bridge.apps.demo.cluster import DRAINER, Cluster
from bridge.apps.diff import diff
from bridge.kafkaclient import schema_registry_client
from drainer.app import serve
from drainer.config import DrainerConfig, load_config
from drainer.sinks.sqlite.sink import SQLiteSink
from tests.e2e.test_kafka_e2e import HANG_GUARD, kafka_spec
from tests.e2e.test_pipeline import LOAD_TABLES, run_load
from tests.support.process import discard

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


class DrainerThread:
    """``drainer.app.serve`` in a thread of this process, so that its ``mock://`` registry is the
    consumer's. :meth:`stop` sets the stop event on the drainer's loop, joins, and re-raises what
    ``serve`` raised."""

    def __init__(self, config: DrainerConfig) -> None:
        self.config = config
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="in-process-drainer", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by check() and stop()
            self.error = exc
        finally:
            self.ready.set()  # also when serve failed before it was ready

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        await serve(self.config, self._stop, ready=lambda line: self.ready.set())

    def start(self) -> None:
        self._thread.start()
        assert self.ready.wait(HANG_GUARD), f"hang guard: the drainer not ready after {HANG_GUARD:g}s"
        self.check()

    def check(self, _status: object = None) -> None:
        """Fail if ``serve`` ended (a cluster.wait_caught_up ``on_poll``: it only knows children)."""
        if not self._thread.is_alive():
            raise AssertionError(f"the in-process drainer stopped: {self.error!r}") from self.error

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(HANG_GUARD)
        assert not self._thread.is_alive(), f"hang guard: the drainer still runs after {HANG_GUARD:g}s"
        if self.error is not None:
            raise AssertionError(f"the in-process drainer failed: {self.error!r}") from self.error


@pytest.fixture
def upstream(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'upstream.db'}"


@pytest.fixture
def registry_url(unique_name: str) -> str:
    return f"mock://{unique_name}"


@pytest.fixture
def cluster(tmp_path: Path, upstream: str, kafka_bootstrap: str, unique_name: str) -> Iterator[Cluster]:
    """meta and three pumps as child processes; the cluster's drainer member is never started (its
    config, drainer.toml, is what the in-process drainer runs, on the member's ports)."""
    cluster = Cluster(kafka_spec(tmp_path, upstream, kafka_bootstrap, unique_name))
    try:
        cluster.write_configs()
        for name in ["meta", *cluster.pump_names]:
            cluster.restart(name)  # launch and wait for the ready line, as start() does
        yield cluster
    finally:
        discard(cluster)  # the never started drainer is skipped


@pytest.fixture
def drainer(cluster: Cluster, registry_url: str) -> Iterator[DrainerThread]:
    config = load_config(cluster.config_path(DRAINER), {"sink.kafka.schema-registry-url": registry_url})
    running = DrainerThread(config)
    running.start()
    try:
        yield running
    finally:
        if running.error is None:
            running.stop()  # a failure of serve is reported by the test's own stop() instead


def first_row_message(bootstrap: str, topic: str) -> Any:
    """The first row change on ``topic``, read with a plain confluent_kafka Consumer (no decoding)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-raw", "enable.auto.commit": False}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + HANG_GUARD
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            if dict(message.headers() or []).get("bridge.kind") == b"row":
                return message
    finally:
        consumer.close()
    raise AssertionError(f"hang guard: no row change on {topic} after {HANG_GUARD:g}s")


def test_load_through_the_registry_encoded_kafka_sink_replays_equal(
    cluster: Cluster,
    drainer: DrainerThread,
    upstream: str,
    kafka_bootstrap: str,
    unique_name: str,
    registry_url: str,
    tmp_path: Path,
) -> None:
    run_load(cluster, upstream, seconds=8)
    final_ts = cluster.timestamp()
    cluster.wait_caught_up(final_ts, timeout=HANG_GUARD, on_poll=drainer.check)

    # the messages really are in the Confluent wire format: 0x00, a 4-byte schema id of the registry
    topic = f"{unique_name}.main.load_accounts"
    message = first_row_message(kafka_bootstrap, topic)
    registry = schema_registry_client(registry_url)
    for part, subject in ((message.key(), f"{topic}-key"), (message.value(), f"{topic}-value")):
        assert part[:1] == b"\x00", part[:16]
        schema_id = int.from_bytes(part[1:5], "big")
        versions = registry.get_versions(subject)
        assert schema_id in {registry.get_version(subject, v).schema_id for v in versions}, subject

    target = tmp_path / "replica"
    applier = Applier(SQLiteSink({"path": str(target)}, target))
    reader = ChangeReader(kafka_bootstrap, prefix=unique_name, registry_url=registry_url, from_beginning=True)
    try:
        summary = run_apply(reader, applier, Limits(until_ts=final_ts, idle_timeout=60))
    finally:
        applier.close()
        reader.close()
    assert summary.changes > 0 and summary.ddl > len(LOAD_TABLES), summary.line()
    print(summary.line())  # for the record
    drainer.stop()  # a clean stop: serve raised nothing

    report = diff(upstream, f"sqlite://{target}")
    names = {table.name.split(".", 1)[1] for table in report.tables}
    assert names >= LOAD_TABLES, report.lines()
    assert report.equal, "\n".join(report.lines())
