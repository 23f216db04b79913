"""``binlog-bridge bench redis`` with tiny sizes against the real Redis: it runs end to end and prints
its JSON line (both sides must leave no key of the run behind)."""

from __future__ import annotations

import json

import pytest

from tests.support.process import run_cli

pytestmark = pytest.mark.redis


def test_bench_redis_prints_json_on_its_last_line(redis_url: str) -> None:
    result = run_cli("bench", "redis", "--url", redis_url, "--rows", "3000", "--repeat", "1", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    for key in (
        "name",
        "value",
        "unit",
        "ceiling",
        "ratio",
        "runs",
        "params",
        "load_avg",
        "per_key_pipeline",
        "cpu_us_per_key",
    ):
        assert key in figures, key
    assert figures["name"] == "redis" and figures["unit"] == "keys/s"
    assert figures["value"] > 0 and figures["ceiling"] > 0 and figures["per_key_pipeline"] > 0
    assert figures["ratio"] == pytest.approx(figures["value"] / figures["ceiling"], rel=1e-3)
    assert all(len(figures["cpu_us_per_key"][side]) == 1 for side in ("sink", "bare_client"))
    assert figures["params"]["rows"] == 3000 and figures["params"]["unlink"] is True
    assert "redis sink: 3,000 keys" in result.stderr and "bare client: 3,000 keys" in result.stderr
