"""``binlog-bridge bench mysql`` with tiny sizes: it runs end to end against MariaDB, checks the
downstream against its preload and prints its JSON line; bad options are refused."""

from __future__ import annotations

import json

import pytest

from tests.support.process import run_cli

pytestmark = pytest.mark.mysql


def test_bench_mysql_prints_json_on_its_last_line() -> None:
    result = run_cli(
        "bench", "mysql", "--rows", "3000", "--rows-per-txn", "7", "--concurrency", "8",
        "--mix", "insert=5,update=3,delete=2", "--worker-count", "4", "--batch-rows", "50",
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("name", "value", "unit", "ceiling", "ratio", "replay", "replay_ratio", "params", "verified"):
        assert key in figures, key
    assert figures["name"] == "mysql" and figures["unit"] == "rows/s"
    assert figures["value"] > 0 and figures["ceiling"] > 0 and figures["replay"] > 0
    assert figures["ratio"] == pytest.approx(figures["value"] / figures["ceiling"], rel=1e-3)
    params = figures["params"]
    assert params["rows"] == 3000 and params["worker_count"] == 4 and params["batch_rows"] == 50
    changes = params["changes"]
    assert sum(changes.values()) == 3000 and all(changes[k] > 0 for k in ("insert", "update", "delete"))
    assert figures["verified"]["rows"] == changes["insert"] - changes["delete"]
    # progress on stderr; the replay's table is checked against the preload too
    assert "orders verified" in result.stderr and "replay_orders verified" in result.stderr
    assert "ceiling (pymysql" in result.stderr
    assert figures["deadlocks"] == 0 and figures["worker_retries"] >= 0  # from the drainer's /metrics
    assert figures["drainer_peak_rss_mib"] > 0
    # us per row change of each stage: CPU of build, decode, plan on a sample; the workers' waits
    stages = figures["us_per_row_stages"]
    assert stages["sample_rows"] == 3000
    assert all(stages[k] > 0 for k in ("build", "decode", "plan", "execute", "commit")), stages
    # CPU per row of each party, read from /proc: the drainer child and the ceiling's own client
    cpu = figures["cpu_us_per_row"]
    assert cpu["drainer_phase"]["drainer"] > 0 and cpu["ceiling"]["client"] > 0
    assert set(cpu["drainer_phase"]) == {"drainer", "pumps", "server"}
    # the calls behind the rows: pulled messages, the sink's statements and COMMITs, the server's
    calls = figures["per_second"]
    assert calls["drainer_pulled_messages"] > 0 and calls["sink_statements"] > 0 and calls["sink_commits"] > 0
    assert calls["server_statements (server-wide)"] > 0 and calls["server_fsyncs (server-wide)"] is not None
    assert figures["per_1000_rows"]["sink_commits"] > 0


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--mix", "insert=0,update=1"], "insert weight must be positive"),
        (["--mix", "upsert=3"], "kind one of insert, update, delete"),
        (["--worker-count", "0"], "--worker-count"),
        (["--dsn", "sqlite:///tmp/x.db"], "mysql:// DSN"),
    ],
)
def test_bench_mysql_refuses_bad_options(flags: list[str], fragment: str) -> None:
    result = run_cli("bench", "mysql", "--rows", "10", *flags, timeout=60)
    assert result.returncode != 0
    assert fragment in result.stderr, result.stderr[-2000:]
