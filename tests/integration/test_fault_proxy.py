"""The fault proxy of tests/support/tcp_proxy.py: healthy, MySQL, Redis, gRPC and Kafka traffic
passes through it unchanged; each fault does what the network fault scenarios rely on.

The services are the real ones (the shared MariaDB and Redis, a meta service child, a private
Tansu broker that advertises the proxy's address so every client connection goes through it).
Timeouts in the clients are what a fault must trip; none is an assertion on speed.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from redis.backoff import NoBackoff
from redis.retry import Retry

from bridge import mysql
from bridge.dsn import parse_dsn
from bridge.meta.client import MetaClient
from tests.support.process import wait_until
from tests.support.pump_server import start_meta
from tests.support.tansu import PrivateTansu
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.timeout(120)

DSN = parse_dsn(os.environ.get("BRIDGE_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/"))
REDIS = ("127.0.0.1", int(os.environ.get("BRIDGE_TEST_REDIS_PORT", "6379")))


def redis_via(proxy: TcpProxy, timeout: float = 2.0) -> redis.Redis:
    """A client that gives up after ``timeout`` and does not retry (redis-py 8 retries three times)."""
    return redis.Redis(
        host="127.0.0.1",
        port=proxy.port,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
    )


@pytest.mark.mysql
def test_mysql_passes_unchanged() -> None:
    with TcpProxy((DSN.host, DSN.port)) as proxy:
        conn = mysql.connect(parse_dsn(f"mysql://{DSN.user}@127.0.0.1:{proxy.port}/"), database=None)
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT REPEAT('x', 200000), 42")
                text, number = cursor.fetchone()
        finally:
            conn.close()
    assert (len(text), number) == (200000, 42)


@pytest.mark.redis
def test_redis_passes_unchanged_and_a_blackhole_trips_the_read_timeout(unique_name: str) -> None:
    value = os.urandom(300000)
    with TcpProxy(REDIS) as proxy:
        client = redis_via(proxy, timeout=0.5)
        client.set(unique_name, value)
        assert client.get(unique_name) == value
        proxy.blackhole()
        with pytest.raises(redis.exceptions.TimeoutError):
            client.get(unique_name)
        with pytest.raises(redis.exceptions.TimeoutError):  # new connections are swallowed too
            redis_via(proxy, timeout=0.5).ping()
        proxy.heal()
        assert client.get(unique_name) == value  # redis-py reconnects after the reset
        client.delete(unique_name)


@pytest.mark.redis
def test_latency_throttle_drop_new_and_reset_all() -> None:
    with TcpProxy(REDIS) as proxy:
        held = redis_via(proxy)
        held.ping()
        proxy.latency(0.6, jitter=0.2)
        with pytest.raises(redis.exceptions.TimeoutError):
            redis_via(proxy, timeout=0.3).ping()  # the reply comes, but after the client gave up
        assert held.ping()  # slow, in order
        proxy.heal()
        proxy.throttle(20000)
        assert len(held.echo(b"y" * 30000)) == 30000
        proxy.heal()
        proxy.drop_new()
        with pytest.raises(redis.exceptions.ConnectionError):
            redis_via(proxy).ping()
        assert held.ping()  # established connections go on
        proxy.heal()
        raw = socket.create_connection(("127.0.0.1", proxy.port))
        raw.sendall(b"PING\r\n")
        assert raw.recv(100) == b"+PONG\r\n"
        assert proxy.reset_all() >= 2
        with pytest.raises(ConnectionResetError):
            raw.recv(100)
        raw.close()
        assert redis_via(proxy).ping()


@pytest.mark.redis
def test_a_fault_scoped_to_one_process_leaves_the_others_alone(tmp_path: Path) -> None:
    with TcpProxy(REDIS) as proxy:
        mine = redis_via(proxy, timeout=1.0)
        mine.ping()
        script = (
            "import redis, sys\nfrom redis.backoff import NoBackoff\nfrom redis.retry import Retry\n"
            f"c = redis.Redis(port={proxy.port}, socket_timeout=1, retry=Retry(NoBackoff(), 0))\n"
            "c.ping(); print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            "try:\n    c.ping(); print('answered', flush=True)\n"
            "except redis.exceptions.TimeoutError:\n    print('timed out', flush=True)\n"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline().strip() == "ready"
            proxy.blackhole(clients={child.pid})
            assert mine.ping()
            child.stdin.write("\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "timed out"
            assert mine.ping()
        finally:
            child.kill()
            child.wait()


def test_grpc_passes_unchanged(tmp_path: Path) -> None:
    meta, meta_addr = start_meta(tmp_path)
    host, port = meta_addr.rsplit(":", 1)
    try:
        with TcpProxy((host, int(port))) as proxy:

            async def two_timestamps() -> list[int]:
                async with MetaClient(proxy.addr, timeout=10.0) as client:
                    return [await client.get_timestamp(), await client.get_timestamp()]

            first, second = asyncio.run(two_timestamps())
            assert 0 < first < second
            assert proxy.accepted >= 1
    finally:
        meta.kill()


@pytest.mark.kafka
def test_kafka_passes_unchanged_through_a_proxy_the_broker_advertises(
    tmp_path: Path, unique_name: str
) -> None:
    with TcpProxy(("127.0.0.1", 1)) as proxy:
        broker = PrivateTansu(tmp_path, advertised_port=proxy.port, memory=True)
        proxy.target = ("127.0.0.1", broker.port)
        try:
            broker.start()
            conf: dict[str, str | int | float | bool] = {"bootstrap.servers": proxy.addr}
            admin = AdminClient(conf)
            admin.create_topics([NewTopic(unique_name, 1)])[unique_name].result(30)
            producer = Producer(conf)
            sent = [(b"k%d" % i, os.urandom(1000)) for i in range(200)]
            for key, value in sent:
                producer.produce(unique_name, value, key)
            assert producer.flush(30) == 0
            consumer = Consumer(
                {**conf, "group.id": unique_name, "auto.offset.reset": "earliest",
                 "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
            )  # fmt: skip
            consumer.subscribe([unique_name])
            got: list[tuple[bytes | None, bytes | None]] = []

            def read() -> bool:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    got.append((message.key(), message.value()))
                return len(got) >= len(sent)

            wait_until(read, timeout=60, what="the records back through the proxy")
            consumer.close()
            assert got == sent
            assert proxy.accepted >= 2  # bootstrap and the advertised broker: both via the proxy
        finally:
            broker.close()
