"""The kafka sink against the real broker: events built from real binlogs, read back with plain consumers.

The broker (Tansu) hides records whose value is null or empty from every
consumer (they take an offset but are never fetched), so tombstones and
resolved-ts watermarks are checked through the broker's delivery reports
(topic, partition, offset) and the gaps they leave in what consumers read.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from bridge.avro import Decoder
from bridge.kafkaclient import schema_registry_client
from bridge.proto import row_pb2
from bridge.sink.contract import SinkContext
from bridge.sink.errors import SinkApplyError, SinkUnavailable
from bridge.sink.events import Event, ResolvedEvent, TxnEvent
from bridge.sink.schema import SchemaTracker
from drainer.sinks.kafka.sink import KafkaSink
from tests.support.binlog_events import EventStream, table_schema
from tests.support.kafka_messages import headers

pytestmark = pytest.mark.kafka

T = row_pb2.ColumnType
HANG_GUARD = 30.0


def make_sink(bootstrap: str, prefix: str, **config: object) -> KafkaSink:
    return KafkaSink({"bootstrap-servers": bootstrap, "prefix": prefix, **config}, Path("/nonexistent"))


def context(resume_ts: int = 0, snapshot: bytes = b"") -> SinkContext:
    """What the drainer of cluster 7 opens the sink with."""
    return SinkContext.at(resume_ts, snapshot, cluster_id=7)


def read(bootstrap: str, topic: str, count: int) -> list[Record]:
    """``count`` messages with a value from every partition of ``topic``, from offset 0 (hang guard: 30 s).

    Null-value records (tombstones, watermarks) are skipped: the broker shows them to consumers only
    some of the time, so tests check them through the sink's delivery reports.
    """
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-reader", "enable.auto.commit": False}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10)
        partitions = sorted(metadata.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        got: list[Message] = []
        deadline = time.monotonic() + HANG_GUARD
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None and message.value() is not None:
                got.append(message)
        assert len(got) == count, f"{topic}: read {len(got)} messages, expected {count}"
        # A short look for more (not a timing assertion: it can only miss a surplus, never invent one).
        look = time.monotonic() + 0.5
        while time.monotonic() < look:
            extra = consumer.poll(0.1)
            if extra is not None and extra.error() is None:
                assert extra.value() is None, f"{topic}: more than {count} messages"
        return [Record.of(m) for m in got]
    finally:
        consumer.close()


@dataclass(frozen=True)
class Record:
    """A message read back with a value: confluent-kafka's optional accessors checked once."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: dict[str, str]

    @classmethod
    def of(cls, message: Message) -> Record:
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        key, value = message.key(), message.value()
        assert topic is not None and partition is not None and offset is not None
        assert isinstance(value, bytes) and (key is None or isinstance(key, bytes))
        return cls(topic, partition, offset, key, value, headers(message))


def shop(stream: EventStream, db: str) -> list[Event]:
    """Two tables: ``k`` keyed by id, ``n`` without a key."""
    return [
        stream.create(
            table_schema(
                db, "k", [("id", T.BIGINT), ("name", T.VARCHAR), ("qty", T.INT)], key=["id"], table_id=1
            )
        ),
        stream.create(table_schema(db, "n", [("a", T.INT), ("b", T.VARCHAR)], table_id=2)),
    ]


def changes(stream: EventStream, db: str) -> list[Event]:
    """Transactions over ``k`` and ``n`` with every change kind, each key changed several times."""
    k, n = f"{db}.k", f"{db}.n"
    return [
        stream.txn(
            [("insert", k, None, (i, f"v{i}", i)) for i in range(1, 7)] + [("insert", n, None, (1, "x"))]
        ),
        stream.txn([("update", k, (i, f"v{i}", i), (i, f"w{i}", i * 10)) for i in range(1, 7)]),
        stream.txn([("delete", k, (2, "w2", 20), None), ("update", n, (1, "x"), (1, "y"))]),
        stream.txn([("update", k, (i, f"w{i}", i * 10), (i, f"z{i}", None)) for i in (1, 3, 5)]),
        stream.txn([("insert", k, None, (2, "again", 2)), ("delete", n, (1, "y"), None)]),
    ]


def run(sink: KafkaSink, events: list[Event], resume_ts: int = 0) -> int:
    sink.open(context(resume_ts))
    try:
        sink.write(events)
        return sink.flush()
    finally:
        sink.close()


def test_a_plain_confluent_consumer_with_avro_deserializer_reads_every_change(
    kafka_bootstrap: str, unique_name: str
) -> None:
    url = f"mock://{unique_name}"
    stream = EventStream()
    events = [*shop(stream, "shop"), *changes(stream, "shop")]
    position = run(make_sink(kafka_bootstrap, unique_name, **{"schema-registry-url": url}), events)
    assert position == events[-1].commit_ts

    # The read side: confluent_kafka and its AvroDeserializer only, on the same mock registry.
    registry = schema_registry_client(url)
    deserialize = AvroDeserializer(registry)
    topic = f"{unique_name}.shop.k"
    messages = read(kafka_bootstrap, topic, 17)
    decoded = []
    for message in messages:
        key = deserialize(message.key, SerializationContext(topic, MessageField.KEY))
        value = deserialize(message.value, SerializationContext(topic, MessageField.VALUE))
        assert message.headers["bridge.commit-ts"] == str(value["source"]["commit_ts"])
        assert message.headers["bridge.kind"] == "row"
        decoded.append((message.partition, message.offset, key, value))
    by_key: dict[int, list[dict[str, Any]]] = {}
    for partition, _, key, value in sorted(decoded, key=lambda d: (d[0], d[1])):
        by_key.setdefault(key["id"], []).append(value)
        assert partition == decoded_partition(key["id"], decoded)  # one key, one partition
    assert [v["op"] for v in by_key[2]] == ["c", "u", "d", "c"]
    assert [v["op"] for v in by_key[1]] == ["c", "u", "u"]
    for values in by_key.values():
        commits = [v["source"]["commit_ts"] for v in values]
        assert commits == sorted(commits)  # per key in commit order
    first, update, delete, again = by_key[2]
    assert first["before"] is None and first["after"] == {"id": 2, "name": "v2", "qty": 2}
    assert update["before"] == {"id": 2, "name": "v2", "qty": 2} and update["after"]["name"] == "w2"
    assert delete["before"] == {"id": 2, "name": "w2", "qty": 20} and delete["after"] is None
    assert again["after"] == {"id": 2, "name": "again", "qty": 2}
    assert by_key[1][2]["after"] == {"id": 1, "name": "z1", "qty": None}
    source = delete["source"]
    txn = events[4]
    assert isinstance(txn, TxnEvent)
    assert source == {
        "cluster_id": 7,
        "db": "shop",
        "table": "k",
        "start_ts": txn.start_ts,
        "commit_ts": txn.commit_ts,
        "pos": 0,
        "last": False,
    }
    assert delete["ts_ms"] == txn.commit_ts >> 18
    first_txn = [
        v for values in by_key.values() for v in values if v["source"]["commit_ts"] == events[2].commit_ts
    ]
    last_of_first = max(first_txn, key=lambda v: v["source"]["pos"])
    assert last_of_first["source"]["pos"] == 5 and last_of_first["source"]["last"] is False  # n's row is last

    # The keyless table: null keys, partition 0, both images.
    keyless = read(kafka_bootstrap, f"{unique_name}.shop.n", 3)
    assert {m.partition for m in keyless} == {0} and {m.key for m in keyless} == {None}
    ops = [deserialize(m.value, SerializationContext(m.topic, MessageField.VALUE)) for m in keyless]
    assert [(v["op"], v["source"]["last"]) for v in ops] == [("c", True), ("u", True), ("d", True)]
    assert ops[1]["before"] == {"a": 1, "b": "x"} and ops[1]["after"] == {"a": 1, "b": "y"}


def decoded_partition(key: int, decoded: list[tuple[int, int, dict[str, Any], dict[str, Any]]]) -> int:
    partitions = {p for p, _, k, _ in decoded if k["id"] == key}
    assert len(partitions) == 1
    return partitions.pop()


def schemas_of(bootstrap: str, prefix: str, needed: set[str]) -> dict[int, str]:
    """The schemas topic's fingerprint -> schema, read until every fingerprint in ``needed`` is there."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{prefix}-s", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(f"{prefix}._schemas", 0, 0)])
    found: dict[int, str] = {}
    try:
        deadline = time.monotonic() + HANG_GUARD
        while not needed <= {f"{k:016x}" for k in found} | {fingerprint_key(k) for k in found}:
            assert time.monotonic() < deadline, f"schemas topic lacks {needed}"
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            assert headers(message)["bridge.kind"] == "schema"
            key = (message.key() or b"").decode()
            found[int.from_bytes(bytes.fromhex(key), "little")] = (message.value() or b"").decode()
    finally:
        consumer.close()
    return found


def fingerprint_key(value: int) -> str:
    return value.to_bytes(8, "little").hex()


def test_single_object_encoding_publishes_every_writer_schema_to_the_schemas_topic(
    kafka_bootstrap: str, unique_name: str
) -> None:
    stream = EventStream()
    events = [*shop(stream, "shop"), *changes(stream, "shop")]
    run(make_sink(kafka_bootstrap, unique_name), events)
    rows = read(kafka_bootstrap, f"{unique_name}.shop.k", 17) + read(
        kafka_bootstrap, f"{unique_name}.shop.n", 3
    )
    needed = {m.value[2:10].hex() for m in rows} | {m.key[2:10].hex() for m in rows if m.key}
    assert all(m.value[:2] == b"\xc3\x01" for m in rows)
    assert len(needed) == 3  # k's key and envelope, n's envelope
    decoder = Decoder(None, schemas_of(kafka_bootstrap, unique_name, needed))
    records = [decoder.decode(m.value)[1] for m in rows]
    expected = sorted(e.commit_ts for e in events if isinstance(e, TxnEvent) for _ in range(e.row_count))
    assert sorted(r["source"]["commit_ts"] for r in records) == expected
    keys = {decoder.decode(m.key)[1]["id"] for m in rows if m.key}
    assert keys == {1, 2, 3, 4, 5, 6}


@pytest.mark.parametrize("mode", ["key", "table", "commit-ts"])
def test_partition_by(kafka_bootstrap: str, unique_name: str, mode: str) -> None:
    stream = EventStream()
    events = [*shop(stream, "shop"), *changes(stream, "shop")]
    run(make_sink(kafka_bootstrap, unique_name, **{"partition-by": mode, "partitions": 3}), events)
    messages = read(kafka_bootstrap, f"{unique_name}.shop.k", 17)
    for message in messages:
        commit_ts = int(message.headers["bridge.commit-ts"])
        if mode == "key":
            expected = zlib.crc32((message.key or b"")[10:]) % 3
        elif mode == "table":
            expected = zlib.crc32(b"shop.k") % 3
        else:
            expected = commit_ts % 3
        assert message.partition == expected
    if mode == "key":
        assert len({m.partition for m in messages}) > 1  # six keys spread out


class Acks:
    """The broker's delivery reports of the sink's messages: (kind, topic, partition, offset, key, ts)."""

    def __init__(self, sink: KafkaSink) -> None:
        self.seen: list[tuple[str, str, int, int, bytes | None, int]] = []
        sink.on_acknowledged = self.note

    def note(self, kind: str, ts: int, message: Message) -> None:
        partition, offset = message.partition(), message.offset()
        assert partition is not None and offset is not None, "a delivery report names where it went"
        self.seen.append((kind, message.topic() or "", partition, offset, message.key(), ts))

    def of(self, kind: str) -> Iterator[tuple[str, int, int, bytes | None, int]]:
        """(topic, partition, offset, key, ts) of each acknowledged message of ``kind``."""
        for seen_kind, topic, partition, offset, key, ts in self.seen:
            if seen_kind == kind:
                yield topic, partition, offset, key, ts


def test_tombstones_follow_each_delete_with_its_key(kafka_bootstrap: str, unique_name: str) -> None:
    stream = EventStream()
    events = [*shop(stream, "shop"), *changes(stream, "shop")]
    sink = make_sink(kafka_bootstrap, unique_name, tombstones=True)
    acks = Acks(sink)
    run(sink, events)
    topic = f"{unique_name}.shop.k"
    rows = read(kafka_bootstrap, topic, 17)
    deletes = [m for m in rows if m.headers["bridge.commit-ts"] == str(events[4].commit_ts)]
    assert len(deletes) == 1
    delete = deletes[0]
    tombstones = list(acks.of("tombstone"))
    assert len(tombstones) == 1  # one delete on the keyed table; none for the keyless one
    t_topic, t_partition, t_offset, t_key, t_ts = tombstones[0]
    # Right after the delete, in its partition, with its key.
    assert (t_topic, t_partition, t_offset) == (topic, delete.partition, delete.offset + 1)
    assert t_key == delete.key and t_ts == events[4].commit_ts
    assert delete.offset + 1 not in {m.offset for m in rows if m.partition == delete.partition}


def test_ddl_events_go_to_the_ddl_topic_and_create_table_topics_first(
    kafka_bootstrap: str, unique_name: str
) -> None:
    stream = EventStream()
    create = stream.create(table_schema("shop", "k", [("id", T.BIGINT), ("v", T.VARCHAR)], key=["id"]))
    insert = stream.inserts("shop.k", [(1, "a")])
    altered = stream.schema("shop", "k")
    altered.columns.add(id=3, name="note", type=T.VARCHAR, nullable=True)
    altered.max_column_id = 3
    alter = stream.alter(altered)
    renamed = stream.schema("shop", "k")
    renamed.table = "k2"
    rename = stream.ddl(
        row_pb2.SchemaChange(
            kind=row_pb2.SchemaChange.RENAME_TABLE,
            db="shop",
            table="k2",
            old_db="shop",
            old_table="k",
            table_schema=renamed,
        ),
        "RENAME TABLE k TO k2",
    )
    drop = stream.ddl(row_pb2.SchemaChange(kind=row_pb2.SchemaChange.DROP_TABLE, db="shop", table="k2"))
    url = f"mock://{unique_name}"
    run(
        make_sink(kafka_bootstrap, unique_name, **{"schema-registry-url": url}),
        [create, insert, alter, rename, drop],
    )
    deserialize = AvroDeserializer(schema_registry_client(url))
    messages = read(kafka_bootstrap, f"{unique_name}._ddl", 4)
    records = [deserialize(m.value, SerializationContext(m.topic, MessageField.VALUE)) for m in messages]
    assert [r["kind"] for r in records] == ["CREATE_TABLE", "ALTER_TABLE", "RENAME_TABLE", "DROP_TABLE"]
    assert [r["commit_ts"] for r in records] == [e.commit_ts for e in (create, alter, rename, drop)]
    assert messages[0].headers == {
        "bridge.kind": "ddl",
        "bridge.commit-ts": str(create.commit_ts),
    }
    assert [r["topic"] for r in records] == [f"{unique_name}.shop.{t}" for t in ("k", "k", "k2", "k2")]
    assert records[2]["old_table"] == "k" and records[2]["query"] == "RENAME TABLE k TO k2"
    schema = row_pb2.TableSchema.FromString(records[1]["table_schema"])
    assert [c.name for c in schema.columns] == ["id", "v", "note"] and records[3]["table_schema"] == b""
    assert records[0]["cluster_id"] == 7 and records[0]["ts_ms"] == create.commit_ts >> 18
    # The renamed table's topic exists (created before its RENAME event), empty so far.
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_name})
    try:
        assert f"{unique_name}.shop.k2" in consumer.list_topics(timeout=10).topics
    finally:
        consumer.close()


def test_resolved_watermarks_reach_every_partition_after_every_row_they_cover(
    kafka_bootstrap: str, unique_name: str
) -> None:
    stream = EventStream()
    # A table created before this sink started: known only from the drainer's schema snapshot.
    tracker = SchemaTracker()
    early = table_schema("shop", "early", [("id", T.BIGINT)], key=["id"], table_id=9)
    tracker.apply(row_pb2.SchemaChange(kind=row_pb2.SchemaChange.CREATE_TABLE, db="shop", table="early",
                                       table_schema=early))  # fmt: skip
    ddl = shop(stream, "shop")
    txns = changes(stream, "shop")
    batches = [txns[0:2], txns[2:4], txns[4:]]
    sink = make_sink(kafka_bootstrap, unique_name, **{"resolved-interval": "0s"})
    acks = Acks(sink)
    sink.open(context(0, tracker.snapshot()))
    sink.write(ddl)
    positions = []
    for batch in batches:
        sink.write([*batch, ResolvedEvent(batch[-1].commit_ts + 3)])
        positions.append(sink.flush())
    sink.close()
    assert positions == [b[-1].commit_ts + 3 for b in batches]

    watermarks: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for topic, partition, offset, key, resolved in acks.of("resolved"):
        assert key is None
        watermarks.setdefault((topic, partition), []).append((offset, resolved))
    topics = {f"{unique_name}.shop.k": 3, f"{unique_name}.shop.n": 3, f"{unique_name}.shop.early": 3,
              f"{unique_name}._ddl": 1}  # fmt: skip
    assert set(watermarks) == {(t, p) for t, n in topics.items() for p in range(n)}
    for marks in watermarks.values():
        assert [ts for _, ts in sorted(marks)] == sorted(ts for _, ts in marks)  # monotonic in each partition
        assert max(ts for _, ts in marks) == positions[-1]
    rows = read(kafka_bootstrap, f"{unique_name}.shop.k", 17) + read(
        kafka_bootstrap, f"{unique_name}.shop.n", 3
    )
    for row in rows:
        commit_ts = int(row.headers["bridge.commit-ts"])
        for offset, resolved in watermarks[(row.topic, row.partition)]:
            if commit_ts <= resolved:
                assert row.offset < offset  # every change it covers was written before it


def test_an_oversize_message_fails_naming_table_and_commit_ts(kafka_bootstrap: str, unique_name: str) -> None:
    stream = EventStream()
    events = [*shop(stream, "shop"), stream.inserts("shop.k", [(1, "x" * 5000, 1)])]
    sink = make_sink(kafka_bootstrap, unique_name, **{"max-message-bytes": 2048})
    sink.open(context())
    try:
        with pytest.raises(
            SinkApplyError, match=rf"commit_ts {events[-1].commit_ts}: table shop.k: .*max-message-bytes"
        ):
            sink.write(events)
        # The transaction is incomplete in the topic: a flush never reports it (nor anything after it).
        with pytest.raises(SinkUnavailable, match=rf"commit_ts {events[-1].commit_ts}: table shop.k"):
            sink.flush()
    finally:
        sink.close()


def test_key_only_replaces_an_oversize_message(kafka_bootstrap: str, unique_name: str) -> None:
    stream = EventStream()
    events = [*shop(stream, "shop"), stream.inserts("shop.k", [(1, "x" * 5000, 1), (2, "small", 2)])]
    url = f"mock://{unique_name}"
    config = {"max-message-bytes": 2048, "oversize": "key-only", "schema-registry-url": url}
    assert run(make_sink(kafka_bootstrap, unique_name, **config), events) == events[-1].commit_ts
    deserialize = AvroDeserializer(schema_registry_client(url))
    messages = read(kafka_bootstrap, f"{unique_name}.shop.k", 2)
    by_id = {}
    for m in messages:
        key = deserialize(m.key, SerializationContext(m.topic, MessageField.KEY))
        by_id[key["id"]] = (
            m.headers,
            deserialize(m.value, SerializationContext(m.topic, MessageField.VALUE)),
        )
    big_headers, big = by_id[1]
    assert big_headers["bridge.oversize"] == "1"
    assert big["op"] == "c" and big["before"] is None and big["after"] is None
    assert big["source"]["commit_ts"] == events[-1].commit_ts and big["source"]["pos"] == 0
    small_headers, small = by_id[2]
    assert "bridge.oversize" not in small_headers and small["after"]["name"] == "small"


def test_schema_evolution_old_and_new_messages_both_decode(kafka_bootstrap: str, unique_name: str) -> None:
    stream = EventStream()
    create = stream.create(table_schema("shop", "k", [("id", T.BIGINT), ("v", T.VARCHAR)], key=["id"]))
    before = stream.inserts("shop.k", [(1, "old")])
    altered = stream.schema("shop", "k")
    altered.columns.add(id=3, name="note", type=T.VARCHAR, nullable=True)
    altered.max_column_id = 3
    alter = stream.alter(altered)
    after = stream.txn([("update", "shop.k", (1, "old", None), (1, "new", "hello"))])
    url = f"mock://{unique_name}"
    events: list[Event] = [create, before, alter, after]
    run(make_sink(kafka_bootstrap, unique_name, **{"schema-registry-url": url}), events)
    registry = schema_registry_client(url)
    topic = f"{unique_name}.shop.k"
    versions = registry.get_versions(f"{topic}-value")
    assert len(versions) == 2  # the registry accepted the new version as compatible
    deserialize = AvroDeserializer(registry)
    messages = read(kafka_bootstrap, topic, 2)
    old, new = sorted(
        (deserialize(m.value, SerializationContext(topic, MessageField.VALUE)) for m in messages),
        key=lambda v: v["source"]["commit_ts"],
    )
    assert old["after"] == {"id": 1, "v": "old"}
    assert new["before"] == {"id": 1, "v": "old", "note": None} and new["after"] == {
        "id": 1,
        "v": "new",
        "note": "hello",
    }
    # The same in single-object encoding, decoded with the published writer schemas.
    prefix = f"{unique_name}so"
    run(make_sink(kafka_bootstrap, prefix), events)
    rows = read(kafka_bootstrap, f"{prefix}.shop.k", 2)
    decoder = Decoder(None, schemas_of(kafka_bootstrap, prefix, {m.value[2:10].hex() for m in rows}))
    decoded = sorted((decoder.decode(m.value)[1] for m in rows), key=lambda v: v["source"]["commit_ts"])
    assert decoded[0]["after"] == {"id": 1, "v": "old"} and decoded[1]["after"]["note"] == "hello"
