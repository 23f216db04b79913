"""The redis sink against a real Redis, driven with hand-built events: invalidation of before and
after keys, publish and stream read by plain redis-py clients, upsert, DDL (a dropped template
column stops the sink below the DDL; TRUNCATE deletes the table's keys), refused commands, an
outage of a private redis-server, the checkpoint mirror. Each test uses a key prefix of its own."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

from bridge.errors import ConfigError
from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.errors import SinkApplyError, SinkUnavailable
from bridge.sink.events import Event, ResolvedEvent
from drainer.sinks.redis import RedisSink
from tests.support.redis_server import RedisServer, ddl, delete, insert, next_ts, stream_entries, txn, update
from tests.support.tls import self_signed_cert

pytestmark = pytest.mark.redis

T = row_pb2.ColumnType
Change = row_pb2.SchemaChange


def users_table(db: str, extra: tuple[str, ...] = ("email", "name")) -> row_pb2.TableSchema:
    table = row_pb2.TableSchema(table_id=7, db=db, table="users")
    table.columns.add(id=1, name="id", type=T.BIGINT)
    for n, name in enumerate(extra, 2):
        table.columns.add(id=n, name=name, type=T.VARCHAR, length=64, nullable=True)
    table.max_column_id = len(extra) + 1
    table.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return table


class Harness:
    """A sink opened on one test's prefix, and a plain client to look at Redis with."""

    def __init__(self, url: str, prefix: str, tmp_path: Path) -> None:
        self.url = url
        self.prefix = prefix
        self.tmp_path = tmp_path
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.users = users_table(prefix)
        self.sink: RedisSink | None = None
        self.registry = CollectorRegistry()

    def open(
        self,
        rules: list[dict[str, Any]],
        tables: tuple[row_pb2.TableSchema, ...] = (),
        settings: dict[str, Any] | None = None,
    ) -> RedisSink:
        config = {"url": self.url, "rules": rules, **(settings or {})}
        self.sink = RedisSink(config, self.tmp_path)
        context = SinkContext(resume_ts=1, cluster_id=5, tables=tables or (self.users,),
                              metrics_registry=self.registry)  # fmt: skip
        self.sink.open(context)
        return self.sink

    def keys(self) -> set[str]:
        return set(self.client.scan_iter(match=f"{self.prefix}*", count=1000))

    def seed(self, *keys: str) -> None:
        self.client.mset({key: "cached" for key in keys})

    def apply(self, events: list[Event]) -> int:
        assert self.sink is not None
        self.sink.write(events)
        return self.sink.flush()

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
        keys = self.keys() | set(self.client.scan_iter(match=f"*{self.prefix}*", count=1000))
        if keys:
            self.client.delete(*keys)
        self.client.close()


@pytest.fixture
def harness(redis_url: str, unique_name: str, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(redis_url, unique_name, tmp_path)
    yield h
    h.close()


def user_rules(prefix: str, **extra: Any) -> list[dict[str, Any]]:
    return [
        {
            "db": prefix,
            "table": "users",
            "keys": [f"{prefix}:user:{{id}}", f"{prefix}:email:{{email}}"],
            **extra,
        }
    ]


def test_invalidates_exactly_the_before_and_after_keys(harness: Harness) -> None:
    p, users = harness.prefix, harness.users
    harness.open(user_rules(p))
    harness.seed(*(f"{p}:user:{i}" for i in range(1, 7)), *(f"{p}:email:{i}@x" for i in range(1, 7)),
                 f"{p}:email:new@x", f"{p}:user:60")  # fmt: skip
    ts = [next_ts() for _ in range(4)]
    events: list[Event] = [
        txn(ts[0], [update(users, (1, "1@x", "a"), (1, "new@x", "a"))]),  # a unique column changes
        txn(ts[1], [update(users, (2, "2@x", "b"), (60, "2@x", "b"))]),  # the primary key changes
        txn(ts[2], [delete(users, 3, "3@x", "c"), insert(users, 7, None, "d")]),
        ResolvedEvent(ts[3]),
    ]
    assert harness.apply(events) == ts[3]
    untouched = {f"{p}:user:{i}" for i in (4, 5, 6)} | {f"{p}:email:{i}@x" for i in (4, 5, 6)}
    assert harness.keys() == untouched


def test_a_large_transaction_spans_pipelines_and_its_position_moves_at_its_end(harness: Harness) -> None:
    p, users = harness.prefix, harness.users
    harness.open(user_rules(p), settings={"batch-commands": 100, "del-batch-keys": 7})
    harness.seed(*(f"{p}:user:{i}" for i in range(2000)), f"{p}:user:keep")
    big = next_ts()
    assert harness.apply([txn(big, [delete(users, i, None, "") for i in range(2000)])]) == big
    assert harness.keys() == {f"{p}:user:keep"}
    samples = {s.name: s.value for m in harness.registry.collect() for s in m.samples}
    assert samples["bridge_sink_redis_durable_ts"] == big
    assert harness.registry.get_sample_value("bridge_sink_redis_keys_total", {"mode": "invalidate"}) == 4000


def subscribe(harness: Harness, channel: str) -> tuple[list[dict[str, Any]], threading.Event, Any]:
    """A plain redis-py subscriber collecting JSON messages of ``channel`` on a thread."""
    pubsub = harness.client.pubsub()
    pubsub.subscribe(channel)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    got: list[dict[str, Any]] = []
    stop = threading.Event()

    def listen() -> None:
        while not stop.is_set():
            message = pubsub.get_message(timeout=0.1)
            if message and message["type"] == "message":
                got.append(json.loads(message["data"]))

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    return got, stop, (pubsub, thread)


def test_publish_per_row_reaches_a_plain_subscriber_in_commit_order(harness: Harness) -> None:
    p, users = harness.prefix, harness.users
    harness.open(user_rules(p, modes=["invalidate", "publish"], channel=f"{p}:ch:{{table}}"))
    got, stop, (pubsub, thread) = subscribe(harness, f"{p}:ch:users")
    ts = [next_ts() for _ in range(30)]
    harness.apply(
        [txn(t, [update(users, (1, f"{n}@x", None), (1, f"{n + 1}@x", None))]) for n, t in enumerate(ts)]
    )
    deadline = threading.Event()
    for _ in range(100):
        if len(got) >= 30:
            break
        deadline.wait(0.05)
    stop.set()
    thread.join()
    pubsub.close()
    assert [m["commit_ts"] for m in got] == ts
    first = got[0]
    assert first["op"] == "update" and first["db"] == p and first["table"] == "users" and first["pos"] == 0
    assert first["before"] == {"id": 1, "email": "0@x", "name": None}
    assert first["after"] == {"id": 1, "email": "1@x", "name": None}
    assert first["keys"] == [f"{p}:user:1", f"{p}:email:0@x", f"{p}:email:1@x"]
    assert first["cluster_id"] == 5


def test_publish_per_transaction_sends_one_message_per_channel(harness: Harness) -> None:
    p, users = harness.prefix, harness.users
    harness.open(user_rules(p, modes=["publish"], channel=f"{p}:txn", **{"publish-per": "transaction"}))
    got, stop, (pubsub, thread) = subscribe(harness, f"{p}:txn")
    ts = next_ts()
    harness.apply([txn(ts, [insert(users, i, None, "n") for i in range(2500)])])
    for _ in range(100):
        if got and got[-1]["last"]:
            break
        threading.Event().wait(0.05)
    stop.set()
    thread.join()
    pubsub.close()
    assert [(m["part"], m["last"], len(m["changes"])) for m in got] == [
        (0, False, 1000),
        (1, False, 1000),
        (2, True, 500),
    ]
    assert {m["commit_ts"] for m in got} == {ts}
    assert [c["pos"] for m in got for c in m["changes"]] == list(range(2500))


def test_stream_entries_read_by_xread_in_commit_order_with_trimming(harness: Harness) -> None:
    p, users = harness.prefix, harness.users
    stream = f"{p}:stream:{{db}}:{{table}}"
    harness.open(user_rules(p, modes=["stream"], stream=stream, **{"stream-maxlen": 100000}))
    ts = [next_ts() for _ in range(20)]
    events: list[Event] = [
        txn(t, [insert(users, n, f"{n}@x", None), delete(users, n, f"{n}@x", None)]) for n, t in enumerate(ts)
    ]
    harness.apply(events)
    answer = harness.client.xread({f"{p}:stream:{p}:users": "0"}, count=1000)
    assert isinstance(answer, list)
    [(_, entries)] = answer
    fields = [f for _, f in stream_entries(entries)]
    assert [(int(f["commit_ts"]), int(f["pos"])) for f in fields] == [(t, pos) for t in ts for pos in (0, 1)]
    assert [f["op"] for f in fields[:2]] == ["insert", "delete"]
    assert json.loads(fields[0]["key"]) == {"id": 0}
    assert json.loads(fields[0]["after"]) == {"id": 0, "email": "0@x", "name": None}
    assert json.loads(fields[1]["before"])["email"] == "0@x" and json.loads(fields[1]["after"]) is None
    assert json.loads(fields[0]["keys"]) == [f"{p}:user:0", f"{p}:email:0@x"]


def test_streams_are_trimmed_by_length_and_by_age(harness: Harness) -> None:
    """``stream-maxlen`` (XADD MAXLEN ~) and ``stream-max-age`` (XADD MINID ~) trim whole stream
    nodes: older entries go, the newest are always kept."""
    p, users = harness.prefix, harness.users
    by_length, by_age = f"{p}:by-length", f"{p}:by-age"
    harness.open([
        {"db": p, "table": "users", "modes": ["stream"], "stream": by_length, "stream-maxlen": 10},
        {"db": p, "table": "users", "modes": ["stream"], "stream": by_age, "stream-max-age": "1h"},
    ])  # fmt: skip
    for n in range(300):  # entries from 1970, far older than an hour
        harness.client.xadd(by_age, {"old": n}, id=f"{1000 + n}-0")
    ts = [next_ts() for _ in range(1000)]
    assert harness.apply([txn(t, [insert(users, n, None, None)]) for n, t in enumerate(ts)]) == ts[-1]
    kept = [int(fields["commit_ts"]) for _, fields in stream_entries(harness.client.xrange(by_length))]
    assert 10 <= len(kept) < 1000 and kept == ts[-len(kept) :]
    aged = stream_entries(harness.client.xrange(by_age))
    old = [entry_id for entry_id, fields in aged if "old" in fields]
    assert len(old) < 300, "MINID trimmed no entry older than stream-max-age"
    assert [int(fields["commit_ts"]) for _, fields in aged if "old" not in fields] == ts


def test_upsert_writes_the_after_image_and_deletes_with_the_row(harness: Harness) -> None:
    p, users = harness.prefix, harness.users
    rules = [
        {"db": p, "table": "users", "keys": [f"{p}:json:{{id}}"], "modes": ["upsert"], "upsert-ttl": "1h"},
        {
            "db": p,
            "table": "users",
            "keys": [f"{p}:hash:{{id}}"],
            "modes": ["upsert"],
            "upsert-format": "hash",
        },
    ]
    harness.open(rules)
    ts = [next_ts() for _ in range(3)]
    harness.apply([txn(ts[0], [insert(users, 1, "a@x", None), insert(users, 2, "b@x", "bee")]),
                   txn(ts[1], [update(users, (1, "a@x", None), (10, "a@x", "ay"))]),
                   txn(ts[2], [delete(users, 2, "b@x", "bee")])])  # fmt: skip
    assert harness.keys() == {f"{p}:json:10", f"{p}:hash:10"}
    assert json.loads(harness.client.get(f"{p}:json:10")) == {"id": 10, "email": "a@x", "name": "ay"}  # type: ignore[arg-type]
    assert 0 < harness.client.pttl(f"{p}:json:10") <= 3_600_000
    assert harness.client.hgetall(f"{p}:hash:10") == {"id": "10", "email": "a@x", "name": "ay"}
    assert harness.client.pttl(f"{p}:hash:10") == -1


def test_a_dropped_template_column_stops_the_sink_below_the_ddl(harness: Harness) -> None:
    p, users = harness.prefix, harness.users
    sink = harness.open(user_rules(p))
    harness.seed(f"{p}:user:1")
    before, at = next_ts(), next_ts()
    dropped = users_table(p, extra=("name",))
    sink.write([txn(before, [delete(users, 1, "1@x", None)])])
    with pytest.raises(ConfigError) as raised:
        sink.write([ddl(at, Change.ALTER_TABLE, users, dropped, "ALTER TABLE users DROP COLUMN email")])
    text = str(raised.value)
    for part in (
        "sink.redis.rules[0]",
        f"{p}.users",
        "{email}",
        f"commit_ts {at}",
        "DROP COLUMN email",
        "fix the rule",
    ):
        assert part in text, text
    assert not raised.value.retriable
    assert sink.flush() == before  # everything before the DDL applied; the checkpoint stays below it
    assert harness.keys() == set()


def test_open_refuses_a_rule_that_does_not_fit_a_known_table(harness: Harness) -> None:
    p = harness.prefix
    with pytest.raises(
        ConfigError, match=rf"rules\[0\].*{{phone}}.*{p}.users has no column 'phone'.*at start-up"
    ):
        harness.open([{"db": p, "table": "users", "keys": ["u:{phone}"]}])


def test_truncate_deletes_the_tables_keys_by_scan_and_nothing_else(harness: Harness) -> None:
    p, users = harness.prefix, harness.users
    harness.open([{"db": p, "table": "users", "keys": [f"{p}:user:{{id}}"]}])
    harness.seed(*(f"{p}:user:{i}" for i in range(3000)), f"{p}:other:1", f"{p}:user")
    raw = redis.Redis.from_url(harness.url)
    not_utf8 = f"{p}:user:".encode() + b"\xff\xfe"
    raw.set(not_utf8, "a key SCAN finds that is not UTF-8")
    assert harness.apply([ddl(next_ts(), Change.TRUNCATE_TABLE, users, users, "TRUNCATE users")]) > 0
    assert harness.keys() == {f"{p}:other:1", f"{p}:user"}
    assert not raw.exists(not_utf8)
    raw.close()


def test_a_refused_command_names_table_and_commit_ts_and_stops(harness: Harness) -> None:
    p, users = harness.prefix, harness.users
    harness.open([{"db": p, "table": "users", "modes": ["stream"], "stream": f"{p}:s"}])
    harness.client.set(f"{p}:s", "a string, not a stream")
    ts = next_ts()
    assert harness.sink is not None
    harness.sink.write([txn(ts, [insert(users, 1, None, None)])])
    with pytest.raises(
        SinkApplyError, match=rf"commit_ts {ts}: table {p}.users: Redis refused XADD .stream, .*WRONGTYPE"
    ):
        harness.sink.flush()


def test_a_pipeline_sent_while_writing_moves_the_position_only_once_redis_answered(
    harness: Harness,
) -> None:
    """A pipeline ``write`` sends is answered later (the next pipeline or the flush reads its
    replies): until then the position stays below it, even across a resolved event."""
    p, users = harness.prefix, harness.users
    sink = harness.open(user_rules(p), settings={"batch-commands": 2})
    harness.seed(*(f"{p}:user:{i}" for i in range(1, 5)))
    first, resolved = next_ts(), next_ts()
    sink.write(
        [txn(first, [delete(users, 1, None, ""), delete(users, 2, None, "")]), ResolvedEvent(resolved)]
    )
    assert sink.delivery.durable == 1  # sent during the write, replies not read: nothing acknowledged
    assert sink.flush() == resolved
    assert harness.keys() == {f"{p}:user:3", f"{p}:user:4"}


def test_a_refused_reply_read_after_the_write_names_its_own_transaction(harness: Harness) -> None:
    """The refusal of a pipeline sent during a write surfaces when its replies are read (here by the
    next pipeline) and names the transaction it came from; the position stays below it."""
    p, users = harness.prefix, harness.users
    sink = harness.open(
        [{"db": p, "table": "users", "modes": ["stream"], "stream": f"{p}:s"}], settings={"batch-commands": 1}
    )
    harness.client.set(f"{p}:s", "a string, not a stream")
    first, second = next_ts(), next_ts()
    with pytest.raises(SinkApplyError, match=rf"commit_ts {first}: table {p}.users: Redis refused XADD"):
        sink.write([txn(first, [insert(users, 1, None, None)]), txn(second, [insert(users, 2, None, None)])])
    assert sink.delivery.durable == 1


def test_checkpoint_mirror_follows_the_durable_position(harness: Harness) -> None:
    p, users = harness.prefix, harness.users
    harness.open(user_rules(p), settings={"checkpoint-key": f"{p}:checkpoint"})
    ts = next_ts()
    harness.apply([txn(ts, [insert(users, 1, None, None)])])
    mirror = json.loads(harness.client.get(f"{p}:checkpoint"))  # type: ignore[arg-type]
    assert mirror["commit_ts"] == ts and mirror["cluster_id"] == 5 and mirror["updated_ms"] > 0


def test_an_outage_fails_the_flush_and_the_rewritten_events_apply_after_it(
    tmp_path: Path, unique_name: str
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        harness = Harness(server.url, unique_name, tmp_path)
        p, users = harness.prefix, harness.users
        sink = harness.open(user_rules(p), settings={"batch-commands": 1})
        harness.seed(f"{p}:user:1", f"{p}:user:2", f"{p}:user:3")
        first, second = next_ts(), next_ts()
        assert harness.apply([txn(first, [delete(users, 1, None, None)])]) == first
        server.kill()
        unflushed: list[Event] = [txn(second, [delete(users, 2, None, None)])]
        sink.write(unflushed)  # the pipeline fails here; write keeps quiet, the flush tells
        with pytest.raises(SinkUnavailable, match=rf"checkpoint stays at commit_ts {first}") as raised:
            sink.flush()
        assert raised.value.retriable
        errors = harness.registry.get_sample_value("bridge_sink_redis_errors_total", {"kind": "connection"})
        assert errors is not None and errors >= 1
        server.start()
        harness.client = server.client()
        harness.client.set(f"{p}:user:2", "cached again while the drainer was down")
        sink.write(unflushed)  # the sink driver writes every unflushed event again
        assert sink.flush() == second
        assert harness.client.keys(f"{p}*") == []
    finally:
        sink.close()
        server.kill()


def test_unlink_off_deletes_with_del_and_the_metrics_count_what_redis_acknowledged(
    tmp_path: Path, unique_name: str
) -> None:
    server = RedisServer(tmp_path / "redis")
    server.start()
    sink: RedisSink | None = None
    try:
        harness = Harness(server.url, unique_name, tmp_path)
        p, users = harness.prefix, harness.users
        sink = harness.open(user_rules(p), settings={"unlink": False})
        harness.seed(*(f"{p}:user:{i}" for i in range(10)), *(f"{p}:email:{i}@x" for i in range(10)))
        ts = next_ts()
        assert harness.apply([txn(ts, [delete(users, i, f"{i}@x", None) for i in range(10)])]) == ts
        assert harness.keys() == set()
        stats = harness.client.info("commandstats")
        assert "cmdstat_unlink" not in stats and stats["cmdstat_del"]["calls"] == 1  # one merged DEL
        sample = harness.registry.get_sample_value
        assert sample("bridge_sink_redis_commands_total", {"command": "DEL"}) == 1
        assert sample("bridge_sink_redis_keys_total", {"mode": "invalidate"}) == 20
        assert sample("bridge_sink_redis_pipeline_seconds_count") == 1
        assert sample("bridge_sink_redis_pipeline_commands_sum") == 1
        assert sample("bridge_sink_redis_durable_ts") == ts
    finally:
        if sink is not None:
            sink.close()
        server.kill()


def test_tls_with_a_client_certificate_and_a_password_from_the_environment(
    tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cert, key = self_signed_cert(tmp_path)
    secret = f"pw-{unique_name}"
    server = RedisServer(tmp_path / "redis", tls=(cert, key), password=secret)
    server.start()
    sink: RedisSink | None = None
    try:
        monkeypatch.setenv("BRIDGE_REDIS_PASSWORD", secret)
        url = f"rediss://127.0.0.1:{server.port}/0"
        tls = {"tls-ca-file": str(cert), "tls-cert-file": str(cert), "tls-key-file": str(key)}
        harness = Harness(url, unique_name, tmp_path)
        harness.client = server.client()
        caplog.set_level(logging.INFO)
        sink = harness.open(user_rules(unique_name), settings=tls)
        harness.client.set(f"{unique_name}:user:1", "cached")
        ts = next_ts()
        assert harness.apply([txn(ts, [delete(harness.users, 1, None, None)])]) == ts
        assert not harness.client.exists(f"{unique_name}:user:1")
        assert "rediss://127.0.0.1" in caplog.text and secret not in caplog.text
        sink.close()

        monkeypatch.setenv("BRIDGE_REDIS_PASSWORD", "wrong")
        with pytest.raises(SinkApplyError, match="refused the credentials") as raised:
            harness.open(user_rules(unique_name), settings=tls)
        assert "wrong" not in str(raised.value) and secret not in str(raised.value)
        with pytest.raises(SinkUnavailable):  # no client certificate: the handshake fails (retried)
            harness.open(user_rules(unique_name), settings={"password": secret, "tls-ca-file": str(cert)})
    finally:
        if sink is not None:
            sink.close()
        server.kill()


def test_a_unix_socket_url_with_a_database_number(tmp_path: Path, unique_name: str) -> None:
    socket_path = tmp_path / "redis.sock"
    server = RedisServer(tmp_path / "redis", unix_socket=socket_path)
    server.start()
    sink: RedisSink | None = None
    try:
        harness = Harness(f"unix://{socket_path}?db=3", unique_name, tmp_path)
        harness.client = redis.Redis(unix_socket_path=str(socket_path), db=3)
        sink = harness.open(user_rules(unique_name))
        harness.client.set(f"{unique_name}:user:1", "cached")
        server.client().set(f"{unique_name}:user:1", "db 0 is not the sink's")
        ts = next_ts()
        assert harness.apply([txn(ts, [delete(harness.users, 1, None, None)])]) == ts
        assert not harness.client.exists(f"{unique_name}:user:1")
        assert server.client().exists(f"{unique_name}:user:1")
    finally:
        if sink is not None:
            sink.close()
        server.kill()


def test_changes_of_a_table_no_rule_matches_are_ignored_with_a_warning(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    p, users = harness.prefix, harness.users
    harness.open([{"db": p, "table": "orders", "keys": [f"{p}:order:{{id}}"]}])  # no rule for users
    harness.seed(f"{p}:user:1")
    ts = [next_ts() for _ in range(3)]
    with caplog.at_level(logging.WARNING, logger="drainer.sinks.redis.sink"):
        harness.apply(
            [txn(ts[0], [insert(users, 1, "1@x", "a")]), txn(ts[1], [delete(users, 1, "1@x", "a")])]
        )
        assert harness.apply([ResolvedEvent(ts[2])]) == ts[2]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and f"{p}.users" in warned[0] and "no rule matches" in warned[0], warned
    assert harness.keys() == {f"{p}:user:1"}  # ignored, as the rules say
