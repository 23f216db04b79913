"""``binlog-bridge bench kafka`` with tiny sizes against the real broker: it runs end to end and
prints its JSON line (both sides count only acknowledged messages: the sink's flush position must
reach the last commit_ts, the bare producer's flush must leave nothing undelivered)."""

from __future__ import annotations

import json

import pytest

from tests.support.process import run_cli

pytestmark = pytest.mark.kafka


def test_bench_kafka_prints_json_on_its_last_line(kafka_bootstrap: str) -> None:
    result = run_cli(
        "bench",
        "kafka",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--rows",
        "2000",
        "--repeat",
        "1",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("name", "value", "unit", "ceiling", "ratio", "runs", "params", "load_avg", "cores"):
        assert key in figures, key
    # two ceilings: encode-and-produce (the ratio's) and the bare producer of pre-encoded messages
    assert set(figures["runs"]) == {"sink", "encode_and_produce", "bare_producer"}
    assert figures["bare_ratio"] == pytest.approx(figures["value"] / figures["bare_producer"], rel=1e-3)
    assert figures["name"] == "kafka" and figures["unit"] == "rows/s"
    assert figures["value"] > 0 and figures["ceiling"] > 0
    assert figures["ratio"] == pytest.approx(figures["value"] / figures["ceiling"], rel=1e-3)
    assert figures["params"]["rows"] == 2000
    assert figures["params"]["producer"]["acks"] == "all"
    assert figures["params"]["producer"]["enable.idempotence"] is True
    # what the sink's rows cost: CPU of this process (and of the broker, here), produce requests
    assert figures["cpu_us_per_row"]["sink"] > 0 and "broker" in figures["cpu_us_per_row"]
    assert figures["per_second"]["produce_requests"] > 0 and figures["per_1000_rows"]["produce_requests"] > 0
    assert "kafka sink: 2,000 rows" in result.stderr and "bare producer: 2,000 messages" in result.stderr
    assert "fastavro + producer: 2,000 rows" in result.stderr
