"""``binlog-bridge consume`` against the real broker, on topics written by the contract's rules
(docs/kafka-sink.md): a table topic of 3 partitions, the DDL topic, the schemas topic (single-object
encoding), watermarks on every partition, a transaction delivered twice (as after a drainer crash).

The messages are written here with the real codec (bridge.avro) so that the consumer is tested on
its own; the end-to-end tests (tests/e2e/test_kafka_e2e.py) run it behind the real kafka sink.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bridge.avro import DDL_SCHEMA, SingleObjectCodec, ddl_record, fingerprint_hex, source_record, table_avro
from bridge.avro.tables import ChangeKind
from bridge.dsn import parse_dsn
from bridge.proto import row_pb2

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]

T = row_pb2.ColumnType
PARTITIONS = 3
HANG_GUARD = 60
Headers = list[tuple[str, str | bytes | None]]  # what Producer.produce(headers=...) takes


def items_schema(with_note: bool, db: str = "shop") -> row_pb2.TableSchema:
    schema = row_pb2.TableSchema(table_id=11, db=db, table="items")
    schema.columns.add(id=1, name="id", type=T.BIGINT)
    schema.columns.add(id=2, name="name", type=T.VARCHAR, length=32, nullable=True)
    schema.columns.add(id=3, name="price", type=T.DECIMAL, precision=10, scale=2, nullable=True)
    schema.columns.add(id=4, name="created", type=T.DATETIME, fsp=6, nullable=True)
    schema.columns.add(id=5, name="data", type=T.BLOB, nullable=True)
    if with_note:
        schema.columns.add(id=6, name="note", type=T.TEXT, nullable=True)
    schema.max_column_id = 6 if with_note else 5
    schema.indexes.add(name="PRIMARY", primary=True, unique=True, columns=["id"])
    return schema


class ContractWriter:
    """Writes topics as the kafka sink's contract says (single-object encoding)."""

    def __init__(self, bootstrap: str, prefix: str, db: str = "shop", topic: str = "") -> None:
        self.prefix = prefix
        self.db = db
        self.topic = topic or f"{prefix}.{db}.items"
        self.ddl_topic = f"{prefix}._ddl"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics(
            [
                NewTopic(self.topic, PARTITIONS, 1),
                NewTopic(self.ddl_topic, 1, 1),
                NewTopic(f"{prefix}._schemas", 1, 1, config={"cleanup.policy": "compact"}),
            ]
        )
        for future in futures.values():
            future.result(timeout=30)
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
        self.codec = SingleObjectCodec(self._publish)

    def _publish(self, fingerprint: int, schema_json: str) -> None:
        self.producer.produce(f"{self.prefix}._schemas", schema_json.encode(), fingerprint_hex(fingerprint))

    def ddl(self, kind: str, schema: row_pb2.TableSchema | None, ts: int, query: str) -> None:
        table = "items" if schema is not None else ""
        change = row_pb2.SchemaChange(kind=kind, db=self.db, table=table)
        if schema is not None:
            change.table_schema.CopyFrom(schema)
        topic = self.topic if schema is not None else ""
        record = ddl_record(change, cluster_id=5, start_ts=ts - 1, commit_ts=ts, query=query, topic=topic)
        value = self.codec.encode(f"{self.ddl_topic}-value", DDL_SCHEMA, record)
        self.producer.produce(self.ddl_topic, value, None, 0, headers=self._headers("ddl", ts))

    def txn(self, schema: row_pb2.TableSchema, ts: int, changes: list[tuple[ChangeKind, Any, Any]]) -> None:
        ta = table_avro(schema)
        for pos, (kind, before, after) in enumerate(changes):
            source = source_record(
                cluster_id=5, db=self.db, table="items", start_ts=ts - 1, commit_ts=ts, pos=pos,
                last=pos == len(changes) - 1,
            )  # fmt: skip
            key = self.codec.encode(f"{self.topic}-key", ta.key_schema or {}, ta.key_record(after or before))
            value = self.codec.encode(
                f"{self.topic}-value", ta.value_schema, ta.envelope(kind, before, after, source, 0)
            )
            partition = zlib.crc32(key[10:]) % PARTITIONS
            headers: Headers = [*self._headers("row", ts), ("bridge.pos", str(pos).encode())]
            self.producer.produce(self.topic, value, key, partition, headers=headers)

    def resolved(self, ts: int) -> None:
        headers: Headers = [("bridge.kind", b"resolved"), ("bridge.resolved-ts", str(ts).encode())]
        for partition in range(PARTITIONS):
            self.producer.produce(self.topic, None, None, partition, headers=headers)
        self.producer.produce(self.ddl_topic, None, None, 0, headers=headers)

    @staticmethod
    def _headers(kind: str, ts: int) -> Headers:
        return [("bridge.kind", kind.encode()), ("bridge.commit-ts", str(ts).encode())]

    def flush(self) -> None:
        assert self.producer.flush(30) == 0


def row(i: int, name: str, note: str | None = None, with_note: bool = False) -> tuple[object, ...]:
    values: tuple[object, ...] = (
        i,
        name,
        Decimal(i) / 4,
        datetime(2026, 1, 2, 3, 4, 5, i),
        bytes([i, 0, 255]),
    )
    return (*values, note) if with_note else values


def write_history(writer: ContractWriter) -> None:
    old, new = items_schema(False, writer.db), items_schema(True, writer.db)
    writer.ddl("CREATE_DATABASE", None, 90, f"CREATE DATABASE {writer.db}")
    writer.ddl("CREATE_TABLE", old, 100, "CREATE TABLE items (...)")
    writer.txn(old, 110, [("insert", None, row(i, f"n{i}")) for i in range(1, 21)])
    writer.resolved(115)
    writer.txn(old, 120, [("update", row(1, "n1"), row(1, "one")), ("delete", row(2, "n2"), None)])
    # the same transaction again: what a drainer restarted from an older checkpoint writes
    writer.txn(old, 120, [("update", row(1, "n1"), row(1, "one")), ("delete", row(2, "n2"), None)])
    writer.ddl("ALTER_TABLE", new, 130, "ALTER TABLE items ADD note TEXT")
    writer.txn(new, 140, [("insert", None, row(30, "thirty", "new column", True))])
    writer.resolved(150)
    writer.txn(new, 160, [("insert", None, row(40, "after the until-ts", None, True))])
    writer.resolved(170)
    writer.flush()


@pytest.fixture
def written(kafka_bootstrap: str, unique_name: str) -> Iterator[ContractWriter]:
    writer = ContractWriter(kafka_bootstrap, unique_name)
    write_history(writer)
    yield writer
    writer.producer.flush(5)


def consume(*args: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "bridge.cli", "consume", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD, check=False)


def target_rows(directory: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(directory / "shop.db") as conn:
        return list(conn.execute("SELECT id, name, price, note FROM items ORDER BY id"))


def test_apply_until_ts_applies_in_order_drops_the_duplicate_and_stops(
    written: ContractWriter, kafka_bootstrap: str, tmp_path: Path
) -> None:
    target = tmp_path / "replica"
    result = consume(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", written.prefix, "--apply", f"sqlite://{target}",
        "--until-ts", "150", "--idle-timeout", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "applied 23 row changes and 3 DDL up to commit_ts 150" in result.stdout, result.stdout
    got = target_rows(target)
    assert len(got) == 20  # 20 inserted, 1 deleted, 1 inserted after the ALTER; 40 is past --until-ts
    assert got[0] == (1, "one", "0.25", None)  # the sqlite sink keeps decimals exact, as text
    assert got[-1] == (30, "thirty", "7.50", "new column")
    assert 2 not in [r[0] for r in got]
    # run again: the target remembers commit_ts 150; only the rest is applied
    again = consume(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", written.prefix, "--apply", f"sqlite://{target}",
        "--until-ts", "170", "--idle-timeout", "30",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "applied 1 row changes and 0 DDL up to commit_ts 170" in again.stdout, again.stdout
    assert target_rows(target)[-1] == (40, "after the until-ts", "10.00", None)


def test_print_mode_shows_json_lines_of_both_schema_versions(
    written: ContractWriter, kafka_bootstrap: str
) -> None:
    result = consume(
        "--bootstrap-servers", kafka_bootstrap, "--topic", written.topic, "--from-beginning", "--resolved",
        "--until-ts", "170", "--idle-timeout", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    rows = [line for line in lines if "op" in line]
    assert len(rows) == 20 + 2 + 2 + 1 + 1
    assert sum("resolved_ts" in line for line in lines) == 3 * PARTITIONS
    first = next(r for r in rows if r["after"] and r["after"]["id"] == 3)
    assert first["op"] == "c" and first["key"] == {"id": 3} and first["before"] is None
    assert first["after"]["price"] == "0.75"  # decimals as exact strings
    assert first["after"]["data"] == "AwD/"  # bytes as base64
    assert first["after"]["created"] == "2026-01-02T03:04:05.000003"
    assert first["source"]["commit_ts"] == 110 and first["topic"] == written.topic
    newer = next(r for r in rows if r["after"] and r["after"]["id"] == 30)
    assert newer["after"]["note"] == "new column"  # the schema after the ALTER decodes too


def test_unreachable_broker_and_bad_dsn_are_one_line_errors(tmp_path: Path) -> None:
    bad = consume("--bootstrap-servers", "127.0.0.1:1", "--prefix", "p", "--apply", "postgres://x")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "--apply" in bad.stderr
    down = consume(
        "--bootstrap-servers", "127.0.0.1:1", "--prefix", "p", "--apply", f"sqlite://{tmp_path / 'r'}"
    )
    assert down.returncode == 3, down.stderr  # a dependency could not be reached
    assert "127.0.0.1:1" in down.stderr and "Traceback" not in down.stderr, down.stderr


def test_broker_errors_reported_during_a_poll_are_logged_after_it(caplog: pytest.LogCaptureFixture) -> None:
    """librdkafka's error callback only queues the error; the reader logs it once the call returned."""
    from bridge.apps.consume.reader import ChangeReader

    reader = ChangeReader("127.0.0.1:1", topics=["nothing.here"], registry_url="mock://consume-errors")
    try:
        with caplog.at_level(logging.WARNING, logger="bridge.apps.consume.reader"):
            # Nothing listens on port 1: the consumer soon says all brokers are down. A poll may
            # return between its first error (the refused connection, logged at debug) and that
            # one, so the loop waits for the warning itself (a hang guard of 20 polls).
            for _ in range(20):
                assert reader.poll(0.5) == []
                if "no broker of" in caplog.text:
                    break
        assert reader.broker_errors >= 1
        assert "no broker of 127.0.0.1:1 answers; retrying" in caplog.text
    finally:
        reader.close()


def test_a_consumer_config_file_reaches_librdkafka_and_a_bad_one_is_a_one_line_error(
    written: ContractWriter, kafka_bootstrap: str, tmp_path: Path
) -> None:
    config = tmp_path / "consumer.properties"
    config.write_text(
        "# as for kafka-console-consumer --consumer.config\nclient.id=${CONSUME_CLIENT_ID}\ndebug=metadata\n"
    )
    argv = [
        sys.executable, "-m", "bridge.cli", "--log-level", "debug", "consume",
        "--bootstrap-servers", kafka_bootstrap, "--topic", written.topic, "--from-beginning",
        "--until-ts", "170", "--idle-timeout", "30", "--consumer-config", str(config),
    ]  # fmt: skip
    env = {**os.environ, "CONSUME_CLIENT_ID": "consume-settings-test"}
    result = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD, check=False, env=env)
    assert result.returncode == 0, result.stderr
    assert len([line for line in result.stdout.splitlines() if '"op"' in line]) == 26
    # librdkafka's debug lines (shown at --log-level debug) name the client by its client.id
    assert "consume-settings-test" in result.stderr, result.stderr[-2000:]

    config.write_text("no.such.librdkafka.setting=1\n")
    bad = consume(
        "--bootstrap-servers", kafka_bootstrap, "--topic", written.topic, "--consumer-config", str(config)
    )
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0, bad.stderr
    assert "--consumer-config" in bad.stderr and "no.such.librdkafka.setting" in bad.stderr, bad.stderr


@pytest.mark.mysql
def test_apply_to_mysql_through_the_mysql_sink(kafka_bootstrap: str, unique_name: str) -> None:
    server = parse_dsn(os.environ.get("BRIDGE_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306/"), key="dsn")
    writer = ContractWriter(kafka_bootstrap, unique_name, db=f"{unique_name}_shop")
    write_history(writer)
    progress = f"{unique_name}_progress"
    auth = server.user + (f":{server.password}" if server.password else "")
    target = f"mysql://{auth}@{server.host}:{server.port}/"
    conn = pymysql.connect(host=server.host, port=server.port, user=server.user, password=server.password)
    try:
        for until in ("150", "170"):  # twice: the second run resumes after what the first applied
            result = consume(
                "--bootstrap-servers", kafka_bootstrap, "--prefix", unique_name, "--apply", target,
                "--progress-schema", progress, "--until-ts", until, "--idle-timeout", "30",
            )  # fmt: skip
            assert result.returncode == 0, result.stderr[-4000:]
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT id, name, price, note FROM `{writer.db}`.items ORDER BY id")
            got = list(cursor.fetchall())
        assert len(got) == 21
        assert got[0] == (1, "one", Decimal("0.25"), None)
        assert got[-2:] == [
            (30, "thirty", Decimal("7.50"), "new column"),
            (40, "after the until-ts", Decimal("10.00"), None),
        ]
    finally:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{writer.db}`")
            cursor.execute(f"DROP DATABASE IF EXISTS `{progress}`")
        conn.close()


def test_an_unknown_schema_is_a_one_line_error_naming_the_message(
    kafka_bootstrap: str, unique_name: str
) -> None:
    topic = f"{unique_name}.shop.items"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    created = admin.create_topics([NewTopic(topic, 1, 1), NewTopic(f"{unique_name}._schemas", 1, 1)])
    for future in created.values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    # single-object framing with a fingerprint no schema was published for
    producer.produce(topic, b"\xc3\x01" + bytes(range(8)) + b"\x02", None, 0)
    assert producer.flush(30) == 0
    result = consume(
        "--bootstrap-servers", kafka_bootstrap, "--topic", topic, "--from-beginning", "--schema-wait", "1",
        "--idle-timeout", "30",
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("binlog-bridge consume:")]
    assert len(errors) == 1, result.stderr
    assert f"topic {topic} partition 0 offset 0" in errors[0] and "fingerprint 0001020304050607" in errors[0]


def test_a_custom_topic_template_is_found_through_the_ddl_events(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    """A table topic outside the prefix (topic-template "{db}-{table}"-like) is read because the CREATE
    TABLE event names it."""
    writer = ContractWriter(kafka_bootstrap, unique_name, topic=f"custom-{unique_name}-items")
    write_history(writer)
    target = tmp_path / "replica"
    result = consume(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", unique_name, "--apply", f"sqlite://{target}",
        "--until-ts", "170", "--idle-timeout", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"reading topic custom-{unique_name}-items" in result.stderr
    assert len(target_rows(target)) == 21
