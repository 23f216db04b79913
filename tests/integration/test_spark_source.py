"""The bridge_changes data source against the real broker and the run's SparkSession: end offsets
found by fetching (Tansu's ListOffsets answers wrongly), batch reads of whole topics and of JSON
offset ranges, and a streaming read bounded per trigger."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from bench.spark import produce
from spark_consumers.source import kafka

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

ROWS = 900


@pytest.fixture(scope="module")
def topic() -> str:
    import os

    bootstrap = os.environ.get("BRIDGE_TEST_KAFKA_BOOTSTRAP", "127.0.0.1:19092")
    return produce(bootstrap, f"s{uuid.uuid4().hex[:10]}", ROWS, updates=0.2, partitions=3)


def read(spark: Any, bootstrap: str, topics: str, **options: str) -> Any:
    reader = (
        spark.read.format("bridge_changes").option("bootstrap.servers", bootstrap).option("topics", topics)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_end_offsets_come_from_fetches(kafka_bootstrap: str, topic: str) -> None:
    probe = kafka.EndProbe(kafka_bootstrap)
    try:
        partitions = kafka.list_partitions(probe.consumer, [topic.split(".")[0] + ".*"], True)
        assert partitions == {topic: [0, 1, 2]}  # no _ddl topic here; _schemas never a row topic
        ends = probe.ends(partitions)
        assert sum(ends[topic].values()) == ROWS
        assert probe.ends(partitions) == ends  # asked again: nothing new, the same ends
    finally:
        probe.close()


def test_a_batch_read_gives_every_change_once_with_its_place(
    spark: Any, kafka_bootstrap: str, topic: str
) -> None:
    rows = read(spark, kafka_bootstrap, topic).collect()
    assert len(rows) == ROWS
    assert {(r.topic, r.partition, r.offset) for r in rows} == {
        (topic, p, o) for p in range(3) for o in range(max(r.offset for r in rows if r.partition == p) + 1)
    }
    updates = [r for r in rows if r.op == "u"]
    assert len(updates) == ROWS - int(ROWS * 0.8)
    sample = updates[0]
    assert (sample.db, sample.table) == ("bench", "orders")
    assert json.loads(sample.after)["id"] == json.loads(sample.key)["id"]
    assert json.loads(sample.types)["price"] == "decimal"


def test_a_batch_read_of_an_offset_range(spark: Any, kafka_bootstrap: str, topic: str) -> None:
    start, end = json.dumps({topic: {"0": 10, "1": 0}}), json.dumps({topic: {"0": 15, "1": 3}})
    frame = read(spark, kafka_bootstrap, topic, startingOffsets=start, endingOffsets=end)
    got = sorted((r.partition, r.offset) for r in frame.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 15)] + [(1, o) for o in range(3)]


def test_a_stream_is_cut_into_triggers_of_at_most_max_offsets(
    spark: Any, kafka_bootstrap: str, topic: str, tmp_path: Path
) -> None:
    sizes: list[int] = []
    stream = (
        spark.readStream.format("bridge_changes").option("bootstrap.servers", kafka_bootstrap)
        .option("topics", topic).option("maxOffsetsPerTrigger", "400").load()
    )  # fmt: skip
    query = (
        stream.writeStream.foreachBatch(lambda frame, _: sizes.append(frame.count()))
        .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination()
    assert sum(sizes) == ROWS and max(sizes) <= 400 and len([s for s in sizes if s]) >= 3, sizes
