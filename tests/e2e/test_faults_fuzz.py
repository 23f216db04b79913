"""A fuzz run against live processes while a load runs (issue 15, item 7): malformed protobuf
to every gRPC service (meta, pump, drainer), malformed HTTP to the pump's and the drainer's
status ports, and malformed TOML to every config loader. Nothing may crash, every process
keeps serving, and the drainer's sink ends up with exactly the transactions the producer was
told were written. What each malformed request is *answered* with is the bad-request work's
(tests/integration/test_pump_fuzz.py and its siblings); here it only must not hurt.

Every request is seeded (``SEED``) and bounded in count; run time: ~5-10 s.

The fault suite (tests/e2e/test_faults_*.py, 7 cases, all @pytest.mark.slow) ran in 69 s
on a 2-core machine (up to ~2 min while other work shared it).
"""

from __future__ import annotations

import logging
import random
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from bridge.apps.meta.config import MetaConfig
from bridge.config import load
from bridge.errors import BridgeError, ConfigError
from drainer.config import load_config as load_drainer_config
from pump.config import PumpConfig
from tests.support.drainer_cluster import (
    DrainerProcess,
    Producer,
    delivered,
    expected_records,
    strip_ddl_details,
    table,
)
from tests.support.process import ChildProcess
from tests.support.pump_server import PumpProcess, start_meta

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
log = logging.getLogger(__name__)

SEED = 15
GRPC_REQUESTS = 150  # per method
HTTP_REQUESTS = 150  # per port
TOML_MUTATIONS = 300  # per loader
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
INVALID_TAGS = (0x00, 0x01, 0x06, 0x07, 0x0E, 0x0F)  # field number 0, or wire type 6/7: never valid

# Undecodable bodies only: a random body may decode into a valid Heartbeat or RemoveNode,
# which would be a legitimate (if unauthenticated) change, not a malformed request.
METHODS = {
    "meta": [
        "/bridge.meta.Meta/" + m
        for m in ("GetTimestamps", "Heartbeat", "ListNodes", "GetStatus", "RemoveNode")
    ],
    "pump": ["/binlog.Pump/WriteBinlog", "/binlog.Pump/WriteBinlogs"],
    "drainer": ["/binlog.Cistern/Notify"],
}
STREAMS = {"pump": ["/binlog.Pump/PullBinlogs"]}


def malformed_protobuf(rng: random.Random) -> bytes:
    """A body no protobuf message decodes: an invalid tag, a truncated varint or length, or a
    length running past the end, after a random prefix of valid-looking bytes."""
    kind = rng.randrange(4)
    if kind == 0:
        return bytes([rng.choice(INVALID_TAGS)]) + rng.randbytes(rng.randrange(64))
    if kind == 1:
        return bytes([0x08]) + b"\xff" * rng.randrange(1, 11)  # field 1 varint, never terminated
    if kind == 2:
        return bytes([0x0A, 0x7F]) + rng.randbytes(rng.randrange(0, 100))  # length 127, fewer bytes
    return bytes([0x12]) + b"\xff" * 10 + b"\x01"  # a length varint of 11 bytes: too long


def malformed_http(rng: random.Random) -> bytes:
    """A request the status servers must survive: bad request lines, headers, lengths, bodies.
    Never a path under /state/ (a valid control request there would change the node)."""
    path = rng.choice(["/status", "/metrics", "/", "/%ff%fe", "/" + "a" * 5000, "/status?" + "x=" * 300])
    method = rng.choice(["GET", "POST", "PUT", "BREW", "G\x00T", "", "GET GET"])
    version = rng.choice(["HTTP/1.1", "HTTP/1.0", "HTTP/9.9", "HTTP/1.1 extra", "", "HTTP/"])
    headers = rng.choice([
        "Host: x\r\n",
        "Content-Length: \u00b2\r\n",  # passes isdigit(), not int()
        "Content-Length: -5\r\n",
        "Content-Length: 99999999999999999999\r\n",
        "Content-Length: 10\r\nContent-Length: 20\r\n",
        "Transfer-Encoding: chunked\r\n",
        "X: " + "y" * 70000 + "\r\n",
        "no colon here\r\n",
        "\x00\x01\x02: \xff\r\n",
    ])  # fmt: skip
    body = rng.randbytes(rng.randrange(0, 200))
    head = f"{method} {path} {version}\r\n{headers}\r\n".encode("utf-8", "surrogateescape")
    return rng.choice([head + body, head[: rng.randrange(1, len(head))], rng.randbytes(300), b"\r\n" * 50])


def send_http(port: int, raw: bytes) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except OSError:  # reset or timed out: the server may drop a bad request; it must not die
            pass


def mutated(rng: random.Random, text: bytes) -> bytes:
    """``text`` with a few random edits: bytes flipped or inserted (invalid UTF-8 too), cut,
    a line doubled or dropped, a quote or bracket removed."""
    data = bytearray(text)
    for _ in range(rng.randrange(1, 4)):
        if not data:
            break
        at = rng.randrange(len(data))
        edit = rng.randrange(6)
        if edit == 0:
            data[at] = rng.randrange(256)
        elif edit == 1:
            data[at:at] = rng.choice([b"\xff", b"\xc3", b"\x00", b"=", b"[", b'"', b"\n[[", b"\\u12"])
        elif edit == 2:
            del data[at:]
        elif edit == 3:
            lines = bytes(data).splitlines(keepends=True)
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            data = bytearray(b"".join(lines))
        elif edit == 4:
            lines = bytes(data).splitlines(keepends=True)
            del lines[rng.randrange(len(lines))]
            data = bytearray(b"".join(lines))
        else:
            quote = data.find(rng.choice([b'"', b"[", b"]", b"="]), at)
            if quote >= 0:
                del data[quote]
    return bytes(data)


class Load(threading.Thread):
    """Inserts rows through the producer until stopped, recording any failure (none is expected)."""

    def __init__(self, producer: Producer) -> None:
        super().__init__(daemon=True)
        self.producer = producer
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        row = 0
        while not self.stop.is_set():
            row += 1
            try:
                self.producer.txn([("insert", "orders", None, [row, f"row {row}"])])
            except BridgeError as exc:
                self.failures.append(str(exc))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[ChildProcess, str, PumpProcess, DrainerProcess]]:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr)
    drainer = DrainerProcess(tmp_path, meta_addr)
    try:
        pump.start()
        drainer.start()
        yield meta, meta_addr, pump, drainer
    finally:
        drainer.kill()
        pump.kill()
        meta.kill()


def fuzz_grpc(rng: random.Random, addrs: dict[str, str]) -> Counter[str]:
    answers: Counter[str] = Counter()

    def call(method: Callable[..., Any], streaming: bool) -> None:
        try:
            answer = method(malformed_protobuf(rng), timeout=5)
            if streaming:
                list(answer)  # a stream's status comes with its end
            answers["OK"] += 1
        except grpc.RpcError as exc:
            answers[exc.code().name] += 1

    for service, addr in addrs.items():
        with grpc.insecure_channel(addr) as channel:
            for method in METHODS.get(service, []):
                stub = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
                for _ in range(GRPC_REQUESTS):
                    call(stub, streaming=False)
            for method in STREAMS.get(service, []):
                stream = channel.unary_stream(method, request_serializer=None, response_deserializer=None)
                for _ in range(GRPC_REQUESTS):
                    call(stream, streaming=True)
    return answers


def fuzz_toml(rng: random.Random, tmp_path: Path) -> Counter[str]:
    loaders: dict[str, Callable[[Path], object]] = {
        "pump.toml": lambda p: load(PumpConfig, p),
        "meta.toml": lambda p: load(MetaConfig, p),
        "drainer.toml": load_drainer_config,
        "drainer-kafka.toml": load_drainer_config,
    }
    outcomes: Counter[str] = Counter()
    path = tmp_path / "fuzzed.toml"
    for example, loader in loaders.items():
        original = (EXAMPLES / example).read_bytes()
        for _ in range(TOML_MUTATIONS):
            path.write_bytes(mutated(rng, original))
            try:
                loader(path)
                outcomes["loaded"] += 1
            except ConfigError as exc:
                assert "\n" not in str(exc), str(exc)  # one line
                outcomes["refused"] += 1
    return outcomes


def test_fuzz_against_live_processes_under_load_loses_nothing(
    tmp_path: Path, cluster: tuple[ChildProcess, str, PumpProcess, DrainerProcess]
) -> None:
    meta, meta_addr, pump, drainer = cluster
    rng = random.Random(SEED)
    producer = Producer(meta_addr)
    producer.create(table("orders", 1))
    load_thread = Load(producer)
    load_thread.start()
    try:
        answers = fuzz_grpc(
            rng, {"meta": meta_addr, "pump": pump.addr, "drainer": f"127.0.0.1:{drainer.port}"}
        )
        for port in (pump.status_port, drainer.status_port):
            for _ in range(HTTP_REQUESTS):
                send_http(port, malformed_http(rng))
        toml = fuzz_toml(rng, tmp_path)
        log.warning("gRPC answers to malformed bodies: %s; TOML: %s", dict(answers), dict(toml))
        sent = GRPC_REQUESTS * sum(len(m) for m in (*METHODS.values(), *STREAMS.values()))
        assert sum(answers.values()) == sent and answers["OK"] == 0  # each answered, none taken
        assert toml["refused"] > 0
    finally:
        load_thread.stop.set()
        load_thread.join(timeout=60)
    log.warning("load: %d transactions, %d failed", len(producer.written), len(load_thread.failures))
    assert load_thread.failures == [], load_thread.failures[:3]
    try:
        for child, name in ((meta, "meta"), (pump.child, "pump"), (drainer.child, "drainer")):
            assert child is not None and child.proc.poll() is None, (
                f"{name} died:\n{child and child.output[-3000:]}"
            )
        # still serving: a timestamp, both status pages, and a transaction end to end
        last = producer.txn([("insert", "orders", None, [10**9, "after the fuzz"])])
        assert pump.child is not None and drainer.status()["node_id"] == drainer.node_id
        drainer.wait_checkpoint(last.commit_ts)
        assert strip_ddl_details(delivered(drainer.records())) == expected_records(producer.written)
    finally:
        producer.close()
    tracebacks = {
        n: c.output.count("Traceback")
        for n, c in (("meta", meta), ("pump", pump.child), ("drainer", drainer.child))
        if c
    }
    log.warning("tracebacks logged (the bad-request work removes them): %s", tracebacks)
