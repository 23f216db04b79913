"""``binlog-bridge bench pump`` with tiny sizes: it starts its meta, pump and
ceiling server, drives each, and prints its JSON line with both ceilings and
the CPU each process spent per binlog."""

from __future__ import annotations

import json

import pytest

from tests.support.process import run_cli

pytestmark = pytest.mark.timeout(300)


def test_bench_pump_prints_json_on_its_last_line() -> None:
    result = run_cli("bench", "pump", "--seconds", "1", "--concurrency", "32", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["name"] == "pump" and figures["unit"] == "binlogs/s"
    assert figures["value"] > 0 and figures["ceiling"] > 0 and figures["sdk_ceiling"] > 0
    assert figures["ratio"] == pytest.approx(figures["value"] / figures["ceiling"], rel=1e-3)
    assert set(figures["runs"]) == {"pump", "ceiling", "sdk_ceiling"}
    assert figures["params"]["ceiling_batch"] == 100 and figures["params"]["ceiling_inflight"] == 1
    assert figures["binlogs_per_call"] >= 1
    cpu = figures["cpu_us_per_binlog"]
    assert set(cpu) == {"sdk_to_pump", "ceiling", "sdk_to_ceiling_server"}
    assert set(cpu["sdk_to_pump"]) == {"bench", "pump", "meta"}
    assert cpu["sdk_to_pump"]["pump"] is not None and cpu["sdk_to_pump"]["pump"] > 0
    # the calls behind the binlogs: the SDK's (this process) and the pump's (its /metrics)
    calls = figures["per_second"]["sdk_to_pump"]
    assert set(calls) == {
        "write_binlogs_calls",
        "tso_calls",
        "pump_write_calls",
        "pump_group_commits",
        "pump_fsyncs",
    }
    assert calls["write_binlogs_calls"] > 0 and calls["pump_write_calls"] > 0 and calls["pump_fsyncs"] > 0
    assert set(figures["per_second"]["sdk_to_ceiling_server"]) == {"write_binlogs_calls", "tso_calls"}
    assert figures["cores"] >= 1 and len(figures["load_avg"]) == 3
    assert "ceiling (100 binlogs per call, 1 in flight)" in result.stderr
