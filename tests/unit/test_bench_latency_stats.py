"""``bench latency``'s arithmetic (bench/latency_watch.py): nearest-rank percentiles, per-row latency
from each sink's sightings, and the p99 of each quarter of the load (no services)."""

from __future__ import annotations

import pytest

from bench.latency_watch import Txn, kafka_summary, mysql_summary, percentiles


def test_percentiles_are_nearest_rank_in_milliseconds() -> None:
    latencies = [i / 1000 for i in range(1, 101)]  # 1 .. 100 ms
    assert percentiles(latencies) == {"p50_ms": 50.0, "p99_ms": 99.0, "max_ms": 100.0}
    assert percentiles([0.25]) == {"p50_ms": 250.0, "p99_ms": 250.0, "max_ms": 250.0}


def test_each_row_is_measured_from_its_transactions_commit() -> None:
    # two transactions of two rows, committed at t=10 and t=20; the second sink saw it late
    txns = [Txn(0, 2, 1000, 10.0), Txn(2, 2, 1010, 20.0)]
    mysql = mysql_summary(txns, {0: 10.1, 1: 10.2, 2: 20.1, 3: 21.0})
    assert mysql["max_ms"] == pytest.approx(1000.0) and mysql["p50_ms"] == pytest.approx(100.0)
    kafka = kafka_summary(txns, {(1000, 0): 10.05, (1000, 1): 10.05, (1010, 0): 20.05, (1010, 1): 20.05})
    assert kafka["p50_ms"] == kafka["max_ms"] == pytest.approx(50.0)
    # by commit time: the first transaction is in the first quarter, the last in the last
    trend = mysql["p99_ms_by_quarter"]
    assert isinstance(trend, list) and trend[1] is None and trend[2] is None
    assert trend[0] == pytest.approx(200.0) and trend[3] == pytest.approx(1000.0)


def test_a_row_never_seen_is_an_error_not_a_figure() -> None:
    with pytest.raises(KeyError):
        mysql_summary([Txn(0, 2, 1000, 10.0)], {0: 10.1})
