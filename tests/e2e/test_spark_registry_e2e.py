"""The Spark index job over the registry encoding (Confluent wire format) end to end:
`binlog-bridge load` → three pumps → the drainer with the kafka sink and a schema registry → the
real broker → the index job and the snapshot job (available-now, the run's SparkSession) →
``bridge.diff`` of the index and of the snapshot's Parquet against the upstream: equal.

What is possible here: the drainer runs in this process with confluent-kafka's ``mock://``
registry (as in test_kafka_registry_e2e.py: there is no Schema Registry server on this machine),
and Spark's Python workers, other processes, fetch the schema ids through a real
``SchemaRegistryClient`` from that mock served over HTTP (tests/support/spark_registry.py). What
is not: a real registry's compatibility checks and subject API, which the Spark side never uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bridge.kafkaclient import schema_registry_client
from spark_consumers.jobs import run
from tests.e2e.test_kafka_registry_e2e import (  # noqa: F401 (fixtures used by name)
    DrainerThread,
    cluster,
    drainer,
    registry_url,
    upstream,
)
from tests.e2e.test_pipeline import LOAD_TABLES, run_load
from tests.e2e.test_spark_e2e import assert_found_by_key, job
from tests.support.spark_registry import http_registry
from tests.support.spark_sources import IndexSource, SnapshotSource, assert_equal_to_upstream

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(420)]


def test_registry_encoded_topics_index_and_snapshot_equal_to_the_upstream(
    spark: Any,
    cluster: Any,  # noqa: F811
    drainer: DrainerThread,  # noqa: F811
    upstream: str,  # noqa: F811
    kafka_bootstrap: str,
    unique_name: str,
    registry_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    run_load(cluster, upstream, seconds=6)
    final_ts = cluster.timestamp()
    cluster.wait_caught_up(final_ts, timeout=180, on_poll=drainer.check)
    with http_registry(schema_registry_client(registry_url)) as url:
        config = job("index", kafka_bootstrap, unique_name, tmp_path, "index", available_now=True,
                     schema_registry_url=url)  # fmt: skip
        assert run(spark, config) == 0
        snapshot = job("snapshot", kafka_bootstrap, unique_name, tmp_path, "snapshot", available_now=True,
                       schema_registry_url=url)  # fmt: skip
        assert run(spark, snapshot) == 0
    drainer.stop()
    assert_equal_to_upstream(upstream, IndexSource(tmp_path / "index"), LOAD_TABLES)
    assert assert_found_by_key(upstream, tmp_path / "index") > 0
    assert_equal_to_upstream(upstream, SnapshotSource(tmp_path / "snapshot"), LOAD_TABLES)
