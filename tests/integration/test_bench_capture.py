"""``binlog-bridge bench capture`` with tiny sizes against a private binlog-enabled MariaDB: it runs
end to end (meta, three pumps, the capture child, the bare decoder) and prints its JSON line, with
the decoder's figure as the ceiling of the same run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.mariadb_instance import MariaDBInstance
from tests.support.process import free_port, run_cli

pytestmark = pytest.mark.mysql


def test_bench_capture_prints_json_on_its_last_line(tmp_path: Path) -> None:
    source = MariaDBInstance(tmp_path / "source", free_port(), binlog=True)
    source.start()
    try:
        dsn = f"mysql://root@127.0.0.1:{source.port}/?ssl-mode=disabled"
        argv = [
            "bench",
            "capture",
            "--source",
            dsn,
            "--rows",
            "600",
            "--rows-per-txn",
            "100",
            "--timeout",
            "120",
        ]
        result = run_cli(*argv, timeout=300)
    finally:
        source.stop()
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("name", "value", "unit", "ceiling", "ratio", "runs", "params", "load_avg", "cores"):
        assert key in figures, key
    assert figures["name"] == "capture" and figures["unit"] == "row changes/s"
    assert figures["value"] > 0 and figures["ceiling"] == max(figures["runs"]["decode_only"]) > 0
    assert figures["ratio"] == pytest.approx(figures["value"] / figures["ceiling"], rel=1e-3)
    assert figures["params"]["rows"] == 600 and figures["params"]["rows_per_txn"] == 100
    assert "1800 row changes in the binlog" in result.stderr
    cpu = figures["cpu_us_per_row"]
    assert cpu["capture"] > 0 and cpu["decode_only"] > 0
    assert figures["cpu_ratio"] == pytest.approx(cpu["decode_only"] / cpu["capture"], abs=1e-3)
    # the calls behind the rows: the capture's transactions and SDK calls, the pumps' writes
    calls = figures["per_second"]
    assert set(calls) == {
        "capture_transactions",
        "write_binlogs_calls",
        "tso_calls",
        "pump_write_calls",
        "pump_fsyncs",
    }
    assert (
        calls["capture_transactions"] > 0
        and calls["write_binlogs_calls"] > 0
        and calls["pump_write_calls"] > 0
    )
