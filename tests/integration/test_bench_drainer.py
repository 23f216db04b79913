"""``binlog-bridge bench drainer`` with tiny sizes: it runs end to end and prints its JSON line."""

from __future__ import annotations

import json

from tests.support.process import run_cli


def test_bench_drainer_prints_json_on_its_last_line() -> None:
    result = run_cli("bench", "drainer", "--rows", "2000", "--concurrency", "16", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    line = result.stdout.strip().splitlines()[-1]
    figures = json.loads(line)
    for key in ("name", "value", "unit", "ceiling", "ratio", "pull_only", "params", "load_avg"):
        assert key in figures, key
    assert figures["name"] == "drainer"
    assert figures["unit"] == "rows/s"
    assert figures["value"] > 0
    assert figures["ceiling"] > 0
    assert figures["params"]["rows"] == 2000
    assert "drainer:" in result.stderr  # progress goes to stderr
