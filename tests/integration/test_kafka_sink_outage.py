"""The kafka sink when the broker is unreachable: retriable errors, no position past unacknowledged events,
and recovery through the drainer's SinkDriver once a broker answers again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.driver import SinkDriver
from bridge.sink.errors import SinkUnavailable
from bridge.sink.events import Event
from drainer.sinks.kafka.sink import KafkaSink
from tests.support.binlog_events import EventStream, table_schema
from tests.support.kafka_messages import headers
from tests.support.process import ChildProcess, free_port, wait_until
from tests.support.tansu import tansu_binary

pytestmark = pytest.mark.kafka

T = row_pb2.ColumnType


class Broker:
    """A Tansu broker of this test's own on ``port`` (in memory: a restart loses every topic)."""

    def __init__(self, port: int, log_dir: Path) -> None:
        self.port = port
        self.log_dir = log_dir
        self.process: ChildProcess | None = None
        self.starts = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        self.starts += 1
        self.process = ChildProcess(
            [
                str(tansu_binary()),
                "broker",
                "--storage-engine=memory://tansu/",
                f"--listener-url={url}",
                f"--advertised-listener-url={url}",
            ],
            self.log_dir / f"tansu-{self.starts}.log",
        )
        wait_until(self._answers, timeout=20, what=f"the broker on port {self.port}")

    def _answers(self) -> bool:
        import socket

        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    own = Broker(free_port(), tmp_path)
    own.start()
    yield own
    own.kill()


def txns(stream: EventStream, first: int, count: int) -> list[Event]:
    return [stream.inserts("shop.k", [(i, f"v{i}")]) for i in range(first, first + count)]


def test_nothing_listening_is_a_retriable_error_at_open(unique_name: str) -> None:
    sink = KafkaSink(
        {"bootstrap-servers": f"127.0.0.1:{free_port()}", "prefix": unique_name, "delivery-timeout": "2s"},
        Path("/nonexistent"),
    )
    try:
        with pytest.raises(SinkUnavailable, match=r"opening: creating topic") as raised:
            sink.open(SinkContext())
        assert raised.value.retriable
    finally:
        sink.close()


@pytest.mark.slow
def test_an_outage_fails_flushes_until_the_broker_is_back_and_loses_nothing(
    broker: Broker, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    stream = EventStream()
    create = stream.create(table_schema("shop", "k", [("id", T.BIGINT), ("v", T.VARCHAR)], key=["id"]))
    first, second = txns(stream, 1, 5), txns(stream, 6, 5)
    sink = KafkaSink(
        {"bootstrap-servers": broker.bootstrap, "prefix": unique_name, "delivery-timeout": "2s"},
        Path("/nonexistent"),
    )
    sink.open(SinkContext())
    try:
        sink.write([create, *first])
        flushed = sink.flush()
        assert flushed == first[-1].commit_ts

        broker.kill()
        caplog.set_level(logging.WARNING, logger="drainer.sinks.kafka.sink")
        sink.write(second)  # queued in the producer
        with pytest.raises(SinkUnavailable, match=r"delivery .*failed: .*written again") as raised:
            sink.flush()
        assert raised.value.retriable
        assert f"the checkpoint stays at commit_ts {flushed}" in str(raised.value)
        assert any("kafka sink" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)

        # Recovery as the drainer does it: its SinkDriver writes the unflushed events again and flushes,
        # retrying both, until the broker (restarted, empty: it keeps topics in memory) answers.
        driver = SinkDriver(sink, threading.Event(), retry_initial=0.2, retry_max=1.0)
        restart = threading.Timer(1.0, broker.start)
        restart.start()
        try:
            driver.write(second)
            position = driver.flush()
        finally:
            restart.join()
        assert position == second[-1].commit_ts
    finally:
        sink.close()

    # Every change of the second batch is in the restarted broker (duplicates allowed, none missing).
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": unique_name, "enable.auto.commit": False}
    )
    topic = f"{unique_name}.shop.k"
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        wanted = {str(e.commit_ts) for e in second}
        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while not wanted <= seen and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None and message.value() is not None:
                seen.add(headers(message)["bridge.commit-ts"])
        assert wanted <= seen
    finally:
        consumer.close()


def topic_commit_ts(bootstrap: str, topic: str, group: str, wanted: set[str]) -> set[str]:
    """The ``bridge.commit-ts`` headers of the row messages in ``topic``, read until ``wanted`` are
    all seen (or 30 s pass)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    seen: set[str] = set()
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + 30
        while not wanted <= seen and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None and message.value() is not None:
                seen.add(headers(message)["bridge.commit-ts"])
    finally:
        consumer.close()
    return seen


def test_a_producer_that_failed_fatally_is_replaced_at_the_next_write_and_nothing_is_lost(
    kafka_bootstrap: str, unique_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    stream = EventStream()
    create = stream.create(table_schema("shop", "k", [("id", T.BIGINT), ("v", T.VARCHAR)], key=["id"]))
    first, second = txns(stream, 1, 5), txns(stream, 6, 5)
    sink = KafkaSink({"bootstrap-servers": kafka_bootstrap, "prefix": unique_name}, Path("/nonexistent"))
    driver = SinkDriver(sink, threading.Event(), retry_initial=0.05, retry_max=0.2)
    driver.open(SinkContext())
    try:
        driver.write([create, *first])
        assert driver.flush() == first[-1].commit_ts
        dead = sink.producer
        # librdkafka reports a fatal error (an idempotent producer fenced or out of sequence) through
        # its error callback; such a producer refuses every later produce() with _FATAL
        sink.link.on_error(KafkaError(KafkaError._FATAL, "test: producer fenced", fatal=True))
        caplog.set_level(logging.ERROR, logger="drainer.sinks.kafka.sink")
        driver.write(second)  # a new producer takes over instead of the write failing forever
        assert sink.producer is not dead
        assert "the producer failed fatally" in caplog.text
        # the first flush fails (what the old producer held is gone); the driver writes the
        # unflushed events again and the next flush acknowledges them
        assert driver.flush() == second[-1].commit_ts
        assert driver.retries == 1, driver.last_error
    finally:
        sink.close()
    wanted = {str(e.commit_ts) for e in [*first, *second]}
    assert wanted <= topic_commit_ts(kafka_bootstrap, f"{unique_name}.shop.k", unique_name, wanted)
