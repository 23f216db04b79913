"""``binlog-bridge bench bigtxn`` with a small transaction, through the Kafka sink and ``consume --apply``
into MariaDB against the real broker: it runs end to end, checks the downstream (row count and column
sums) and prints its JSON line with both peak RSS figures."""

from __future__ import annotations

import json

import pytest

from tests.support.process import run_cli

pytestmark = [pytest.mark.kafka, pytest.mark.mysql]


def test_bench_bigtxn_through_kafka_and_consume_prints_json(kafka_bootstrap: str) -> None:
    result = run_cli(
        "bench", "bigtxn", "--sink", "kafka", "--rows", "3000", "--bootstrap-servers", kafka_bootstrap,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["name"] == "bigtxn" and figures["ceiling"] == 512.0
    assert figures["value"] == figures["drainer_peak_rss_mib"] > 0
    assert figures["consume_peak_rss_mib"] > 0
    assert figures["kafka_row_messages_acknowledged"] == 3000
    assert figures["verified"] == {"rows": 3000, "checked": "row count, SUM(customer), SUM(weight)"}
    assert "verified: 3,000 rows" in result.stderr


def test_bench_bigtxn_refuses_a_sqlite_dsn() -> None:
    result = run_cli("bench", "bigtxn", "--dsn", "sqlite:///tmp/x.db", timeout=60)
    assert result.returncode != 0
    assert "mysql:// DSN" in result.stderr
