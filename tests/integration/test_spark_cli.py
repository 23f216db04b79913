"""The query side of the Spark consumers without Spark: an index written by the store, read by
``python -m spark_consumers search`` and ``stats`` as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spark_consumers.index.store import ChangeIndex
from spark_consumers.latest import latest_per_document
from tests.support.process import free_port


def cli(*args: str) -> str:
    argv = [sys.executable, "-m", "spark_consumers", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout


def test_search_and_stats_commands_read_the_index(tmp_path: Path) -> None:
    """The query side alone (no Spark): an index written by the store, read by the CLI."""
    types = json.dumps({"id": "int", "title": "string", "price": "decimal"})
    rows = [
        {"op": "c", "db": "shop", "table": "items", "key": json.dumps({"id": i}), "before": None,
         "after": json.dumps({"id": i, "title": f"{'red bike' if i % 2 else 'car'} {i}", "price": "9"}),
         "types": types, "commit_ts": 100 + i, "position": 0}
        for i in range(10)
    ]  # fmt: skip
    store = ChangeIndex(tmp_path / "ix")
    store.apply(latest_per_document(rows))
    store.close()
    out = cli("search", "--index", str(tmp_path / "ix"), "bike", "--table", "shop.items", "--limit", "3")
    found = [json.loads(line) for line in out.splitlines()]
    assert len(found) == 3 and all("bike" in f["row"]["title"] and f["score"] > 0 for f in found), out
    summary = json.loads(cli("stats", "--index", str(tmp_path / "ix")))
    assert summary["tables"] == {"shop.items": 10} and summary["last_commit_ts"] == 109, summary


def test_search_and_stats_on_a_missing_index_say_so_in_one_line(tmp_path: Path) -> None:
    for args in (["search", "--index", str(tmp_path / "none"), "bike"], ["stats", "--index", str(tmp_path)]):
        argv = [sys.executable, "-m", "spark_consumers", *args]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stdout == "", done
        assert done.stderr.splitlines() == [
            f"error: --index {args[2]}: no index there (run the index job first)"
        ]


@pytest.mark.spark
def test_the_index_job_without_a_broker_fails_in_one_line_naming_the_cause(tmp_path: Path) -> None:
    """No broker at the address: one line naming the cause, exit 3 (a dependency could not be
    reached); Spark's own log goes to the file the line names, not to the terminal."""
    nobody = f"127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "spark_consumers", "index", "--bootstrap-servers", nobody,
            "--topics", "nothing.*", "--index", str(tmp_path / "ix"), "--checkpoint", str(tmp_path / "cp"),
            "--available-now"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: kafka: cannot list topics: "), done.stderr[-3000:]
    assert f"(Spark's log: {tmp_path / 'cp'}.spark.log)" in lines[0]
    assert (tmp_path / "cp.spark.log").exists()
