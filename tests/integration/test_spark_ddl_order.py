"""DDL against the row changes around it, in the index job (real broker, the run's one Spark session).

The messages are produced here as the Kafka sink encodes them (single-object encoding, partitioned
by key, ``bridge.kind`` headers, DDL on ``<prefix>._ddl`` with its ``bridge.commit-ts``, resolved-ts
watermarks in every partition), so each case is exact and needs no timing:

* a RENAME read before an older row change of the old name reaches its topic (the sink produces in
  commit order, but a batch is planned from partition ends probed at slightly different instants).
  The job must hold the DDL back until the sink's watermark shows every older change is in Kafka,
  so that change is applied under the old name first and moves with the rename;
* (the direct mode) an update that changes a key, followed by a RENAME of its table in the same
  micro-batch: the old key's document lives in another shard than the update's partition, and must
  not reappear under the new name.

Each ends with the index's documents compared to what the upstream holds.
"""

from __future__ import annotations

import uuid
import zlib
from pathlib import Path
from typing import Any, Literal

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.drainer import row_values, table_schema
from bridge.avro import DDL_SCHEMA, SingleObjectCodec, ddl_record, fingerprint_hex, source_record, table_avro
from bridge.proto import row_pb2
from bridge.tso import compose
from spark_consumers.config import JobConfig
from spark_consumers.jobs import run
from tests.e2e.test_spark_e2e import documents
from tests.e2e.test_spark_jobs import START_GUARD
from tests.e2e.test_spark_jobs import index_job as job_process

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]

PARTITIONS = 2


def ts(n: int) -> int:
    return compose(1_700_000_000_000 + n, 1)


class Upstream:
    """``bench.orders`` (renamed to ``bench.orders2`` by the test) written to Kafka as the sink
    writes it, and what the upstream holds (table -> key -> row)."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.prefix = prefix
        self.ddl_topic, self.schemas = f"{prefix}._ddl", f"{prefix}._schemas"
        self.topics = {t: f"{prefix}.bench.{t}" for t in ("orders", "orders2")}
        admin = AdminClient({"bootstrap.servers": bootstrap})
        wanted = [NewTopic(t, PARTITIONS, 1) for t in self.topics.values()]
        wanted += [NewTopic(self.ddl_topic, 1, 1), NewTopic(self.schemas, 1, 1)]
        for future in admin.create_topics(wanted).values():
            future.result(timeout=30)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.codec = SingleObjectCodec(self._publish)
        self.rows: dict[str, dict[int, tuple[object, ...]]] = {"orders": {}, "orders2": {}}

    def _publish(self, fingerprint: int, schema_json: str) -> None:
        self.producer.produce(
            self.schemas, key=fingerprint_hex(fingerprint).encode(), value=schema_json.encode()
        )

    def _schema(self, table: str) -> row_pb2.TableSchema:
        schema = table_schema()
        schema.table = table
        return schema

    def key_bytes(self, table: str, row: tuple[object, ...]) -> bytes:
        avro = table_avro(self._schema(table))
        assert avro.key_schema is not None
        topic = self.topics[table]
        return self.codec.encode(f"{topic}-key", avro.key_schema, avro.key_record(row))

    def partition_of(self, table: str, row: tuple[object, ...]) -> int:
        return zlib.crc32(self.key_bytes(table, row)[10:]) % PARTITIONS

    def change(
        self, table: str, op: Literal["insert", "update", "delete"], before: Any, after: Any, at: int
    ) -> None:
        avro = table_avro(self._schema(table))
        topic = self.topics[table]
        source = source_record(cluster_id=1, db="bench", table=table, start_ts=at - 1, commit_ts=at, pos=0,
                               last=True)  # fmt: skip
        row = after if after is not None else before
        value = self.codec.encode(
            f"{topic}-value", avro.value_schema, avro.envelope(op, before, after, source, 0)
        )
        key = self.key_bytes(table, row)
        self.producer.produce(topic, key=key, value=value, partition=zlib.crc32(key[10:]) % PARTITIONS,
                              headers=[("bridge.kind", b"row")])  # fmt: skip
        if before is not None:
            self.rows[table].pop(int(before[0]), None)
        if after is not None:
            self.rows[table][int(after[0])] = after

    def rename(self, old: str, new: str, at: int) -> None:
        change = row_pb2.SchemaChange(kind=row_pb2.SchemaChange.RENAME_TABLE, db="bench", table=new,
                                      old_db="bench", old_table=old)  # fmt: skip
        change.table_schema.CopyFrom(self._schema(new))
        record = ddl_record(change, cluster_id=1, start_ts=at - 1, commit_ts=at,
                            query=f"RENAME TABLE {old} TO {new}", topic=self.topics[new])  # fmt: skip
        value = self.codec.encode(f"{self.ddl_topic}-value", DDL_SCHEMA, record)
        headers: list[tuple[str, str | bytes | None]] = [
            ("bridge.kind", b"ddl"),
            ("bridge.commit-ts", str(at).encode()),
        ]
        self.producer.produce(self.ddl_topic, value=value, partition=0, headers=headers)
        self.rows[new] = self.rows.pop(old)
        self.rows[old] = {}

    def resolved(self, at: int) -> None:
        """A watermark at ``at`` in every partition (of the DDL topic too), as the sink publishes it."""
        headers: list[tuple[str, str | bytes | None]] = [
            ("bridge.kind", b"resolved"),
            ("bridge.resolved-ts", str(at).encode()),
        ]
        for topic in (self.ddl_topic, *self.topics.values()):
            for partition in range(1 if topic == self.ddl_topic else PARTITIONS):
                self.producer.produce(topic, partition=partition, headers=headers)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0

    def expected(self) -> dict[str, str]:
        """Live document id -> its row's id, as the upstream has it."""
        return {f"bench/{t}/{k}": str(k) for t, rows in self.rows.items() for k in rows}


def index_job(spark: Any, bootstrap: str, prefix: str, work: Path, mode: str) -> None:
    config = JobConfig(kind="index", bootstrap_servers=bootstrap, topics=[f"{prefix}.*"],
                       output=work / "index", checkpoint=work / "checkpoint", available_now=True,
                       index_mode=mode)  # fmt: skip
    assert run(spark, config) == 0


def live(work: Path) -> dict[str, tuple[Any, ...]]:
    return {doc: found for doc, found in documents(work / "index").items() if found[0]}


@pytest.fixture
def prefix() -> str:
    return f"d{uuid.uuid4().hex[:10]}"


def rename_ahead_of_its_watermark(up: Upstream) -> Upstream:
    """Four inserts of ``orders`` (commit_ts 10-13), a watermark at 13, then the rename to
    ``orders2`` at 20: it reaches _ddl before an update of key 1 at 15, which the watermark (13)
    says may still come."""
    for n in range(4):
        up.change("orders", "insert", None, row_values(n), ts(10 + n))
    up.resolved(ts(13))
    up.rename("orders", "orders2", ts(20))
    up.flush()
    return up


@pytest.mark.parametrize("mode", ["direct", "shuffle"])
def test_a_rename_waits_for_an_older_change_of_the_old_name_still_on_its_way(
    spark: Any, kafka_bootstrap: str, prefix: str, mode: str, tmp_path: Path
) -> None:
    up = rename_ahead_of_its_watermark(Upstream(kafka_bootstrap, prefix))
    index_job(spark, kafka_bootstrap, prefix, tmp_path, mode)
    # the late update (committed before the rename, produced after it), then the sink's watermark
    updated = (*row_values(1)[:4], "sku-late-update", *row_values(1)[5:])
    up.change("orders", "update", row_values(1), updated, ts(15))
    up.rows["orders"], up.rows["orders2"][1] = {}, updated  # the upstream renamed the table since
    up.resolved(ts(25))
    up.change("orders2", "insert", None, row_values(9), ts(30))
    up.resolved(ts(30))
    up.flush()
    index_job(spark, kafka_bootstrap, prefix, tmp_path, mode)
    found = live(tmp_path)
    assert sorted(found) == sorted(up.expected())
    assert "sku-late-update" in found["bench/orders2/1"][3]


def test_a_key_change_then_a_rename_in_one_batch_leaves_no_old_key_under_the_new_name(
    spark: Any, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    up = Upstream(kafka_bootstrap, prefix)
    old = row_values(0)
    # a new key whose partition is not the old key's: its delete crosses shards in the direct mode
    new_id = next(
        i for i in range(1, 100) if up.partition_of("orders", row_values(i)) != up.partition_of("orders", old)
    )
    for n in range(3):
        up.change("orders", "insert", None, row_values(n), ts(10 + n))
    up.resolved(ts(12))
    up.flush()
    index_job(spark, kafka_bootstrap, prefix, tmp_path, "direct")
    assert len(live(tmp_path)) == 3
    moved = (new_id, *old[1:])
    if new_id < 3:
        up.change("orders", "delete", row_values(new_id), None, ts(14))
    up.change("orders", "update", old, moved, ts(15))
    up.rename("orders", "orders2", ts(20))
    up.resolved(ts(25))
    up.flush()
    index_job(spark, kafka_bootstrap, prefix, tmp_path, "direct")
    found = live(tmp_path)
    assert sorted(found) == sorted(up.expected())
    assert "bench/orders2/0" not in found


def test_a_held_back_rename_survives_a_sigkilled_driver(
    kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """The job as a user runs it: a batch holds the rename back, the driver is SIGKILLed, the
    late change and its watermark come, and the job restarted from its checkpoint ends equal."""
    up = rename_ahead_of_its_watermark(Upstream(kafka_bootstrap, prefix))
    first = job_process(kafka_bootstrap, f"{prefix}.*", tmp_path, "--trigger-interval", "1s")
    try:
        first.wait_for_line(r"^batch 0: 4 rows", timeout=START_GUARD)  # the rename held back
    finally:
        first.kill()
    assert len(live(tmp_path)) == 4 and all("/orders/" in doc for doc in live(tmp_path))
    updated = (*row_values(2)[:4], "sku-late-update", *row_values(2)[5:])
    up.change("orders", "update", row_values(2), updated, ts(15))
    up.rows["orders"], up.rows["orders2"][2] = {}, updated
    up.resolved(ts(25))
    up.flush()
    second = job_process(kafka_bootstrap, f"{prefix}.*", tmp_path, "--available-now")
    assert second.wait(timeout=START_GUARD) == 0, second.output[-3000:]
    found = live(tmp_path)
    assert sorted(found) == sorted(up.expected())
    assert "sku-late-update" in found["bench/orders2/2"][3]
