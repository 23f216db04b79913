"""bench/latency_sweep.py: the pass rule and the binary search, on figures given by the test."""

from __future__ import annotations

import argparse
from typing import Any

from bench.latency_sweep import sweep_set, verdict


def result(rate: float, achieved: float, p99: float, quarters: list[float]) -> dict[str, Any]:
    return {
        "offered_rate": rate,
        "achieved_rate": achieved,
        "sinks": {"mysql": {"p99_ms": p99, "p99_ms_by_quarter": quarters}},
        "budget": {"bridge_us_per_row": 50.0, "cpu_us_per_row": {}},
        "load_avg": {"before": [1.0], "after": [1.0]},
    }


def test_a_rate_passes_only_when_offered_in_time_and_flat() -> None:
    assert verdict(result(1000, 990, 400, [300, 350, 320, 380])) == ""
    assert "offered only" in verdict(result(1000, 800, 400, [300, 300, 300, 300]))
    assert "p99 1,200 ms" in verdict(result(1000, 1000, 1200, [300, 300, 300, 300]))
    assert "grows by quarter" in verdict(result(1000, 1000, 900, [200, 400, 600, 900]))


def test_the_search_converges_on_the_highest_passing_rate() -> None:
    tried: list[float] = []

    def run(args: argparse.Namespace) -> dict[str, Any]:
        tried.append(args.rate)
        if args.rate > 7000:
            return result(args.rate, args.rate, 5000, [1000, 2000, 3000, 5000])
        return result(args.rate, args.rate, 300, [300, 300, 300, 300])

    args = argparse.Namespace(
        sweep=True, sinks="mysql", rate=0, sweep_max=16000, sweep_step=500, sweep_steps=5
    )
    outcome = sweep_set(args, "mysql", run)
    assert tried == [8000, 4000, 6000, 7000, 7500]
    assert outcome["best_rate"] == 7000
    assert [p["passed"] for p in outcome["probes"]] == [False, True, True, True, False]
