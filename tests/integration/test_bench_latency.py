"""``binlog-bridge bench latency`` for a few seconds at a light load, through one drainer into MariaDB
and the Kafka-compatible broker: every offered row reaches both sinks, the JSON line has its shape
(percentiles per sink, offered and achieved rate, cores, load average); bad options are refused.
No timing is asserted."""

from __future__ import annotations

import json

import pytest

from tests.support.process import run_cli

pytestmark = [pytest.mark.mysql, pytest.mark.kafka]


def test_bench_latency_every_row_reaches_both_sinks(kafka_bootstrap: str) -> None:
    result = run_cli(
        "bench", "latency", "--rate", "1000", "--duration", "3", "--rows-per-txn", "7",
        "--bootstrap-servers", kafka_bootstrap, "--worker-count", "4", "--timeout", "120",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("name", "value", "unit", "ceiling", "ratio", "sinks", "cores", "load_avg", "params"):
        assert key in figures, key
    assert figures["name"] == "latency" and figures["unit"] == "ms"
    # every offered row was seen in MariaDB (by id) and on the topic (by commit_ts and position)
    assert figures["rows"] == 3000 and figures["every_row_arrived"] is True
    assert figures["offered_rate"] == 1000 and figures["achieved_rate"] > 0
    assert set(figures["sinks"]) == {"mysql", "kafka"}
    for sink in figures["sinks"].values():
        assert 0 <= sink["p50_ms"] <= sink["p99_ms"] <= sink["max_ms"]
        assert len(sink["p99_ms_by_quarter"]) == 4
    assert figures["sinks"]["mysql"]["deadlocks"] == 0 and "worker_retries" in figures["sinks"]["mysql"]
    assert figures["value"] == max(s["p99_ms"] for s in figures["sinks"].values())
    assert figures["ratio"] == pytest.approx(figures["value"] / figures["ceiling"], rel=1e-3)
    assert figures["cores"] >= 1 and len(figures["load_avg"]["after"]) == 3
    assert "offered 3,000 rows" in result.stderr


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--sinks", "redis"], "--sinks"),
        (["--rate", "0"], "--rate"),
        (["--dsn", "sqlite:///tmp/x.db"], "mysql:// DSN"),
    ],
)
def test_bench_latency_refuses_bad_options(flags: list[str], fragment: str) -> None:
    result = run_cli("bench", "latency", *flags, timeout=60)
    assert result.returncode != 0
    assert fragment in result.stderr, result.stderr[-2000:]
